"""Prometheus metrics of the operator (served on --metrics-port at /metrics). Names are documented in
docs/performance.md; change them only together with that page."""

from __future__ import annotations

import threading

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RUNS = Gauge("dtr_runs", "DistTrainingRuns seen by this operator, by phase", ["phase"])
RECONCILE_SECONDS = Histogram(
    "dtr_reconcile_seconds",
    "Time spent handling one event, by handler",
    ["handler"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
API_ERRORS = Counter(
    "dtr_api_errors_total",
    "Failed Kubernetes API calls made by the operator, by HTTP status (0 = no answer); "
    "404 NotFound and 409 AlreadyExists/Conflict are answers the operator acts on, not errors",
    ["status"],
)
API_REQUESTS = Counter("dtr_api_requests_total", "Kubernetes API calls made by the operator's handlers")

PHASES = ("Pending", "Running", "Succeeded", "Failed")
HANDLERS = ("run", "tfjob", "pods")
# Answers the operator expects and acts on (absent object, create race, stale resourceVersion).
EXPECTED_STATUSES = (404, 409)

# Every series exists from the start (0 rather than "no data" on a dashboard).
for _phase in PHASES:
    RUNS.labels(phase=_phase).set(0)
for _handler in HANDLERS:
    RECONCILE_SECONDS.labels(handler=_handler)


def count_api_error(status: int) -> None:
    """Count a failed API call, unless its status is an answer the operator acts on."""
    if status not in EXPECTED_STATUSES:
        API_ERRORS.labels(status=str(status)).inc()


class PhaseTracker:
    """uid -> phase for the runs the operator has seen, kept in the RUNS gauge."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phases: dict[str, str] = {}

    def seen(self, uid: str, phase: str | None) -> None:
        with self._lock:
            self._phases[uid] = phase or "Pending"
            self._publish()

    def gone(self, uid: str) -> None:
        with self._lock:
            self._phases.pop(uid, None)
            self._publish()

    def _publish(self) -> None:
        counts = dict.fromkeys(PHASES, 0)
        for phase in self._phases.values():
            counts[phase] = counts.get(phase, 0) + 1
        for phase, n in counts.items():
            RUNS.labels(phase=phase).set(n)


def serve(port: int) -> None:
    start_http_server(port)
