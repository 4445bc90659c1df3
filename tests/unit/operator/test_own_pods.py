"""Status only from the run's own pods (security review R8): a pod is read for a run's status (the chief's summary and
log, exits, disruptions, why workers cannot start) only when the run's TFJob controls it (its uid) and it is named as
the training-operator names the TFJob's workers. A pod that merely carries the labels, or takes a worker's name before
the real one exists, changes nothing. Pure, and the shell against the fake API (milliseconds)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from dtr_operator.reconcile.context import ObservedRun
from dtr_operator.status.compute import tfjob_status
from dtr_operator.status.pods import is_own_pod, own_pods
from dtr_operator.status.waiting import waiting_status

from support.fake_kube import FakeKube
from support.reconciler import TFJOB, reconciler, run_policy_patches, status_writes
from support.runs import make_run
from support.tfjobs import DONE_PODS, RUN, SUMMARY, T1, TFJOB_UID, cond, controlled_by, pod, tfjob, waiting_pod

FORGED = {"loss": 0.01, "accuracy": 0.99, "epochs": 3, "examplesPerSecond": 1.0,
          "modelPath": "/mnt/dtr/models/mnist-cnn/7", "modelVersion": 7}  # fmt: skip


def forged(name: str = "mnist-cnn-forged", owners: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    """Worker 0 as a teammate makes it: the training-operator's labels, a finished container whose termination
    message claims accuracy 0.99 and a model; owned by nothing unless `owners`."""
    made = pod(0, 0, json.dumps(FORGED), **kw)
    made["metadata"]["name"] = name
    made["metadata"]["ownerReferences"] = owners or []
    return made


def test_only_a_pod_the_tfjob_controls_and_names_as_its_worker_is_the_runs():
    assert [p["metadata"]["name"] for p in own_pods(RUN, tfjob(), DONE_PODS)] == ["mnist-cnn-worker-0",
                                                                               "mnist-cnn-worker-1"]
    not_controller = [{**controlled_by()[0], "controller": False}]
    other_kind = [{**controlled_by()[0], "kind": "Job", "apiVersion": "batch/v1"}]
    for pretender in (
        forged(),  # labelled as worker 0, owned by nothing
        forged("mnist-cnn-worker-0"),  # named as worker 0 before the real one exists
        forged("mnist-cnn-worker-0", controlled_by("another-tfjob")),  # another TFJob's (an earlier run's)
        forged("mnist-cnn-worker-0", not_controller),  # an owner, not the controller
        forged("mnist-cnn-worker-0", other_kind),
        forged(owners=controlled_by()),  # adopted by the TFJob (it carried its selector's labels): not a worker's name
        forged("mnist-cnn-worker-2", controlled_by()),  # a third worker of a two-worker run
    ):
        assert not is_own_pod(RUN, TFJOB_UID, pretender), pretender["metadata"]
    assert not is_own_pod(RUN, None, DONE_PODS[0]), "no TFJob uid, no pod is the run's"


def test_a_forged_chief_changes_neither_the_metrics_nor_the_model():
    job = tfjob([cond("Succeeded")], succeeded=2)
    honest = tfjob_status(RUN, job, DONE_PODS, {}, T1)
    # Listed first (its name sorts before the workers'), as the API would list it.
    for pods in ([forged(), *DONE_PODS], [*DONE_PODS, forged("mnist-cnn-worker-9")]):
        status = tfjob_status(RUN, job, pods, {}, T1)
        assert status == honest
        assert status["metrics"]["accuracy"] == SUMMARY["accuracy"] and status["model"]["version"] == 1


def test_a_forged_chief_alone_gives_no_metrics_and_no_model():
    status = tfjob_status(RUN, tfjob([cond("Succeeded")], succeeded=2), [forged("mnist-cnn-worker-0")], {}, T1)
    assert (status["phase"], status["reason"]) == ("Succeeded", "MetricsUnavailable")
    assert "metrics" not in status and "model" not in status and "workerRestarts" not in status


def test_a_forged_failure_is_not_the_runs():
    job = tfjob([cond("Failed", message="TFJob ml/mnist-cnn has failed because 1 Worker replica(s) failed.")])
    code_error = forged()
    code_error["status"]["containerStatuses"][1]["state"]["terminated"] = {
        "exitCode": 8, "message": "dtr_trainer[worker-0]: error: evil.py:1 in x: ValueError: pwned"}  # fmt: skip
    disrupted = forged("mnist-cnn-evicted")
    disrupted["spec"] = {"nodeName": "n9"}
    disrupted["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionBy"}]
    status = tfjob_status(RUN, job, [code_error, disrupted, pod(1, 137, "killed")], {}, T1)
    assert status["reason"] == "TFJobFailed", "not UserCodeError: the code error is a stranger's"
    assert "pwned" not in status["message"] and "n9" not in status["message"]
    assert "worker mnist-cnn-worker-1 exited with code 137" in status["message"]


def test_a_forged_pod_that_cannot_start_is_no_reason_to_wait():
    previous = {"phase": "Pending", "reason": "TFJobCreated", "message": "waiting"}
    stuck = waiting_pod(0, "ImagePullBackOff", "forged")
    stuck["metadata"]["ownerReferences"] = []
    kube = FakeKube()
    kube.put(make_run({"workers": 2}, uid="u-1", generation=1) | {"status": previous})
    kube.put(TFJOB)
    kube.put(stuck, "Pod")
    rec, events = reconciler(kube)
    rec.check_waiting_pods(("ml", "mnist-cnn", "u-1"))
    assert status_writes(kube) == [] and events == []
    # The same pod the TFJob's own: the run says why.
    assert waiting_status(RUN, [waiting_pod(0, "ImagePullBackOff", "no such image")], previous, T1)["reason"] == \
        "WorkerPodsNotStarting"  # fmt: skip


def test_the_mirror_reads_a_finished_tfjobs_own_pods_only():
    kube = FakeKube()
    body = make_run({"workers": 2}, uid="u-1", generation=1) | {"status": {"phase": "Running"}}
    kube.put(body)
    done = {**copy.deepcopy(TFJOB), "status": tfjob([cond("Succeeded")], succeeded=2)["status"]}
    kube.put(done)
    for p in (forged(), *DONE_PODS):
        kube.put(p, "Pod")
    rec, _ = reconciler(kube)
    rec.mirror.sync_status(ObservedRun.parse(kube.stored("DistTrainingRun", "mnist-cnn"), "img:1"), done)
    [patch] = status_writes(kube)
    assert patch["metrics"]["accuracy"] == SUMMARY["accuracy"] and patch["model"]["version"] == 1


# ---- the chief's log (progress) and its exits: read only from the TFJob's own worker 0 ------------------------

ERROR_LOG = ("dtr_trainer[worker-0]: epoch 1/3 end accuracy=0.9900 loss=0.0100 examples_per_second=9.0\n"
             "dtr_trainer[worker-0]: error: evil.py:1: SyntaxError\n")  # fmt: skip


def running(chief: dict[str, Any] | None) -> tuple[FakeKube, dict[str, Any]]:
    body = make_run({"workers": 2}, uid="u-1", generation=1) | {"status": {"phase": "Running",
                                                                          "reason": "TFJobRunning"}}
    kube = FakeKube()
    kube.put(body)
    kube.put(TFJOB)
    if chief is not None:
        exited = copy.deepcopy(chief)
        exited["status"]["containerStatuses"][1]["state"] = {"terminated": {"exitCode": 8, "message": "x"}}
        kube.put(exited, "Pod")
    kube.set_log("mnist-cnn-worker-0", ERROR_LOG)
    return kube, kube.stored("DistTrainingRun", "mnist-cnn") or {}


@pytest.mark.parametrize("chief", [
    None,  # no pod of that name: the log endpoint is not asked
    forged("mnist-cnn-worker-0"),  # a pod of the chief's name, made before the real one: owned by nothing
    forged("mnist-cnn-worker-0", controlled_by("an-earlier-tfjob")),
])  # fmt: skip
def test_a_pod_named_as_the_chief_that_is_not_the_tfjobs_is_not_read(chief: dict[str, Any] | None):
    kube, body = running(chief)
    rec, events = reconciler(kube)
    rec.poll_progress(body)
    assert kube.succeeded("pod_log") == [], "its log is not read"
    assert status_writes(kube) == [] and events == [] and run_policy_patches(kube) == []


def test_the_tfjobs_own_chief_is_read_and_its_uid_checked_once_per_run():
    kube, body = running(pod(0))
    rec, _ = reconciler(kube)
    rec.poll_progress(body)
    rec.poll_progress(body)
    assert [w["progress"]["epochsDone"] for w in status_writes(kube)] == ["1/3"]
    assert run_policy_patches(kube)[:1] == [("mnist-cnn", {"backoffLimit": 0})], "its own exit 8 counts"
    assert len(kube.succeeded("get_tfjob")) == 1, "the TFJob's uid is kept for the run's next reads"


def test_a_tfjob_not_the_runs_makes_no_pod_the_runs():
    kube, body = running(pod(0))
    kube.put({**TFJOB, "metadata": {**TFJOB["metadata"], "ownerReferences": []}})
    rec, _ = reconciler(kube)
    rec.poll_progress(body)
    assert kube.succeeded("pod_log") == [] and status_writes(kube) == []
