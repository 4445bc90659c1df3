"""Whether a failed run starts again: its TFJob failed only because Kubernetes took workers away (a drain or another
eviction, a node lost or declared out of service, a preemption) or because their peers lost them, and the run asks to
resume (spec.disruption) with resumes left. Pure: the mirror (reconcile/mirror.py) asks, and carries it out by deleting
the failed TFJob and, once its pods are gone, creating it again (reconcile/children.py). The workers continue from
their last backup. docs/clusters.md#when-kubernetes-takes-a-worker-away.

A failed TFJob's own pods are read once it has failed (status.pods.own_pods), and so are workers already deleted
(status.pods.gone_worker): the DisruptionTarget condition says who took a pod away. Any worker that failed for a
reason of its own (its code, divergence, an object store's refusal, any exit but a stop or a lost peer) means the
run fails as before: a restart would not help it, or would hide why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtr_contract import exits

from .builders import worker_pod_name
from .reasons import FAILED, PENDING, PREEMPTED, RESUME_TIMED_OUT, RESUMING_AFTER_DISRUPTION, WORKERS_NOT_STARTING
from .spec import RunSpec
from .status.compute import _base, state_status
from .status.pods import (
    WorkerExit,
    code_changed,
    disrupted_workers,
    divergence,
    is_disrupted,
    object_store_failure,
    user_code_failure,
    worker_exits,
)
from .status.state import State, clean_text
from .watchdog import parse_time

STOPPED = frozenset({exits.PEER_LOST, 143, 137})  # a lost peer, SIGTERM, SIGKILL at the end of the grace period
KEPT_DISRUPTIONS = 10  # status.disruptions keeps the newest (maxResumes is at most 20: the count is status.resumes)
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"


@dataclass(frozen=True)
class Resume:
    """Start the run again: delete its failed TFJob (of uid `uid`; its pods go with it), then create it anew.
    `state` is what the status says meanwhile, `entry` the new item of status.disruptions."""

    uid: str
    state: State
    entry: Mapping[str, Any]
    resumes: int


def _stopped(e: WorkerExit) -> bool:
    return e.code in STOPPED and e.terminated.get("reason") != "OOMKilled"


def _own_failure(pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a worker failed for a reason of its own: its code, divergence, its code file changed, its object
    store, or an exit that is neither a stop nor a lost peer."""
    if code_changed(pods) or user_code_failure(pods) or divergence(pods) or object_store_failure(pods):
        return True
    return not all(_stopped(e) for e in worker_exits(pods))


def taken_away(pods: Sequence[Mapping[str, Any]], gone: Sequence[Mapping[str, Any]],
               previous: Mapping[str, Any], missing: Sequence[str] = ()) -> list[str] | None:  # fmt: skip
    """Why a failed TFJob failed, when only Kubernetes taking workers away explains it: one line per such worker
    (its node and why); None when a worker failed for a reason of its own, or nothing was taken away.

    A run Kueue preempted (status.reason Preempted) may fail as soon as it is admitted again, on a worker of its
    earlier admission that stopped or lost its peer when the TFJob was suspended (the training-operator counts
    replica failures from the pods in its cache): that is the preemption, not the run.

    A worker `missing` (its pod deleted, its events silent) was taken away too: found on three nodes, where the
    operator's own pod was on the drained node, and the one started elsewhere saw the TFJob failed after the evicted
    pod had gone."""
    if _own_failure(pods):
        return None
    if lines := disrupted_workers([*pods, *gone]):
        return lines
    if unseen := _deleted_unseen(gone, missing):
        return unseen
    if previous.get("reason") == PREEMPTED:
        stopped = ", ".join(f"{e.name} (exit code {e.code})" for e in worker_exits(pods)) or "a worker"
        return [f"preempted by Kueue; after it was admitted again the TFJob counted as failed {stopped} of the "
                f"earlier admission"]  # fmt: skip
    return None


def _deleted_unseen(gone: Sequence[Mapping[str, Any]], missing: Sequence[str]) -> list[str]:
    """One line per worker deleted with no condition read: gone ones with their node, missing ones without."""
    unseen = [((g.get("metadata") or {}).get("name", "?"), (g.get("spec") or {}).get("nodeName"))
              for g in gone if not is_disrupted(g)]  # fmt: skip
    return [_unseen(name, node) for name, node in [*unseen, *((name, None) for name in missing)]]


def _unseen(name: str, node: str | None) -> str:
    where = f" on node {node}" if node else ""
    return (f"worker {name}{where} was deleted before the operator saw why (a drain or another eviction, or someone "
            "deleting it)")  # fmt: skip


def _missing(run: RunSpec, pods: Sequence[Mapping[str, Any]], gone: Sequence[Mapping[str, Any]]) -> list[str]:
    """The run's workers whose pods are neither there nor remembered by their events."""
    there = {(p.get("metadata") or {}).get("name") for p in [*pods, *gone]}
    return [name for i in range(run.workers) if (name := worker_pod_name(run, i)) not in there]


def resumes(status: Mapping[str, Any]) -> int:
    value = status.get("resumes")
    return value if isinstance(value, int) and value >= 0 else 0


def resuming_from(status: Mapping[str, Any]) -> str | None:
    """The uid of the failed TFJob the run is resuming from (deleted, or being deleted), or None."""
    if status.get("reason") != RESUMING_AFTER_DISRUPTION:
        return None
    kept = status.get("disruptions") or []
    last = kept[-1] if kept and isinstance(kept[-1], Mapping) else {}
    uid = last.get("tfJobUID")
    return uid if isinstance(uid, str) else None


def _last_epoch(status: Mapping[str, Any]) -> int:
    epoch = (status.get("progress") or {}).get("epoch")
    return epoch if isinstance(epoch, int) else 0


def resume(run: RunSpec, previous: Mapping[str, Any], tfjob: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
           gone: Sequence[Mapping[str, Any]], now: str) -> Resume | None:  # fmt: skip
    """Resume, when the failed `tfjob` failed only by disruption (taken_away) and the run may resume again; else
    None (the run fails as the TFJob did; not_resumed says why when it was a disruption)."""
    uid = (tfjob.get("metadata") or {}).get("uid") or ""
    lines = taken_away(pods, gone, previous, _missing(run, pods, gone))
    done = resumes(previous)
    if lines is None or not run.disruption.resume or done >= run.disruption.max_resumes or not uid:
        return None
    attempt, epoch = done + 2, _last_epoch(previous)
    where = f"from epoch {epoch + 1}" if epoch else "from the start (no epoch had finished)"
    why = clean_text("; ".join(lines))
    message = (f"{why}; resuming {where} as attempt {attempt} ({done + 1} of {run.disruption.max_resumes} "
               f"resumes, spec.disruption.maxResumes): TFJob {run.tfjob_name} is made again once the failed one's "
               "pods are gone")  # fmt: skip
    entry = {"attempt": attempt, "at": now, "epoch": epoch, "message": why, "nodes": _nodes([*pods, *gone]),
             "tfJobUID": uid}
    return Resume(uid, State(PENDING, RESUMING_AFTER_DISRUPTION, message, created=True), entry, done + 1)


def not_resumed(run: RunSpec, previous: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
                gone: Sequence[Mapping[str, Any]]) -> str | None:  # fmt: skip
    """Why a run whose TFJob failed by disruption alone was not resumed, for its failure message; None otherwise."""
    if taken_away(pods, gone, previous, _missing(run, pods, gone)) is None:
        return None
    if not run.disruption.resume:
        return "not resumed: spec.disruption.resume is false"
    done = resumes(previous)
    if done >= run.disruption.max_resumes:
        return f"not resumed: resumed {done} times already (spec.disruption.maxResumes {run.disruption.max_resumes})"
    return None


def resuming_status(run: RunSpec, plan: Resume, previous: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The status while the run resumes: the state, status.resumes, and status.disruptions with the new entry."""
    kept = [d for d in previous.get("disruptions") or [] if isinstance(d, Mapping)]
    status = state_status(run, plan.state, previous, now)
    return {**status, "resumes": plan.resumes, "disruptions": [*kept, dict(plan.entry)][-KEPT_DISRUPTIONS:]}


def waiting_for_pods(run: RunSpec, previous: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
                     now: str) -> State:  # fmt: skip
    """The state of a resuming run whose failed TFJob is still being deleted: which of its pods are left, on which
    node. A pod whose node was lost stays Terminating until the node comes back or an admin declares it out of
    service (Kubernetes' non-graceful node shutdown); the operator never force-deletes it (a node cut off from the
    API server may still run it). Failed once it has waited too long (waited_too_long)."""
    ordered = sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", ""))
    left = [_where(pod) for pod in ordered]
    head = previous.get("message") or f"resuming TFJob {run.tfjob_name}"
    if not left:
        return State(PENDING, RESUMING_AFTER_DISRUPTION, head, created=True)
    message = (f"{head.split('; waiting for ')[0]}; waiting for the failed TFJob's pods to go: {', '.join(left)} "
               f"(a pod of a lost node goes once the node is back, or once an admin declares it out of service: "
               f"kubectl taint node {_node_to_declare(pods)} {OUT_OF_SERVICE})")  # fmt: skip
    waiting = f"waiting for the failed TFJob's pods to go: {', '.join(left)}"
    return waited_too_long(run, previous, now, waiting) or State(PENDING, RESUMING_AFTER_DISRUPTION, message,
                                                                  created=True)  # fmt: skip


def _node_to_declare(pods: Sequence[Mapping[str, Any]]) -> str:
    """The node an admin would declare out of service: a taken worker's, else any left pod's."""
    nodes = _nodes(pods) or sorted({n for p in pods if (n := (p.get("spec") or {}).get("nodeName"))})
    return nodes[0] if nodes else "NODE"


def _nodes(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """The nodes of the workers taken away (their DisruptionTarget), sorted."""
    return sorted({n for p in pods if is_disrupted(p) and (n := (p.get("spec") or {}).get("nodeName"))})


def _waited(run: RunSpec, previous: Mapping[str, Any], now: str) -> Mapping[str, Any] | None:
    """The last disruption of a resumed run, once spec.disruption.waitSeconds have passed since it; else None."""
    kept = [d for d in previous.get("disruptions") or [] if isinstance(d, Mapping)]
    if not kept or not resumes(previous):
        return None
    at, then = parse_time(kept[-1].get("at")), parse_time(now)
    if at is None or then is None or (then - at).total_seconds() < run.disruption.wait_seconds:
        return None
    return kept[-1]


def waited_too_long(run: RunSpec, previous: Mapping[str, Any], now: str, why: str) -> State | None:
    """A resumed run whose workers still do not start (`why`) spec.disruption.waitSeconds after the disruption: it
    fails, naming the nodes it lost (the node of a ReadWriteOnce volume holds its backup). None within the bound."""
    last = _waited(run, previous, now)
    if last is None:
        return None
    nodes = ", ".join(n for n in last.get("nodes") or [] if isinstance(n, str)) or "unknown"
    rwo = run.has_volume and run.storage.access_mode == "ReadWriteOnce"
    volume = " (the node of its ReadWriteOnce volume, which holds the backup)" if rwo else ""
    message = (f"resumed after a disruption at {last.get('at')}, its workers did not start again within "
               f"{run.disruption.wait_seconds} s (spec.disruption.waitSeconds): it lost node(s) {nodes}{volume}; "
               f"{why}")  # fmt: skip
    return State(FAILED, RESUME_TIMED_OUT, message, created=True)


def waited_status(run: RunSpec, status: Mapping[str, Any], previous: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The waiting loop's status (status.waiting.waiting_status) of a resumed run whose workers cannot start, failed
    once it has waited too long (waited_too_long); else as it is."""
    if status.get("reason") != WORKERS_NOT_STARTING:
        return dict(status)
    state = waited_too_long(run, previous, now, str(status.get("message") or ""))
    return dict(status) if state is None else {**status, **_base(run, state, previous, now)}


def _where(pod: Mapping[str, Any]) -> str:
    name = (pod.get("metadata") or {}).get("name", "?")
    node = (pod.get("spec") or {}).get("nodeName")
    return f"{name} on node {node}" if node else name
