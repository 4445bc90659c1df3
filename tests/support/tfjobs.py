"""A run's TFJob and its worker pods as the training-operator and the kubelet leave them, and a chief's log: the
inputs the status tests share (test_status, test_status_keys, test_progress). Run mnist-cnn, two workers."""

from __future__ import annotations

import json
from typing import Any

from dtr_operator.api import TFJOB_API_VERSION
from dtr_operator.spec import parse_run

from support.runs import make_run

T0, T1, T2 = "2026-11-29T18:00:00Z", "2026-11-29T18:01:00Z", "2026-11-29T18:02:00Z"
RUN = parse_run(make_run({"workers": 2}, uid="u-1", generation=1))
TFJOB_UID = "tfjob-uid-1"


def controlled_by(uid: str = TFJOB_UID, name: str = "mnist-cnn") -> list[dict[str, Any]]:
    """A pod's ownerReferences as the training-operator writes them: the TFJob (of this uid) is its controller."""
    return [{"apiVersion": TFJOB_API_VERSION, "kind": "TFJob", "name": name, "uid": uid, "controller": True,
             "blockOwnerDeletion": True}]  # fmt: skip


def cond(type_, status="True", reason=None, message=""):
    return {
        "type": type_,
        "status": status,
        "reason": reason or f"TFJob{type_}",
        "message": message,
        "lastUpdateTime": T0,
        "lastTransitionTime": T0,
    }


def tfjob(conditions=(), active=0, succeeded=0, failed=0, start=None, completion=None):
    status = {"conditions": list(conditions)}
    if active or succeeded or failed:
        status["replicaStatuses"] = {"Worker": {"active": active, "succeeded": succeeded, "failed": failed}}
    if start:
        status["startTime"] = start
    if completion:
        status["completionTime"] = completion
    return {"metadata": {"name": "mnist-cnn", "namespace": "ml", "uid": TFJOB_UID}, "status": status}


def pod(index, exit_code=None, message=None, last_exit=None, last_message=None, running=False):
    cs = {"name": "tensorflow", "state": {}, "lastState": {}}
    if exit_code is not None:
        cs["state"] = {"terminated": {"exitCode": exit_code, "message": message}}
    elif running:
        cs["state"] = {"running": {"startedAt": T0}}
    if last_exit is not None:
        cs["lastState"] = {"terminated": {"exitCode": last_exit, "message": last_message}}
    return {
        "metadata": {
            "name": f"mnist-cnn-worker-{index}",
            "ownerReferences": controlled_by(),
            "labels": {
                "training.kubeflow.org/job-name": "mnist-cnn",
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": str(index),
            },
        },
        "status": {"containerStatuses": [{"name": "istio-proxy"}, cs]},
    }


SUMMARY = {
    "loss": 0.07,
    "accuracy": 0.98,
    "epochs": 3,
    "examplesPerSecond": 5400,
    "modelPath": "/mnt/dtr/models/mnist-cnn/1",
    "modelVersion": 1,
}
DONE_PODS = [pod(0, 0, json.dumps(SUMMARY)), pod(1, 0, None)]


# Every TFJob condition as the training-operator writes them: (conditions, phase, reason, workersReady)
CONDITIONS = [
    ([], "Pending", "TFJobSubmitted", {}),
    ([cond("Created")], "Pending", "TFJobCreated", {}),
    ([cond("Created"), cond("Running")], "Running", "TFJobRunning", {"active": 2}),
    ([cond("Created"), cond("Running", "False"), cond("Restarting")], "Running", "TFJobRestarting", {"active": 1}),
    ([cond("Created"), cond("Suspended")], "Pending", "TFJobSuspended", {}),
    ([cond("Created"), cond("Running", "False"), cond("Succeeded")], "Succeeded", "TrainingSucceeded",
     {"succeeded": 2}),
    ([cond("Created"), cond("Running", "False"), cond("Failed", reason="TFJobFailed")], "Failed", "TFJobFailed",
     {"failed": 1}),
    # Failed wins over anything else that is still True.
    ([cond("Created"), cond("Running"), cond("Failed")], "Failed", "TFJobFailed", {"active": 1, "failed": 1}),
    # A status of False is not a state.
    ([cond("Created"), cond("Running", "False")], "Pending", "TFJobCreated", {}),
]


def disrupted(index, reason, message, node="dtr-n2", **kw):
    p = pod(index, **kw)
    p["spec"] = {"nodeName": node}
    p["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message}]
    return p


def waiting_pod(index, reason=None, message="", unschedulable=None):
    p = pod(index)
    cs = p["status"]["containerStatuses"][1]
    cs["state"] = {"waiting": {"reason": reason, "message": message}} if reason else {}
    if unschedulable is not None:
        p["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        ]
    return p


SCHEDULER = ("0/2 nodes are available: 1 node(s) didn't match pod anti-affinity rules, 1 node(s) had volume node "
             "affinity conflict.")  # fmt: skip
SHORT_PODS = [pod(0, running=True), waiting_pod(1, unschedulable=SCHEDULER)]


SUSPENDED_RUN = parse_run(make_run({"workers": 2, "suspend": True}, uid="u-1", generation=2))
QUEUED_RUN = parse_run(make_run({"workers": 2, "queueName": "team-a"}, uid="u-1", generation=1))


# A chief's log after two of eight epochs, read without the kubelet's timestamps.
CHIEF_LOG = """dtr_trainer[worker-0]: 2 worker(s), 2 replica(s), global batch 64, 200 steps/epoch
dtr_trainer[worker-0]: epoch 1/8 begin
dtr_trainer[worker-0]: epoch 1/8 end accuracy=0.8772 loss=0.4172 examples_per_second=2083.2 remaining_seconds=12
dtr_trainer[worker-0]: epoch 2/8 begin
dtr_trainer[worker-0]: epoch 2/8 end accuracy=0.9930 loss=0.0249 examples_per_second=6932.1 remaining_seconds=11
dtr_trainer[worker-0]: epoch 3/8 begin
"""
