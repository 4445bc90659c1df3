"""What the run's status should say, from what exists (TFJob, its pods) and what it said before. Pure.

The operator writes the result with a merge patch; everything here is deterministic given its
inputs (the clock is a parameter), so the same observation twice gives the same status and no
write.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtr_contract import exits, layout, progress
from dtr_contract import summary as chief_summary
from dtr_contract.progress import EpochEnd

from .api import (
    CONTAINER_NAME,
    KUEUE_QUEUE_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    SUSPENDED_BY,
    SUSPENDED_BY_ANNOTATION,
)
from .reasons import (
    CHILDREN_CREATED,
    CONDITION_TYPES,
    DIVERGED,
    FAILED,
    METRICS_UNAVAILABLE,
    PENDING,
    PREEMPTED,
    QUEUED,
    RESUMING,
    RUN_SUSPENDED,
    RUNNING,
    STALLED_CONDITION,
    SUCCEEDED,
    SUSPENDED,
    SUSPENDING,
    TERMINAL,
    TFJOB_CREATED,
    TFJOB_FAILED,
    TFJOB_RESTARTING,
    TFJOB_RUNNING,
    TFJOB_SUBMITTED,
    TFJOB_SUSPENDED,
    TRAINING_SUCCEEDED,
    USER_CODE_ERROR,
    WORKERS_NOT_ALL_RUNNING,
    WORKERS_NOT_STARTING,
)
from .spec import RunSpec

MAX_MESSAGE = 400
MAX_STATE_MESSAGE = 1024  # a whole status message, or event (kopf cuts events at 1024 too)
MAX_REASON = 128


def clean_text(text: str, limit: int = MAX_MESSAGE) -> str:
    """One line fit for a run's status or an event: control characters (C0, C1, ESC sequences' lead, DEL)
    and bidirectional overrides become spaces, whitespace runs one space, and at most `limit` characters.
    Everything the operator writes there goes through it: some of it quotes what a tenant wrote (an image
    name, a termination message, a log line)."""
    text = " ".join(harmless(str(text)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def harmless(text: str) -> str:
    """The text with every character a terminal or a reader could be fooled by (C0 and C1 controls, so ESC and
    CSI that start escape sequences, DEL, bidirectional overrides) made a space; the rest, spacing included,
    as it was. For `dtr logs`, which prints what a run's code wrote (a log line could retitle the terminal,
    rewrite lines above it, or fake a prompt)."""
    return _UNPRINTABLE.sub(" ", text)


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class State:
    """Where a run is: the phase, why, and one line for a person (cleaned and capped: clean_text)."""

    phase: str
    reason: str
    message: str
    created: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", clean_text(self.reason, MAX_REASON))
        object.__setattr__(self, "message", clean_text(self.message, MAX_STATE_MESSAGE))


# ---- TFJob -> state ---------------------------------------------------------------------------


def _true_conditions(tfjob: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conditions = (tfjob.get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conditions if c.get("status") == "True"}


def _created_message(tfjob_name: str) -> str:
    return f"TFJob {tfjob_name} created, waiting for its worker pods to run"


def tfjob_state(tfjob: Mapping[str, Any]) -> State:
    """The run's state from its TFJob's conditions alone (terminal conditions win)."""
    true = _true_conditions(tfjob)
    name = (tfjob.get("metadata") or {}).get("name", "")

    def msg(cond_type: str, fallback: str) -> str:
        return clean_text(true[cond_type].get("message") or fallback)

    if "Failed" in true:
        reason = true["Failed"].get("reason") or TFJOB_FAILED
        return State(FAILED, reason, msg("Failed", f"TFJob {name} failed"), created=True)
    if "Succeeded" in true:
        return State(SUCCEEDED, TRAINING_SUCCEEDED, msg("Succeeded", f"TFJob {name} succeeded"), created=True)
    if "Suspended" in true:
        return State(PENDING, TFJOB_SUSPENDED, msg("Suspended", f"TFJob {name} is suspended"), created=True)
    if "Restarting" in true:
        return State(RUNNING, TFJOB_RESTARTING, msg("Restarting", "restarting a failed worker"), created=True)
    if "Running" in true:
        return State(RUNNING, TFJOB_RUNNING, msg("Running", f"TFJob {name} is running"), created=True)
    if "Created" in true:
        return State(PENDING, TFJOB_CREATED, _created_message(name), created=True)
    return State(PENDING, TFJOB_SUBMITTED, f"TFJob {name} submitted, waiting for the training-operator", created=True)


def worker_counts(tfjob: Mapping[str, Any]) -> dict[str, int]:
    replica = ((tfjob.get("status") or {}).get("replicaStatuses") or {}).get("Worker") or {}
    return {key: int(replica.get(key) or 0) for key in ("active", "succeeded", "failed")}


# ---- pods -------------------------------------------------------------------------------------


def _tensorflow_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER_NAME:
            return cs
    return {}


def chief_pod(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Worker 0 (the chief when a TFJob has no Chief replica)."""
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(REPLICA_TYPE_LABEL) == "worker" and labels.get(REPLICA_INDEX_LABEL) == "0":
            return pod
    return None


def termination_message(pod: Mapping[str, Any] | None) -> str | None:
    if pod is None:
        return None
    terminated = (_tensorflow_status(pod).get("state") or {}).get("terminated") or {}
    return terminated.get("message")


MAX_WORKER_DETAIL = 160


def worker_restarts(pods: Sequence[Mapping[str, Any]]) -> int:
    """Restarts of the workers' tensorflow containers, all pods together (the kubelet's restartCount)."""
    return sum(int(_tensorflow_status(pod).get("restartCount") or 0) for pod in pods)


def _last_line(message: str | None) -> str:
    tail = [line for line in (message or "").splitlines() if line.strip()]
    return tail[-1].strip() if tail else ""


def _worker_exit(name: str, code: int, terminated: Mapping[str, Any]) -> str:
    if terminated.get("reason") == "OOMKilled":
        return (f"worker {name} was OOMKilled (exit code {code}): it went over its memory limit "
                f"(spec.resources.limits.memory)")
    last = _last_line(terminated.get("message"))
    detail = f": {clean_text(last, MAX_WORKER_DETAIL)}" if last else ""
    return f"worker {name} exited with code {code}{detail}"


def _cause_rank(code: int, terminated: Mapping[str, Any]) -> int:
    """0: the trainer's own error (exit < 128) or an OOM kill; 1: any other signal (a kill at the
    backoff limit gives 143); 2: a peer lost (the consequence of another worker's failure)."""
    if exits.is_peer_lost(code):
        return 2
    return 0 if not exits.is_retryable(code) or terminated.get("reason") == "OOMKilled" else 1


@dataclass(frozen=True)
class WorkerExit:
    """A worker's non-zero exit, as its tensorflow container's state or lastState says it."""

    order: tuple[int, str, str]  # (cause rank, finishedAt, pod name): the likely cause sorts first
    name: str
    code: int
    terminated: Mapping[str, Any]


def _exits_of(pod: Mapping[str, Any]) -> list[WorkerExit]:
    cs = _tensorflow_status(pod)
    name = (pod.get("metadata") or {}).get("name", "?")
    found = []
    for key in ("state", "lastState"):
        terminated = (cs.get(key) or {}).get("terminated") or {}
        if code := terminated.get("exitCode"):
            found.append(WorkerExit((_cause_rank(code, terminated), terminated.get("finishedAt") or "", name), name,
                                    code, terminated))  # fmt: skip
    return found


def worker_exits(pods: Sequence[Mapping[str, Any]]) -> list[WorkerExit]:
    """Each worker whose tensorflow container exited non-zero, once, by its most telling exit; the likely
    cause first.

    A worker's current and previous terminations are both read: under restartPolicy OnFailure a
    permanent error (exit 5, "cannot download mnist") is followed by restarts and then the kill at
    the backoff limit (143), and the kill must not hide the cause. Each worker is named once, by its
    most telling exit (its own error before a kill, the earliest first); the workers go in that order,
    peers that exited because another worker died (dtr_contract.exits.PEER_LOST) last.
    """
    found = [min(mine, key=lambda e: e.order) for pod in pods if (mine := _exits_of(pod))]
    return sorted(found, key=lambda e: e.order)


# A pod's DisruptionTarget condition (Kubernetes >= 1.26): who is deleting it, in a user's words. A worker lost with
# its node, drained away or preempted exits like any failed worker (or not at all, its kubelet gone): this says why.
DISRUPTIONS = {
    "DeletionByTaintManager": "deleted by the taint manager: its node has a NoExecute taint (NotReady, unreachable "
                              "or out of service)",
    "EvictionByEvictionAPI": "evicted through the Eviction API (kubectl drain, or another eviction)",
    "PreemptionByScheduler": "preempted by the scheduler for a pod of higher priority",
    "DeletionByPodGC": "deleted by the pod garbage collector (its node is gone or out of service)",
    "TerminationByKubelet": "terminated by its kubelet (node pressure, or the node shutting down)",
}


def disrupted_workers(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per worker pod that Kubernetes is taking away (DisruptionTarget=True), naming its node and why."""
    lines = []
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
        if (cond := _disruption_target(pod)) is not None:
            name = (pod.get("metadata") or {}).get("name", "?")
            node = (pod.get("spec") or {}).get("nodeName") or "no node"
            lines.append(f"worker {name} on node {node} {_disruption(cond)}")
    return lines


_ASSIGNED = re.compile(r"^Successfully assigned \S+ to (?P<node>\S+)$")


def gone_worker(name: str, events: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """A worker pod deleted before its run failed, as its events remember it, shaped as the pod for
    disrupted_workers: the scheduler's Scheduled event names its node, the taint manager's TaintManagerEviction
    why it went (an out-of-service node's pods are force-deleted at once, and a peer that lost it may fail the
    TFJob after). None when the events tell of no such deletion."""
    if not any(e.get("reason") == "TaintManagerEviction" and (e.get("message") or "").startswith("Marking for deletion")
               for e in events):  # fmt: skip
        return None
    assigned = [m["node"] for e in events if e.get("reason") == "Scheduled"
                if (m := _ASSIGNED.match(e.get("message") or ""))]  # fmt: skip
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
    return {"metadata": {"name": name}, "spec": {"nodeName": assigned[-1]} if assigned else {},
            "status": {"conditions": [condition]}}


def _disruption_target(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if (c.get("type"), c.get("status")) == ("DisruptionTarget", "True")), None)


def _disruption(cond: Mapping[str, Any]) -> str:
    reason = cond.get("reason") or ""
    known = DISRUPTIONS.get(reason)
    text = f"disrupted ({reason or 'no reason given'}): {cond.get('message') or ''}"
    return known or clean_text(text, MAX_WORKER_DETAIL)


def failed_workers(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per worker whose tensorflow container exited non-zero, the likely cause first (worker_exits)."""
    return [_worker_exit(e.name, e.code, e.terminated) for e in worker_exits(pods)]


# The trainer's prefix on its error line ("dtr_trainer[worker-0]: error: "): the user's one line follows it.
_ERROR_PREFIX = re.compile(r"^[\w.-]+\[[\w.-]+\]: error: ")


def _error_line(pods: Sequence[Mapping[str, Any]], is_code: Callable[[int], bool], fallback: str) -> str | None:
    """The first worker that exited with such a code: its one error line (else `fallback`), then the worker."""
    for e in worker_exits(pods):
        if is_code(e.code):
            line = _ERROR_PREFIX.sub("", _last_line(e.terminated.get("message"))) or fallback
            return clean_text(f"{line} (worker {e.name}, exit code {e.code})")
    return None


def user_code_failure(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The run's own code failed (dtr_contract.exits.USER_CODE): the first such worker's one line, which names
    the file, line and error, then the worker; None when no worker exited so."""
    return _error_line(pods, exits.is_user_code, "the run's code failed")


def divergence(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The training loss became NaN or infinite (dtr_contract.exits.DIVERGED): the first such worker's one line,
    which names the epoch, then the worker; None when no worker exited so."""
    return _error_line(pods, exits.is_diverged, "training diverged: the loss became NaN or infinite")


def restart_cannot_help(code: int) -> bool:
    """An exit that the same run would repeat after a restart: its code failed, or its loss diverged. Such a run is
    failed at once: the operator sets its TFJob's backoffLimit to 0 (reconcile.restart_no_more), `dtr run` does
    not restart the worker."""
    return exits.is_user_code(code) or exits.is_diverged(code)


def logs_an_error(log_text: str) -> bool:
    """Whether a worker's log (with or without the runtime's timestamps) holds the trainer's one-line error: it has
    exited, and its pod says with which code (restart_cannot_help)."""
    return any(_ERROR_PREFIX.match(unstamped(line)) for line in log_text.splitlines())


# A container waiting for one of these will not start by itself: the kubelet retries, nothing changes
# until someone fixes the image, the pull secret or the pod's configuration.
STUCK_REASONS = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
})  # fmt: skip


def stuck_workers(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per worker pod that cannot start or cannot be scheduled, sorted by pod name."""
    lines = []
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
        name = (pod.get("metadata") or {}).get("name", "?")
        start = _cannot_start(name, pod)
        lines += [start] if start else _cannot_be_scheduled(name, pod)
    return lines


def _cannot_start(name: str, pod: Mapping[str, Any]) -> str | None:
    """The line for a tensorflow container waiting for one of STUCK_REASONS, else None."""
    waiting = (_tensorflow_status(pod).get("state") or {}).get("waiting") or {}
    if waiting.get("reason") not in STUCK_REASONS:
        return None
    detail = clean_text(waiting.get("message") or "", MAX_WORKER_DETAIL)
    return f"worker {name} cannot start: {waiting['reason']}" + (f": {detail}" if detail else "")


def _cannot_be_scheduled(name: str, pod: Mapping[str, Any]) -> list[str]:
    """A line per PodScheduled=False condition of reason Unschedulable."""
    return [
        f"worker {name} cannot be scheduled: {clean_text(cond.get('message') or '', MAX_WORKER_DETAIL)}"
        for cond in (pod.get("status") or {}).get("conditions") or []
        if (cond.get("type"), cond.get("status"), cond.get("reason")) == ("PodScheduled", "False", "Unschedulable")
    ]


@dataclass(frozen=True)
class Summary:
    """The chief's final summary, or why there is none."""

    metrics: dict[str, Any] | None
    model: dict[str, Any] | None
    problem: str | None
    headline: tuple[str, float] | None = None  # the run's headline metric: (name, value)


def parse_summary(message: str | None, claim: str) -> Summary:
    """The trainer's termination message (dtr_contract.summary) -> metrics, the headline and the model."""
    if not message or not message.strip():
        return Summary(None, None, "the chief worker left no termination message, so no metrics")
    try:
        found = chief_summary.parse_summary(message)
    except Exception:  # any text may be there (a custom image's): it must not stop the run's status
        return Summary(None, None, "the chief worker's termination message cannot be read, so no metrics")
    if found is None:
        return Summary(None, None, "the chief worker's termination message is not a JSON object, so no metrics")
    model = _summary_model(found, claim)
    headline = found.headline()
    wanted = found.metric or chief_summary.default_metric(found.metrics())
    lacking = [f"its headline metric {wanted}"] * (headline is None) + [chief_summary.MODEL_PATH] * (model is None)
    problem = f"the chief worker's summary lacks {' and '.join(lacking)}" if lacking else None
    # status.metrics are the summary's figures under the summary's own names (docs/api.md).
    return Summary(found.metrics() or None, model, problem, headline)


def headline_text(headline: tuple[str, float]) -> str:
    """status.headline, the METRIC column: `mae=0.1234`."""
    name, value = headline
    return f"{name}={value:.4f}"


MAX_MODEL_PATH = 1024


def _summary_model(found: chief_summary.Summary, claim: str) -> dict[str, Any] | None:
    """status.model, or None: no model path, or one that is not a clean line (clean_text) of MAX_MODEL_PATH."""
    if found.model_path is None or clean_text(found.model_path, MAX_MODEL_PATH) != found.model_path:
        return None
    model: dict[str, Any] = {"path": found.model_path, "claim": claim}
    if found.model_version is not None:
        model["version"] = found.model_version
    if uri := storage_uri(claim, found.model_path):
        model["storageUri"] = uri
    return model


def storage_uri(claim: str, model_path: str) -> str | None:
    """KServe's storageUri of the model: pvc://<claim>/<its base directory inside the volume>, the directory
    of numbered versions that TF Serving (and KServe's TensorFlow runtime) watches; None outside the volume."""
    base = layout.model_base(model_path)
    return None if base is None else f"pvc://{claim}/{base}"


# ---- the run's code (spec.training.code.configMap) ----------------------------------------------


def configmap_content(config_map: Mapping[str, Any] | None, key: str) -> bytes | None:
    """The bytes the workers will read from the ConfigMap's key (the kubelet writes data as UTF-8 and
    binaryData decoded), or None when the ConfigMap or the key is missing."""
    if config_map is None:
        return None
    text = (config_map.get("data") or {}).get(key)
    if isinstance(text, str):
        return text.encode()
    encoded = (config_map.get("binaryData") or {}).get(key)
    try:
        return base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
    except binascii.Error:
        return None


def code_status(config_map: str, key: str, content: bytes) -> dict[str, str]:
    """status.code: which file the workers run, and its SHA-256 (as `sha256sum FILE` prints it)."""
    return {"configMap": config_map, "key": key, "sha256": hashlib.sha256(content).hexdigest()}


# ---- progress (from the chief's log: dtr_contract.progress) -------------------------------------

MAX_LOG = 64 * 1024  # characters of the chief's log read for its last epoch (its end: the newest lines)


def parse_epoch_end(log_text: str, epochs: int | None = None) -> EpochEnd | None:
    """The chief's last finished epoch of a run of `epochs` (dtr_contract.progress), or None; never raises: the
    log is the run's own writing."""
    try:
        return progress.parse_epoch_end(log_text[-MAX_LOG:], epochs)
    except Exception:  # an unreadable log is no progress, not a stuck poll loop
        return None


# A line of a log read with timestamps (pods/log?timestamps=true, `kubectl logs --timestamps`): the container
# runtime's RFC 3339 time, in UTC, to the nanosecond; its whole seconds are the status's time format.
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d{1,9})?Z ", re.ASCII)


def unstamped(line: str) -> str:
    """A log line without the runtime's timestamp, as the container wrote it."""
    stamp = _STAMP.match(line)
    return line[stamp.end():] if stamp else line


def epoch_logged_at(log_text: str, epochs: int | None = None) -> str | None:
    """When the chief logged the epoch parse_epoch_end finds (the runtime's timestamp of its line, whole seconds,
    as the status's times), or None: no such line, or it has no timestamp. The time is the container runtime's,
    not the run's: its code can print an epoch's line, not the time the runtime puts before it."""
    for line in reversed(log_text[-MAX_LOG:].splitlines()):
        if progress.parse_epoch_end_line(line, epochs) is not None:
            stamp = _STAMP.match(line)
            return f"{stamp[1]}Z" if stamp else None
    return None


def progress_of(end: EpochEnd, now: str) -> dict[str, Any]:
    """status.progress for a finished epoch; named as Kubeflow Trainer v2's trainerStatus where they mean
    the same (progressPercentage, estimatedRemainingSeconds, metrics as name/value strings, lastUpdatedTime)."""
    progress: dict[str, Any] = {
        "epoch": end.epoch,
        "epochs": end.epochs,
        "epochsDone": f"{end.epoch}/{end.epochs}",
        "progressPercentage": end.epoch * 100 // end.epochs,
        "metrics": [{"name": name, "value": f"{value:.4f}"} for name, value in end.metrics],
        "lastUpdatedTime": now,
    }
    if end.examples_per_second is not None:
        progress["examplesPerSecond"] = round(end.examples_per_second, 1)
    if end.remaining_seconds is not None:
        progress["estimatedRemainingSeconds"] = end.remaining_seconds
    return progress


def _same_progress(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    def strip(p: Mapping[str, Any] | None) -> dict[str, Any]:
        return {k: v for k, v in (p or {}).items() if k != "lastUpdatedTime"}

    return strip(a) == strip(b)


def running_progress(previous: Mapping[str, Any], end: EpochEnd | None, now: str) -> dict[str, Any]:
    """The status with the chief's last finished epoch, while Running; anything else is left as is."""
    if previous.get("phase") != RUNNING or end is None:
        return dict(previous)
    progress = progress_of(end, now)
    if _same_progress(previous.get("progress"), progress):
        return dict(previous)
    return {**previous, "progress": progress}


def final_progress(previous: Mapping[str, Any] | None, epochs: int, now: str) -> dict[str, Any]:
    """status.progress of a run that succeeded: every epoch done, nothing left; the last epoch's figures kept."""
    return {
        **(previous or {}),
        "epoch": epochs,
        "epochs": epochs,
        "epochsDone": f"{epochs}/{epochs}",
        "progressPercentage": 100,
        "estimatedRemainingSeconds": 0,
        "lastUpdatedTime": now,
    }


# ---- conditions -------------------------------------------------------------------------------


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    cond_type: str,
    status: bool,
    reason: str,
    message: str,
    now: str,
    generation: int | None,
) -> list[dict[str, Any]]:
    """conditions with cond_type set; lastTransitionTime only moves when the status changes."""
    value = "True" if status else "False"
    previous = next((c for c in conditions if c.get("type") == cond_type), None)
    since = previous["lastTransitionTime"] if previous and previous.get("status") == value else now
    new: dict[str, Any] = {
        "type": cond_type,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        new["observedGeneration"] = generation
    others = [dict(c) for c in conditions if c.get("type") != cond_type]
    return sorted([*others, new], key=_condition_order)


def _condition_order(c: Mapping[str, Any]) -> int:
    t = c.get("type", "")
    return CONDITION_TYPES.index(t) if t in CONDITION_TYPES else len(CONDITION_TYPES)


def conditions_for(
    state: State, previous: Sequence[Mapping[str, Any]], now: str, generation: int | None, children: str
) -> list[dict[str, Any]]:
    conds = list(previous)
    created_msg = children if state.created else state.message
    created_reason = CHILDREN_CREATED if state.created else state.reason
    conds = set_condition(conds, "Created", state.created, created_reason, created_msg, now, generation)
    for cond_type in CONDITION_TYPES[1:]:  # named like the phase in which each holds
        holds = state.phase == cond_type
        # The message belongs to the condition that holds; the others only say why not (the reason).
        conds = set_condition(conds, cond_type, holds, state.reason, state.message if holds else "", now, generation)
    return conds


# ---- the whole status -------------------------------------------------------------------------


def _base(run: RunSpec, state: State, previous: Mapping[str, Any], now: str) -> dict[str, Any]:
    children = f"TFJob {run.tfjob_name} and PVC {run.pvc_name} exist"
    return {
        "phase": state.phase,
        "reason": state.reason,
        "message": state.message,
        "observedGeneration": run.generation,
        "tfJob": run.tfjob_name,
        "pvc": run.pvc_name,
        "conditions": conditions_for(state, previous.get("conditions") or [], now, run.generation, children),
    }


def is_terminal(status: Mapping[str, Any] | None) -> bool:
    return bool(status) and status.get("phase") in TERMINAL


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
    state: State, run: RunSpec, pods: Sequence[Mapping[str, Any]], previous: Mapping[str, Any], all_run: bool
) -> tuple[State, Summary | None]:
    """The TFJob's state with what the pods add: the chief's summary, who failed, why none or not all start
    (`all_run`: every worker runs or has succeeded, as the TFJob counts them)."""
    if state.phase == SUCCEEDED:
        summary = parse_summary(termination_message(chief_pod(pods)), run.pvc_name)
        if summary.model and summary.headline and summary.problem is None:
            name, value = summary.headline
            done = f"{name} {value:.4f}, model exported to {summary.model['path']}"
            return State(SUCCEEDED, TRAINING_SUCCEEDED, done, created=True), summary
        partial = f"training succeeded, but {summary.problem}"
        return State(SUCCEEDED, METRICS_UNAVAILABLE, partial, created=True), summary
    if state.phase == FAILED:
        return _failure(state, pods), None
    return _still_explained(state, previous, all_run), None


def _still_explained(state: State, previous: Mapping[str, Any], all_run: bool) -> State:
    """The TFJob says nothing new: the pods' own trouble, found by waiting_status, still holds (and its message)."""
    said, message = previous.get("reason"), previous.get("message") or state.message
    if state.reason in (TFJOB_SUBMITTED, TFJOB_CREATED) and said == WORKERS_NOT_STARTING:
        return State(PENDING, WORKERS_NOT_STARTING, message, created=True)
    if state.reason == TFJOB_RUNNING and said == WORKERS_NOT_ALL_RUNNING and not all_run:
        return State(RUNNING, WORKERS_NOT_ALL_RUNNING, message, created=True)
    return state


def _failure(state: State, pods: Sequence[Mapping[str, Any]]) -> State:
    """A failed TFJob's state with who failed: the run's own code or a diverged loss (the worker's one line), else
    each failed worker."""
    if user_code := user_code_failure(pods):
        return State(FAILED, USER_CODE_ERROR, user_code, created=True)
    if diverged := divergence(pods):
        return State(FAILED, DIVERGED, diverged, created=True)
    if why := [*disrupted_workers(pods), *failed_workers(pods)]:
        return State(FAILED, state.reason, clean_text(f"{state.message} {'; '.join(why)}"), created=True)
    return state


def _epoch_note(previous: Mapping[str, Any]) -> str:
    done = (previous.get("progress") or {}).get("epochsDone")
    return f"the last finished epoch was {done}" if done else "no epoch had finished"


def kueue_queue(tfjob: Mapping[str, Any]) -> str | None:
    """The Kueue LocalQueue the TFJob itself names (a label, or the annotation older Kueue read; Kueue's webhook
    may add one to a run without spec.queueName), else None. Such a TFJob's suspend is Kueue's."""
    meta = tfjob.get("metadata") or {}
    return (meta.get("labels") or {}).get(KUEUE_QUEUE_LABEL) or (meta.get("annotations") or {}).get(KUEUE_QUEUE_LABEL)


def suspended_by_other(tfjob: Mapping[str, Any]) -> bool:
    """Whether the TFJob is suspended (runPolicy.suspend) without the operator's record that it suspended it
    (SUSPENDED_BY_ANNOTATION): a queue manager's or a person's suspension, which the operator never undoes."""
    annotations = (tfjob.get("metadata") or {}).get("annotations") or {}
    suspended = bool(((tfjob.get("spec") or {}).get("runPolicy") or {}).get("suspend"))
    return suspended and annotations.get(SUSPENDED_BY_ANNOTATION) != SUSPENDED_BY


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
    """A run not suspended whose TFJob is: queued in Kueue, suspended by someone else, or being resumed."""
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


def tfjob_status(
    run: RunSpec,
    tfjob: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    previous: Mapping[str, Any],
    now: str,
) -> dict[str, Any]:
    """Status mirrored from the run's TFJob; pods are read only once the TFJob has finished."""
    counts = worker_counts(tfjob)
    ready = counts["active"] + counts["succeeded"]
    state = suspension(tfjob_state(tfjob), run, previous, tfjob)
    state, summary = _explained(state, run, pods, previous, ready >= run.workers)
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
        status["progress"] = final_progress(previous.get("progress"), run.training.epochs, now)
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


def next_status(previous: Mapping[str, Any] | None, proposed: Mapping[str, Any]) -> dict[str, Any] | None:
    """What to write, or None: nothing changed, or the run already ended (a finished run never regresses)."""
    previous = previous or {}
    if is_terminal(previous):
        return None
    changed = {k: v for k, v in proposed.items() if previous.get(k) != v}
    return changed or None
