"""What the training-operator and the kubelet would decide for a TFJob whose replicas are local processes: when a
replica restarts, when the job ends and how, and the TFJob and pod views the operator's status reads. Pure
(unit-tested in tests/unit/client/test_local_runner.py); runner.py plays them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dtr_contract import exits

from dtr_operator import api, reasons
from dtr_operator.status.pods import restart_cannot_help

from . import kubelet

End = tuple[str, str, str]  # how a job ended: (phase, TFJob condition reason, message)


def job_restarts(policy: str, exit_code: int) -> bool:
    """Does the replica run again after this exit? OnFailure/Always: the kubelet restarts it in place;
    ExitCode: the training-operator recreates the pod for a retryable code (dtr_contract.exits); Never: no.
    Never after an exit the run would repeat (its code failed or changed, its loss diverged, its model name is
    another run's): on a cluster the operator has the TFJob fail at the first restart (restart_cannot_help); here
    none is made."""
    if restart_cannot_help(exit_code):
        return False
    if policy == "ExitCode":
        return exits.is_retryable(exit_code)
    return kubelet.restarts(policy, exit_code)


def past_backoff_limit(policy: str, restarts: int, limit: int) -> bool:
    """The training-operator's pastBackoffLimit: the sum of container restarts reaching backoffLimit
    fails the job (it counts in-place restarts, so only OnFailure and Always)."""
    if policy not in ("OnFailure", "Always"):
        return False
    return restarts > 0 if limit == 0 else restarts >= limit


def job_outcome(exits: Mapping[str, int | None], success_policy: str, chief: str) -> str | None:
    """Succeeded, Failed or None (still running) from each replica's final exit code (None = not final)."""
    if any(code not in (None, 0) for code in exits.values()):
        return reasons.FAILED
    if success_policy == "AllWorkers":
        return reasons.SUCCEEDED if all(code == 0 for code in exits.values()) else None
    return reasons.SUCCEEDED if exits.get(chief) == 0 else None


def end_by_exits(exits: Mapping[str, int | None], success_policy: str, rtype: str, job: str) -> End | None:
    """The job's end from its replicas' final exits (job_outcome), as the training-operator words it."""
    outcome = job_outcome(exits, success_policy, f"{rtype.lower()}-0")
    if outcome == reasons.SUCCEEDED:
        return reasons.SUCCEEDED, "TFJobSucceeded", f"TFJob {job} successfully completed."
    if outcome == reasons.FAILED:
        failed = sum(1 for c in exits.values() if c not in (None, 0))
        return reasons.FAILED, "TFJobFailed", f"TFJob {job} has failed because {failed} {rtype} replica(s) failed."
    return None


def end_by_limits(policy: str, run_policy: Mapping[str, Any], restarts: int, elapsed: float, job: str) -> End | None:
    """The job's end by its runPolicy: backoffLimit (default 0 under Never, else 6) or activeDeadlineSeconds."""
    limit = int(run_policy.get("backoffLimit", 0 if policy == "Never" else 6))
    if past_backoff_limit(policy, restarts, limit):
        return (reasons.FAILED, "BackoffLimitExceeded",
                f"TFJob {job} has failed because it has reached the specified backoff limit")  # fmt: skip
    deadline = run_policy.get("activeDeadlineSeconds")
    if deadline is not None and elapsed > deadline:
        return (reasons.FAILED, "DeadlineExceeded",
                f"TFJob {job} has failed because it was active longer than specified deadline")  # fmt: skip
    return None


def tfjob_view(
    tfjob: Mapping[str, Any],
    phase: str,
    reason: str,
    message: str,
    counts: Mapping[str, int],
    start: str,
    completion: str | None,
) -> dict[str, Any]:
    """The TFJob with the status the training-operator would have written for this outcome."""
    conds = [{"type": "Created", "status": "True", "reason": "TFJobCreated", "lastTransitionTime": start}]
    running = phase == reasons.RUNNING
    conds.append({"type": "Running", "status": "True" if running else "False", "reason": "TFJobRunning"})
    if phase in (*reasons.TERMINAL, reasons.SUSPENDED):
        conds.append({"type": phase, "status": "True", "reason": reason, "message": message})
    job_status: dict[str, Any] = {"conditions": conds, "replicaStatuses": {"Worker": dict(counts)}, "startTime": start}
    if completion:
        job_status["completionTime"] = completion
    return {**tfjob, "status": job_status}


def as_created(tfjob: Mapping[str, Any], uid: str) -> dict[str, Any]:
    """The TFJob as the API server would have it once created: with its uid, which its pods' owner references name."""
    meta = tfjob.get("metadata") or {}
    return {**tfjob, "metadata": {**meta, "uid": uid}}


def pod_view(pod_name: str, namespace: str, labels: Mapping[str, str], pod_status: Mapping[str, Any],
             tfjob: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    """A replica's pod as the training-operator makes it and the kubelet reports it: controlled by the TFJob (its uid),
    which the operator's status requires of a pod before it reads it (status.pods.own_pods)."""
    job = tfjob.get("metadata") or {}
    owner = {"apiVersion": api.TFJOB_API_VERSION, "kind": api.TFJOB_KIND, "name": job.get("name"),
             "uid": job.get("uid"), "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    meta = {"name": pod_name, "namespace": namespace, "labels": dict(labels), "ownerReferences": [owner]}
    return {"metadata": meta, "status": dict(pod_status)}


def replica_labels(job: str, rtype: str, index: int) -> dict[str, str]:
    """The labels the training-operator puts on a replica's pod (status/pods.py finds the chief by them)."""
    return {
        api.JOB_NAME_LABEL: job,
        api.REPLICA_TYPE_LABEL: rtype.lower(),
        api.REPLICA_INDEX_LABEL: str(index),
    }
