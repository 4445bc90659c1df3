"""What a run's worker pods tell: the chief's termination message, exits and their causes, disruptions, workers that
cannot start or were deleted. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtr_contract import exits

from ..api import (
    CONTAINER_NAME,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    TFJOB_GROUP,
    TFJOB_KIND,
)
from ..builders import worker_pod_name
from ..spec import RunSpec
from .progress import unstamped
from .state import clean_text


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def is_own_pod(run: RunSpec, tfjob_uid: str | None, pod: Mapping[str, Any]) -> bool:
    """Whether the pod is one of the run's workers: its controller is the run's TFJob (an ownerReference with
    controller true, kind TFJob, that TFJob's uid) and it is named as the training-operator names the TFJob's workers
    (builders.worker_pod_name). Labels prove nothing: whoever may create pods in the namespace (the `edit` role) can
    label one as a run's worker 0, or name one as a worker before the real one exists, and its termination message
    or log would speak for the run (security review R8). The training-operator adopts only pods carrying its own
    selector's labels, and never renames one, so a pod that passes both checks is one the TFJob made or took."""
    names = {worker_pod_name(run, i) for i in range(run.workers)}
    return bool(tfjob_uid) and _meta(pod).get("name") in names and any(
        ref.get("controller") is True and ref.get("kind") == TFJOB_KIND and ref.get("uid") == tfjob_uid
        and str(ref.get("apiVersion", "")).startswith(f"{TFJOB_GROUP}/")
        for ref in _meta(pod).get("ownerReferences") or []
    )


def own_pods(run: RunSpec, tfjob: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods among `pods` that are the run's workers (is_own_pod), in their order: the only pods whose exits,
    disruptions, termination message and log the run's status reads."""
    uid = _meta(tfjob).get("uid")
    return [pod for pod in pods if is_own_pod(run, uid, pod)]


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


def assigned_worker(name: str, events: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """A worker pod deleted before its run failed whose events tell only where it ran (the scheduler's Scheduled
    event), not why it went: shaped as the pod, its node and no condition. Found on three nodes: a drained worker's
    pod gone before the operator read its DisruptionTarget. None when no event names its node."""
    assigned = [m["node"] for e in events if e.get("reason") == "Scheduled"
                if (m := _ASSIGNED.match(e.get("message") or ""))]  # fmt: skip
    return {"metadata": {"name": name}, "spec": {"nodeName": assigned[-1]}, "status": {}} if assigned else None


def is_disrupted(pod: Mapping[str, Any]) -> bool:
    """Whether Kubernetes is taking the pod away (its DisruptionTarget condition is True)."""
    return _disruption_target(pod) is not None


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


def code_changed(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The run's code file is not the one recorded (dtr_contract.exits.CODE_CHANGED): the first such worker's one
    line, which names both digests, then the worker; None when no worker exited so."""
    return _error_line(pods, exits.is_code_changed, "the run's code file is not the one recorded in status.code")


def model_name_owned(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """Another run owns the model name (dtr_contract.exits.MODEL_NAME_OWNED): the first such worker's one line,
    which names the owner, then the worker; None when no worker exited so."""
    return _error_line(pods, exits.is_model_name_owned, "another run owns the model name (spec.export)")


def object_store_failure(pods: Sequence[Mapping[str, Any]]) -> tuple[int, str] | None:
    """The trainer's check of an s3:// dataset failed (dtr_contract.exits.OBJECT_STORE_CODES): (the exit code, the
    first such worker's one line, which names the cause, then the worker); None when no worker exited so."""
    code = next((e.code for e in worker_exits(pods) if e.code in exits.OBJECT_STORE_CODES), None)
    if code is None:
        return None
    return code, str(_error_line(pods, lambda c: c == code, "the trainer's check of its object store failed"))


def restart_cannot_help(code: int) -> bool:
    """An exit that the same run would repeat after a restart: its code failed, its loss diverged, its code file
    is not the one recorded, another run owns its model name, or its object store refused its keys, has no such
    bucket or no data there. Such a run is failed at once: the operator sets its TFJob's backoffLimit to 0
    (reconcile.restart_no_more), `dtr run` does not restart the worker."""
    return (exits.is_user_code(code) or exits.is_diverged(code) or exits.is_code_changed(code)
            or exits.is_model_name_owned(code) or exits.is_object_store_permanent(code))  # fmt: skip


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
