"""The whole status from what exists (TFJob, its pods) and what it said before; what to write, and never a
finished run's regression. Pure: the clock is a parameter, so the same observation twice gives the same status and no
write."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..api import (
    SUSPENDED_BY,
    SUSPENDED_BY_ANNOTATION,
)
from ..reasons import (
    CODE_CHANGED,
    DIVERGED,
    FAILED,
    METRICS_UNAVAILABLE,
    MODEL_NAME_OWNED,
    NETWORK_POLICY_NOT_HELD,
    OBJECT_STORE_FAILURES,
    PENDING,
    PREEMPTED,
    QUEUED,
    RESUMING,
    RUN_SUSPENDED,
    RUNNING,
    SUCCEEDED,
    SUSPENDED,
    SUSPENDING,
    TERMINAL,
    TFJOB_CREATED,
    TFJOB_RUNNING,
    TFJOB_SUBMITTED,
    TFJOB_SUSPENDED,
    TRAINING_SUCCEEDED,
    USER_CODE_ERROR,
    WORKERS_NOT_ALL_RUNNING,
    WORKERS_NOT_STARTING,
)
from ..spec import RunSpec
from .conditions import conditions_for
from .pods import (
    chief_pod,
    code_changed,
    disrupted_workers,
    divergence,
    failed_workers,
    model_name_owned,
    object_store_failure,
    own_pods,
    termination_message,
    user_code_failure,
    worker_restarts,
)
from .progress import final_progress
from .state import State, clean_text, is_terminal, kueue_queue, suspended_by_other, tfjob_state, worker_counts
from .summary import Summary, headline_text, parse_summary


def _base(run: RunSpec, state: State, previous: Mapping[str, Any], now: str) -> dict[str, Any]:
    children = f"TFJob {run.tfjob_name} and PVC {run.pvc_name} exist" if run.has_volume else \
        f"TFJob {run.tfjob_name} exists"  # fmt: skip
    return {
        "phase": state.phase,
        "reason": state.reason,
        "message": state.message,
        "observedGeneration": run.generation,
        "tfJob": run.tfjob_name,
        **({"pvc": run.pvc_name} if run.has_volume else {}),
        "conditions": conditions_for(state, previous.get("conditions") or [], now, run.generation, children),
    }


def state_status(run: RunSpec, state: State, previous: Mapping[str, Any], now: str) -> dict[str, Any]:
    """Status for a run whose TFJob is not (yet) there: waiting, or failed before it ran."""
    status = _base(run, state, previous, now)
    status["workersReady"] = previous.get("workersReady") or f"0/{run.workers}"
    return status


def unparsed_status(
    state: State, previous: Mapping[str, Any], now: str, generation: int | None
) -> dict[str, Any]:
    """Status for a run whose spec cannot be read (stored before a schema change): why, and nothing else."""
    return {
        "phase": state.phase,
        "reason": state.reason,
        "message": state.message,
        "observedGeneration": generation,
        "conditions": conditions_for(state, previous.get("conditions") or [], now, generation, ""),
    }


def _explained(
    state: State, run: RunSpec, pods: Sequence[Mapping[str, Any]], previous: Mapping[str, Any], all_run: bool,
    gone: Sequence[Mapping[str, Any]] = (),
) -> tuple[State, Summary | None]:  # fmt: skip
    """The TFJob's state with what the pods add: the chief's summary, who failed (`gone`: workers already deleted),
    why none or not all start (`all_run`: every worker runs or has succeeded, as the TFJob counts them)."""
    if state.phase == SUCCEEDED:
        summary = parse_summary(termination_message(chief_pod(pods)), run.pvc_name if run.has_volume else None)
        if summary.model and summary.headline and summary.problem is None:
            name, value = summary.headline
            done = f"{name} {value:.4f}, model exported to {summary.model['path']}{summary.stopped_text()}"
            return State(SUCCEEDED, TRAINING_SUCCEEDED, done, created=True), summary
        partial = f"training succeeded, but {summary.problem}"
        return State(SUCCEEDED, METRICS_UNAVAILABLE, partial, created=True), summary
    if state.phase == FAILED:
        return _failure(state, pods, gone), None
    return _still_explained(state, previous, all_run), None


def _still_explained(state: State, previous: Mapping[str, Any], all_run: bool) -> State:
    """The TFJob says nothing new: the pods' own trouble, found by waiting_status, still holds (and its message)."""
    said, message = previous.get("reason"), previous.get("message") or state.message
    if state.reason in (TFJOB_SUBMITTED, TFJOB_CREATED) and said == WORKERS_NOT_STARTING:
        return State(PENDING, WORKERS_NOT_STARTING, message, created=True)
    if state.reason == TFJOB_RUNNING and said == WORKERS_NOT_ALL_RUNNING and not all_run:
        return State(RUNNING, WORKERS_NOT_ALL_RUNNING, message, created=True)
    return state


# The trainer's permanent failures that a worker's one line explains, by reason. Code other than the recorded comes
# first, whatever else failed; another run's model name next: it stops every worker before any training.
_EXPLAINED = ((code_changed, CODE_CHANGED), (model_name_owned, MODEL_NAME_OWNED), (user_code_failure, USER_CODE_ERROR),
              (divergence, DIVERGED))  # fmt: skip


def _failure(state: State, pods: Sequence[Mapping[str, Any]], gone: Sequence[Mapping[str, Any]] = ()) -> State:
    """A failed TFJob's state with who failed: the run's code file changed since it was recorded, another run owns
    its model name, its own code failed, its loss diverged or its object store check failed (the worker's one
    line), else each failed or disrupted worker, those already gone included."""
    for line_of, reason in _EXPLAINED:
        if line := line_of(pods):
            return State(FAILED, reason, line, created=True)
    if store := object_store_failure(pods):
        return State(FAILED, OBJECT_STORE_FAILURES[store[0]], store[1], created=True)
    if why := [*disrupted_workers([*pods, *gone]), *failed_workers(pods)]:
        return State(FAILED, state.reason, clean_text(f"{state.message} {'; '.join(why)}"), created=True)
    return state


def _epoch_note(previous: Mapping[str, Any]) -> str:
    done = (previous.get("progress") or {}).get("epochsDone")
    return f"the last finished epoch was {done}" if done else "no epoch had finished"


def _suspended(run: RunSpec, previous: Mapping[str, Any], tfjob_suspended: bool) -> State:
    """A run whose spec.suspend is true: suspended, or on its way there."""
    resume = f"kubectl patch dtr {run.name} --type=merge -p '{{\"spec\":{{\"suspend\":false}}}}' resumes it"
    if tfjob_suspended:
        message = f"suspended (spec.suspend): no worker pods; {_epoch_note(previous)}; {resume}"
        return State(SUSPENDED, RUN_SUSPENDED, message, created=True)
    return State(SUSPENDED, SUSPENDING, f"suspending: TFJob {run.tfjob_name} is stopping its pods", created=True)


def suspension(state: State, run: RunSpec, previous: Mapping[str, Any], tfjob: Mapping[str, Any]) -> State:
    """The TFJob's state as the run's suspend and queue explain it (a finished run stays finished)."""
    if state.phase in TERMINAL:
        return state
    tfjob_suspended = state.reason == TFJOB_SUSPENDED
    if run.suspend:
        return _suspended(run, previous, tfjob_suspended)
    return _held(state, run, previous, tfjob) if tfjob_suspended else state


def _held(state: State, run: RunSpec, previous: Mapping[str, Any], tfjob: Mapping[str, Any]) -> State:
    """A run not suspended whose TFJob is: held by the operator for its NetworkPolicy, queued in Kueue, suspended by
    someone else, or being resumed."""
    if (unguarded := _unguarded(previous, tfjob)) is not None:
        return unguarded
    if (queue := run.queue_name or kueue_queue(tfjob)) is not None:
        if previous.get("phase") == RUNNING or previous.get("reason") == PREEMPTED:
            message = (f"preempted: Kueue took back the run's admission and suspended TFJob {run.tfjob_name}; "
                       f"waiting in LocalQueue {queue} to be admitted again; {_epoch_note(previous)}, and the "
                       "workers continue from it")  # fmt: skip
            return State(SUSPENDED, PREEMPTED, message, created=True)
        message = f"waiting in Kueue LocalQueue {queue} for admission (the TFJob stays suspended until then)"
        return State(PENDING, QUEUED, message, created=True)
    if suspended_by_other(tfjob):
        message = (f"TFJob {run.tfjob_name} was suspended, not by this operator (it lacks the annotation "
                   f"{SUSPENDED_BY_ANNOTATION}: {SUSPENDED_BY}); whoever suspended it (a queue manager, an admin) "
                   f"resumes it: the operator does not")  # fmt: skip
        return State(PENDING, TFJOB_SUSPENDED, message, created=True)
    if previous.get("phase") == SUSPENDED or previous.get("reason") == RESUMING:
        message = f"resuming: TFJob {run.tfjob_name} is being unsuspended; workers continue from their backup"
        return State(PENDING, RESUMING, message, created=True)
    return state


def _unguarded(previous: Mapping[str, Any], tfjob: Mapping[str, Any]) -> State | None:
    """A run whose TFJob the operator suspended until the run's NetworkPolicy is back (decide.policy_not_held): why
    stays said while the TFJob is suspended; None otherwise (resumed: the run is resuming)."""
    if previous.get("reason") != NETWORK_POLICY_NOT_HELD:
        return None
    if not ((tfjob.get("spec") or {}).get("runPolicy") or {}).get("suspend"):
        return None
    return State(SUSPENDED, NETWORK_POLICY_NOT_HELD, previous.get("message") or "", created=True)


def tfjob_status(
    run: RunSpec,
    tfjob: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    previous: Mapping[str, Any],
    now: str,
    gone: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Status mirrored from the run's TFJob and its worker pods, read only once the TFJob has finished: of `pods`, only
    the TFJob's own (status.pods.own_pods; a pod that is merely labelled or named as a worker says nothing), and the
    workers already `gone`, as their events remember them (status.pods.gone_worker: a deleted pod's owner is in no
    event, so these are known by name alone)."""
    pods = own_pods(run, tfjob, pods)
    counts = worker_counts(tfjob)
    ready = counts["active"] + counts["succeeded"]
    state = suspension(tfjob_state(tfjob), run, previous, tfjob)
    state, summary = _explained(state, run, pods, previous, ready >= run.workers, gone)
    status = _base(run, state, previous, now)
    status["workers"] = counts
    status["workersReady"] = f"{ready}/{run.workers}"
    if pods:
        status["workerRestarts"] = worker_restarts(pods)
    job_status = tfjob.get("status") or {}
    for key in ("startTime", "completionTime"):
        if job_status.get(key):
            status[key] = job_status[key]
    if summary is not None:
        status |= _summary_fields(summary)
    if state.phase == SUCCEEDED:
        done = summary.stopped_early[0] if summary is not None and summary.stopped_early else None
        status["progress"] = final_progress(previous.get("progress"), run.training.epochs, now, done)
    return status


def _summary_fields(summary: Summary) -> dict[str, Any]:
    """status.metrics, status.headline and status.model: what the chief's summary gives of them."""
    fields: dict[str, Any] = {}
    if summary.metrics:
        fields["metrics"] = summary.metrics
    if summary.headline:
        fields["headline"] = headline_text(summary.headline)
    if summary.model:
        fields["model"] = summary.model
    return fields


def next_status(previous: Mapping[str, Any] | None, proposed: Mapping[str, Any]) -> dict[str, Any] | None:
    """What to write, or None: nothing changed, or the run already ended (a finished run never regresses)."""
    previous = previous or {}
    if is_terminal(previous):
        return None
    changed = {k: v for k, v in proposed.items() if previous.get(k) != v}
    return changed or None
