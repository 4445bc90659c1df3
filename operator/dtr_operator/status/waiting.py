"""A run waiting for its worker pods, or short of them while Running: why, from the pods and the TFJob's events.
Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..reasons import (
    PENDING,
    RUNNING,
    STALLED_CONDITION,
    TFJOB_CREATED,
    TFJOB_RUNNING,
    TFJOB_SUBMITTED,
    WORKERS_NOT_ALL_RUNNING,
    WORKERS_NOT_STARTING,
)
from ..spec import RunSpec
from .compute import _base
from .pods import disrupted_workers, stuck_workers
from .state import State, _created_message, clean_text

# The training-operator's event reasons when the API server refuses a pod it creates for a TFJob (quota,
# an unknown PriorityClass, Pod Security admission, a webhook): no pod exists to look at, only these.
CREATE_REFUSED = frozenset({"FailedCreatePod", "FailedCreate"})
MAX_REFUSAL = 300


def refused_pods(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The line for the newest refusal among a TFJob's events (the API server's own words), or none."""
    refused = [e for e in events if e.get("reason") in CREATE_REFUSED and e.get("type") == "Warning"]
    if not refused:
        return []
    newest = max(refused, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return [f"the training-operator cannot create them: {clean_text(newest.get('message') or '', MAX_REFUSAL)}"]


# Reasons of a run whose TFJob should have made its pods, none of which runs yet. TFJobSubmitted too: a
# training-operator that cannot create a pod does not record the TFJob as Created either.
WAITING_FOR_PODS = frozenset({TFJOB_SUBMITTED, TFJOB_CREATED, WORKERS_NOT_STARTING})
# Reasons of a Running run that may be short of workers: the TFJob runs once one worker runs.
SHORT_OF_WORKERS = frozenset({TFJOB_RUNNING, WORKERS_NOT_ALL_RUNNING})


def workers_short(status: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(workers that run or succeeded, workers) of a Running run that has fewer of them than workers
    (status.workersReady "a/b", a < b, as tfjob_status counts them from the TFJob), else None."""
    status = status or {}
    if status.get("phase") != RUNNING or status.get("reason") not in SHORT_OF_WORKERS:
        return None
    ready, _, total = str(status.get("workersReady") or "").partition("/")
    if not (ready.isdigit() and total.isdigit()):
        return None
    return (int(ready), int(total)) if int(ready) < int(total) else None


def waits_for_pods(status: Mapping[str, Any] | None) -> bool:
    """Whether the run waits for worker pods: none runs yet (WAITING_FOR_PODS), or not all (workers_short)."""
    status = status or {}
    pending = status.get("phase") == PENDING and status.get("reason") in WAITING_FOR_PODS
    return pending or workers_short(status) is not None


def waiting_status(
    run: RunSpec, pods: Sequence[Mapping[str, Any]], previous: Mapping[str, Any], now: str,
    refused: Sequence[str] = (),
) -> dict[str, Any]:  # fmt: skip
    """A run whose TFJob created its pods but none runs yet, or not all (workers_short): say why, when they cannot
    start by themselves (a wrong image, a missing Secret, no node with room) or cannot be created (`refused`:
    refused_pods); and no more once the cause is gone. Any other status is left as is."""
    lines = [*refused, *disrupted_workers(pods), *stuck_workers(pods)]
    if (short := workers_short(previous)) is not None:
        state = _short_state(run, short, lines, previous)
    elif previous.get("phase") == PENDING and previous.get("reason") in WAITING_FOR_PODS:
        state = _waiting_state(run, lines, previous)
    else:
        state = None
    if state is None:
        return dict(previous)
    status = {**previous, **_base(run, state, previous, now)}
    if _stalled(previous):  # the stall watchdog's message stays (watchdog.py); the Running condition says why
        status["message"] = previous.get("message")
    return status


def _waiting_state(run: RunSpec, lines: Sequence[str], previous: Mapping[str, Any]) -> State | None:
    """A run none of whose workers runs yet: why they cannot start, back to TFJobCreated once that has passed."""
    if lines:
        message = clean_text("worker pods cannot start: " + "; ".join(lines))
        return State(PENDING, WORKERS_NOT_STARTING, message, created=True)
    if previous.get("reason") == WORKERS_NOT_STARTING:
        return State(PENDING, TFJOB_CREATED, _created_message(run.tfjob_name), created=True)
    return None


def _short_state(
    run: RunSpec, short: tuple[int, int], lines: Sequence[str], previous: Mapping[str, Any]
) -> State | None:
    """A Running run some of whose workers do not run: training waits for all of them (every step of
    MultiWorkerMirroredStrategy is a collective of all workers), so say who cannot start and why; back to
    TFJobRunning once that has passed."""
    if lines:
        ready, total = short
        message = clean_text(f"{ready} of {total} workers run; training waits for all (MultiWorkerMirroredStrategy): "
                             + "; ".join(lines))  # fmt: skip
        return State(RUNNING, WORKERS_NOT_ALL_RUNNING, message, created=True)
    if previous.get("reason") == WORKERS_NOT_ALL_RUNNING:
        return State(RUNNING, TFJOB_RUNNING, f"TFJob {run.tfjob_name} is running", created=True)
    return None


def _stalled(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == STALLED_CONDITION and c.get("status") == "True" for c in status.get("conditions") or [])
