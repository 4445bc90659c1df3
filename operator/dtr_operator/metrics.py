"""Prometheus metrics of the operator (served on --metrics-port at /metrics). Names are documented in
docs/performance.md; change them only together with that page."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from .reasons import FAILED, PENDING, RUNNING, SUCCEEDED, SUSPENDED, TERMINAL

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

# Per run, from its status (what users graph); a run's series go when the run is deleted.
RUN_LABELS = ["namespace", "run"]
RUN_GAUGES = {
    "timeToRunningSeconds": Gauge(
        "dtr_run_time_to_running_seconds", "Seconds from the run's creation to its TFJob running", RUN_LABELS
    ),
    "durationSeconds": Gauge(
        "dtr_run_duration_seconds", "Seconds from the run's creation to its end (finished runs)", RUN_LABELS
    ),
    "workerRestarts": Gauge(
        "dtr_run_worker_restarts", "Restarts of the run's worker containers (known when the run finishes)", RUN_LABELS
    ),
    "resumes": Gauge(
        "dtr_run_resumes", "Times the run was started again after Kubernetes took workers away", RUN_LABELS
    ),
    "accuracy": Gauge("dtr_run_accuracy", "The run's final evaluation accuracy (succeeded runs)", RUN_LABELS),
    "examplesPerSecond": Gauge(
        "dtr_run_examples_per_second",
        "Global training throughput: the last epoch's while running, the run's own once finished",
        RUN_LABELS,
    ),
    "progressPercentage": Gauge("dtr_run_progress_percent", "Epochs finished, as a percentage of all", RUN_LABELS),
}

PHASES = (PENDING, RUNNING, SUSPENDED, SUCCEEDED, FAILED)
UNKNOWN_PHASE = "Unknown"  # a phase the operator never writes (whoever may write a run's status can): one label
HANDLERS = ("run", "tfjob", "pods", "progress", "sweep")
# Answers the operator expects and acts on (absent object, create race, stale resourceVersion).
EXPECTED_STATUSES = (404, 409)

# Every series exists from the start (0 rather than "no data" on a dashboard).
for _phase in (*PHASES, UNKNOWN_PHASE):
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
            self._phases[uid] = (phase if phase in PHASES else UNKNOWN_PHASE) if phase else PENDING
            self._publish()

    def gone(self, uid: str) -> None:
        with self._lock:
            self._phases.pop(uid, None)
            self._publish()

    def _publish(self) -> None:
        counts = dict.fromkeys((*PHASES, UNKNOWN_PHASE), 0)
        for phase in self._phases.values():
            counts[phase] = counts.get(phase, 0) + 1
        for phase, n in counts.items():
            RUNS.labels(phase=phase).set(n)


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    try:
        return (_aware(end) - _aware(start)).total_seconds()
    except (TypeError, ValueError):  # not a string, not a timestamp
        return None


def _aware(timestamp: str) -> datetime:
    """A status timestamp; one without a zone (not the operator's: RFC 3339 has one) is taken as UTC."""
    parsed = datetime.fromisoformat(timestamp)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _ended_at(status: Mapping[str, Any]) -> str | None:
    """When a finished run ended: its TFJob's completionTime, else when its terminal condition became true."""
    if status.get("completionTime"):
        return status["completionTime"]
    phase = status.get("phase")
    for cond in status.get("conditions") or []:
        if cond.get("type") == phase and cond.get("status") == "True":
            return cond.get("lastTransitionTime")
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def run_figures(body: Mapping[str, Any]) -> dict[str, float]:
    """The per-run figures a run's status and metadata give now (pure): keys of RUN_GAUGES."""
    status = body.get("status") or {}
    created = (body.get("metadata") or {}).get("creationTimestamp")
    finished = status.get("phase") in TERMINAL
    metrics = status.get("metrics") or {}
    progress = status.get("progress") or {}
    rate = metrics.get("examplesPerSecond") if finished else progress.get("examplesPerSecond")
    figures = {
        "timeToRunningSeconds": _seconds_between(created, status.get("startTime")),
        "durationSeconds": _seconds_between(created, _ended_at(status)) if finished else None,
        "workerRestarts": _number(status.get("workerRestarts")),
        "resumes": _number(status.get("resumes")),
        "accuracy": _number(metrics.get("accuracy")),
        "examplesPerSecond": _number(rate),
        "progressPercentage": _number(progress.get("progressPercentage")),
    }
    return {key: value for key, value in figures.items() if value is not None}


class RunFigures:
    """The RUN_GAUGES series of every run the operator sees; a run's series go with the run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[tuple[str, str], set[str]] = {}

    def seen(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        figures = run_figures(body)
        with self._lock:
            for key in self._keys.get((namespace, name), set()) - figures.keys():
                RUN_GAUGES[key].remove(namespace, name)
            for key, value in figures.items():
                RUN_GAUGES[key].labels(namespace=namespace, run=name).set(value)
            self._keys[(namespace, name)] = set(figures)

    def gone(self, namespace: str, name: str) -> None:
        with self._lock:
            for key in self._keys.pop((namespace, name), set()):
                RUN_GAUGES[key].remove(namespace, name)


def serve(port: int) -> None:
    start_http_server(port)
