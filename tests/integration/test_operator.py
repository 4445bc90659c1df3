"""The operator (kopf.testing.KopfRunner, in this process) against the real local control plane:
kube-apiserver, kube-controller-manager (garbage collector) and the Kubeflow training-operator.

No kubelet runs here, so worker pods stay Pending; where a test needs workers to run or finish it
writes the pods' status itself, as a kubelet would, and the real training-operator turns that into
the TFJob's status, which the operator mirrors into the run.
"""

from __future__ import annotations

import json
import time

import pytest
from dtr_operator.api import RUN_LABEL
from dtr_operator.policy import CLAIM_LABEL, CLAIM_LABEL_VALUE
from operator_support import (
    condition,
    create_run,
    events,
    events_once,
    get,
    items,
    set_pod_state,
    set_running,
    status,
    wait_status,
    worker_pods,
)

from support.cluster import Cluster
from support.operator import IMAGE, Operator
from support.wait import wait_for

SUMMARY = {
    "loss": 0.071,
    "accuracy": 0.9812,
    "epochs": 3,
    "examplesPerSecond": 5400.5,
    "modelPath": "/mnt/dtr/models/mnist-cnn/1",
    "modelVersion": 1,
}


# ---- children ---------------------------------------------------------------------------------


def test_children_are_created_with_owner_references(control_plane: Cluster, namespace: str, operator: Operator):
    # The worker pods must be admitted under the restricted Pod Security Standard.
    control_plane.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    run = create_run(control_plane, namespace, "mnist-cnn", {"workers": 3, "training": {"dataset": "digits"}})
    uid = run["metadata"]["uid"]
    st = wait_status(control_plane, namespace, "mnist-cnn", "children created", tfJob="mnist-cnn", pvc="mnist-cnn-data")
    assert st["phase"] == "Pending" and st["observedGeneration"] == 1
    assert condition(st, "Created")["status"] == "True"

    job = get(control_plane, namespace, "tfjob", "mnist-cnn")
    assert job is not None
    (ref,) = job["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "name": "mnist-cnn", "uid": uid,
        "controller": True, "blockOwnerDeletion": True,
    }  # fmt: skip
    assert job["metadata"]["labels"][RUN_LABEL] == "mnist-cnn"
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3
    (container,) = worker["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow" and container["image"] == IMAGE
    assert "digits" in container["args"]

    # Retain (the default): the PVC is labelled but has no owner, so it outlives the run.
    pvc = get(control_plane, namespace, "pvc", "mnist-cnn-data")
    assert pvc is not None and pvc["metadata"]["labels"][RUN_LABEL] == "mnist-cnn"
    assert not pvc["metadata"].get("ownerReferences")
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"

    # The real training-operator accepted the TFJob: it made one pod per worker and said so.
    worker_pods(control_plane, namespace, "mnist-cnn", 3)
    wait_status(control_plane, namespace, "mnist-cnn", "TFJob created", reason="TFJobCreated")
    # kopf posts events in the background: wait for the last one expected.
    reasons = wait_for(
        lambda: (r := [reason for _, reason, _ in events(control_plane, namespace, "mnist-cnn")])
        and "TFJobCreated" in r and r,
        "the TFJobCreated event", timeout=30,
    )
    assert "Created" in reasons
    # One event per transition: Created stands for the move to TFJobSubmitted (docs/api.md#events).
    assert "TFJobSubmitted" not in reasons and reasons.count("TFJobCreated") == 1, reasons


def test_a_delete_policy_pvc_is_owned_by_the_run(control_plane: Cluster, namespace: str, operator: Operator):
    run = create_run(control_plane, namespace, "owned", {"storage": {"reclaimPolicy": "Delete", "size": "2Gi"}})
    wait_status(control_plane, namespace, "owned", "children created", tfJob="owned")
    pvc = get(control_plane, namespace, "pvc", "owned-data")
    assert pvc is not None
    (ref,) = pvc["metadata"]["ownerReferences"]
    assert ref["uid"] == run["metadata"]["uid"] and ref["controller"] is True
    assert pvc["spec"]["resources"]["requests"]["storage"] == "2Gi"


def test_no_duplicates_after_operator_restarts(control_plane: Cluster, namespace: str, operator: Operator):
    create_run(control_plane, namespace, "steady")
    wait_status(control_plane, namespace, "steady", "children created", tfJob="steady")
    job_uid = get(control_plane, namespace, "tfjob", "steady")["metadata"]["uid"]
    pvc_uid = get(control_plane, namespace, "pvc", "steady-data")["metadata"]["uid"]

    for _ in range(2):
        operator.stop()
        operator.start()
        time.sleep(3)  # let the restarted operator resume every run
    # A run created while the operator is down is picked up when it comes back.
    operator.stop()
    create_run(control_plane, namespace, "late")
    operator.start()
    wait_status(control_plane, namespace, "late", "children created", tfJob="late")

    jobs = items(control_plane, namespace, "tfjobs", f"{RUN_LABEL}=steady")
    pvcs = items(control_plane, namespace, "pvc", f"{RUN_LABEL}=steady")
    assert [j["metadata"]["uid"] for j in jobs] == [job_uid]
    assert [p["metadata"]["uid"] for p in pvcs] == [pvc_uid]
    assert len(items(control_plane, namespace, "tfjobs", RUN_LABEL)) == 2
    assert len(items(control_plane, namespace, "pvc", RUN_LABEL)) == 2
    created = ("Normal", "Created", "created PVC steady-data and TFJob steady")
    assert events(control_plane, namespace, "steady").count(created) == 1
    assert status(control_plane, namespace, "steady")["phase"] == "Pending"


# ---- status follows the TFJob -------------------------------------------------------------------


def test_status_follows_the_tfjob_to_success(control_plane: Cluster, namespace: str, operator: Operator):
    create_run(control_plane, namespace, "mnist-cnn")
    wait_status(control_plane, namespace, "mnist-cnn", "children created", tfJob="mnist-cnn")
    pods = worker_pods(control_plane, namespace, "mnist-cnn", 2)

    set_running(control_plane, namespace, "mnist-cnn", pods)
    st = wait_status(control_plane, namespace, "mnist-cnn", "running", phase="Running", workersReady="2/2")
    assert st["workers"] == {"active": 2, "succeeded": 0, "failed": 0}
    assert st["startTime"] and condition(st, "Running")["status"] == "True"
    running_since = condition(st, "Running")["lastTransitionTime"]

    set_pod_state(control_plane, namespace, pods[1], "Succeeded")
    set_pod_state(control_plane, namespace, pods[0], "Succeeded", message=json.dumps(SUMMARY))
    st = wait_status(control_plane, namespace, "mnist-cnn", "succeeded", phase="Succeeded")
    assert st["reason"] == "TrainingSucceeded"
    assert st["metrics"] == {"loss": 0.071, "accuracy": 0.9812, "epochs": 3, "examplesPerSecond": 5400.5}
    assert st["model"] == {"path": "/mnt/dtr/models/mnist-cnn/1", "claim": "mnist-cnn-data", "version": 1,
                           "storageUri": "pvc://mnist-cnn-data/models/mnist-cnn"}  # fmt: skip
    assert st["workersReady"] == "2/2" and st["workers"]["succeeded"] == 2
    assert st["completionTime"]
    assert st["message"] == "accuracy 0.9812, model exported to /mnt/dtr/models/mnist-cnn/1"
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Succeeded"]["status"] == "True" and conds["Running"]["status"] == "False"
    assert conds["Running"]["lastTransitionTime"] >= running_since

    table = control_plane.kubectl("get", "distrainingruns", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "WORKERS", "PROGRESS", "ACCURACY", "MODEL", "METRIC", "AGE"]
    assert table[1].split()[:7] == ["mnist-cnn", "Succeeded", "2/2", "3/3", "0.9812", "/mnt/dtr/models/mnist-cnn/1",
                                    "accuracy=0.9812"]  # fmt: skip
    assert st["headline"] == "accuracy=0.9812"
    assert st["progress"]["progressPercentage"] == 100 and st["progress"]["estimatedRemainingSeconds"] == 0

    said = events_once(control_plane, namespace, "mnist-cnn", "Normal", "TrainingSucceeded")
    assert ("Normal", "TFJobRunning") in [e[:2] for e in said]
    message = next(m for _, r, m in said if r == "TrainingSucceeded")
    assert "0.9812" in message and "/mnt/dtr/models/mnist-cnn/1" in message

    # Finished is final: deleting the TFJob now (as its TTL would) changes nothing.
    control_plane.kubectl("delete", "tfjob", "mnist-cnn", "-n", namespace)
    time.sleep(2)
    assert status(control_plane, namespace, "mnist-cnn") == st


def test_success_without_a_summary_says_so(control_plane: Cluster, namespace: str, operator: Operator):
    create_run(control_plane, namespace, "quiet", {"workers": 1})
    wait_status(control_plane, namespace, "quiet", "children created", tfJob="quiet")
    (pod,) = worker_pods(control_plane, namespace, "quiet", 1)
    set_pod_state(control_plane, namespace, pod, "Succeeded", message="Epoch 3/3 - loss: 0.1 (not JSON)")
    st = wait_status(control_plane, namespace, "quiet", "succeeded", phase="Succeeded")
    assert st["reason"] == "MetricsUnavailable"
    assert "not a JSON object" in st["message"]
    assert "metrics" not in st and "model" not in st


def test_a_failed_worker_fails_the_run_and_is_named(control_plane: Cluster, namespace: str, operator: Operator):
    create_run(control_plane, namespace, "broken", {"restartPolicy": "Never"})
    wait_status(control_plane, namespace, "broken", "children created", tfJob="broken")
    pods = worker_pods(control_plane, namespace, "broken", 2)
    set_pod_state(control_plane, namespace, pods[0], "Running")
    set_pod_state(
        control_plane, namespace, pods[1], "Failed", exit_code=2,
        message="Traceback (most recent call last):\nValueError: dataset x.npz not found under /mnt/dtr/data",
    )  # fmt: skip
    st = wait_status(control_plane, namespace, "broken", "failed", phase="Failed")
    assert "broken-worker-1 exited with code 2: ValueError: dataset x.npz not found" in st["message"]
    assert condition(st, "Failed")["status"] == "True"
    events_once(control_plane, namespace, "broken", "Warning", st["reason"])

    # Its worker still running is released (by the training-operator, once the operator sets the TFJob's
    # cleanPodPolicy); the failed one stays, with its termination message.
    job = control_plane.kubectl_json("get", "tfjob", "broken", "-n", namespace)
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"

    def released() -> list[str] | None:
        left = items(control_plane, namespace, "pods", "training.kubeflow.org/job-name=broken")
        live = [p["metadata"]["name"] for p in left if not p["metadata"].get("deletionTimestamp")]
        return live if live == ["broken-worker-1"] else None

    wait_for(released, "broken-worker-0 deleted, broken-worker-1 kept", timeout=60)
    released = events_once(control_plane, namespace, "broken", "Normal", "WorkerPodsReleased")
    said = [m for _, reason, m in released if reason == "WorkerPodsReleased"]
    assert said and "broken-worker-0" in said[0] and "broken-worker-1" not in said[0], said


# ---- what passes the schema but cannot run -------------------------------------------------------


def test_a_foreign_tfjob_with_the_runs_name_is_a_conflict(control_plane: Cluster, namespace: str, operator: Operator):
    foreign = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "taken", "namespace": namespace, "labels": {"team": "other"}},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "tensorflow", "image": "someone/else:1"}]}}}}},
    }  # fmt: skip
    control_plane.create(foreign)
    before = get(control_plane, namespace, "tfjob", "taken")
    create_run(control_plane, namespace, "taken")
    st = wait_status(control_plane, namespace, "taken", "conflict", phase="Failed", reason="NameConflict")
    assert "TFJob named taken already exists and does not belong to this run" in st["message"]
    after = get(control_plane, namespace, "tfjob", "taken")
    assert after["metadata"].get("ownerReferences") is None
    assert after["metadata"]["labels"] == {"team": "other"}
    assert after["spec"] == before["spec"]
    events_once(control_plane, namespace, "taken", "Warning", "NameConflict")
    # Nothing else was made for the run (its PVC is only created once the TFJob name is known to be free).
    assert get(control_plane, namespace, "pvc", "taken-data") is None


def test_a_foreign_pvc_with_the_runs_claim_name_is_a_conflict(
    control_plane: Cluster, namespace: str, operator: Operator
):
    control_plane.create({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "clash-data", "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Mi"}}},
    })  # fmt: skip
    create_run(control_plane, namespace, "clash")
    st = wait_status(control_plane, namespace, "clash", "conflict", phase="Failed", reason="NameConflict")
    assert "PVC named clash-data already exists" in st["message"]
    pvc = get(control_plane, namespace, "pvc", "clash-data")
    assert not pvc["metadata"].get("ownerReferences") and RUN_LABEL not in (pvc["metadata"].get("labels") or {})
    assert get(control_plane, namespace, "tfjob", "clash") is None


def test_a_tfjob_deleted_out_of_band_fails_the_run(control_plane: Cluster, namespace: str, operator: Operator):
    create_run(control_plane, namespace, "victim")
    wait_status(control_plane, namespace, "victim", "children created", tfJob="victim")
    control_plane.kubectl("delete", "tfjob", "victim", "-n", namespace)
    st = wait_status(control_plane, namespace, "victim", "failed", phase="Failed", reason="TFJobDeleted")
    assert "was deleted before the run finished" in st["message"]
    # A restart does not bring it back: the run is over.
    operator.stop()
    operator.start()
    time.sleep(3)
    assert get(control_plane, namespace, "tfjob", "victim") is None
    assert status(control_plane, namespace, "victim")["reason"] == "TFJobDeleted"


def test_a_tfjob_deleted_while_the_operator_is_down_fails_the_run(
    control_plane: Cluster, namespace: str, operator: Operator
):
    create_run(control_plane, namespace, "orphan")
    wait_status(control_plane, namespace, "orphan", "children created", tfJob="orphan")
    operator.stop()
    control_plane.kubectl("delete", "tfjob", "orphan", "-n", namespace)
    operator.start()
    wait_status(control_plane, namespace, "orphan", "failed", phase="Failed", reason="TFJobDeleted")
    assert get(control_plane, namespace, "tfjob", "orphan") is None


def test_a_missing_claim_waits_then_proceeds(control_plane: Cluster, namespace: str, operator: Operator):
    create_run(control_plane, namespace, "patient", {"storage": {"claimName": "shared"}})
    st = wait_status(control_plane, namespace, "patient", "waiting", phase="Pending", reason="WaitingForPVC")
    assert st["message"].startswith(f"waiting for PVC shared in namespace {namespace}")
    assert get(control_plane, namespace, "tfjob", "patient") is None
    events_once(control_plane, namespace, "patient", "Warning", "WaitingForPVC")

    control_plane.create({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "shared", "namespace": namespace, "labels": {CLAIM_LABEL: CLAIM_LABEL_VALUE}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Mi"}}},
    })  # fmt: skip
    # Retries back off 5 s, 10 s, ...: the next attempt finds the claim.
    st = wait_status(control_plane, namespace, "patient", "children created", timeout=60, reason="TFJobCreated")
    job = get(control_plane, namespace, "tfjob", "patient")
    volumes = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"]
    assert volumes[0]["persistentVolumeClaim"]["claimName"] == "shared"
    assert st["pvc"] == "shared"
    assert get(control_plane, namespace, "pvc", "patient-data") is None
    assert not get(control_plane, namespace, "pvc", "shared")["metadata"].get("ownerReferences")


# ---- deletion ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "pvc_stays"), [("Retain", True), ("Delete", False)])
def test_deleting_the_run_follows_the_reclaim_policy(
    control_plane: Cluster, namespace: str, operator: Operator, policy: str, pvc_stays: bool
):
    create_run(control_plane, namespace, "gone", {"storage": {"reclaimPolicy": policy}})
    wait_status(control_plane, namespace, "gone", "children created", tfJob="gone")
    worker_pods(control_plane, namespace, "gone", 2)
    control_plane.kubectl("delete", "dtr", "gone", "-n", namespace, "--wait=true")

    # The garbage collector removes what the run owned: the TFJob, then its pods.
    wait_for(lambda: get(control_plane, namespace, "tfjob", "gone") is None, "the TFJob to be garbage-collected")
    wait_for(
        lambda: not items(control_plane, namespace, "pods", "training.kubeflow.org/job-name=gone"),
        "the worker pods to be garbage-collected",
    )
    if pvc_stays:
        time.sleep(3)
        pvc = get(control_plane, namespace, "pvc", "gone-data")
        assert pvc is not None and not pvc["metadata"].get("deletionTimestamp")
    else:
        wait_for(lambda: get(control_plane, namespace, "pvc", "gone-data") is None, "the PVC to be garbage-collected")


def test_a_retained_pvc_is_reused_by_a_new_run_of_the_same_name(
    control_plane: Cluster, namespace: str, operator: Operator
):
    create_run(control_plane, namespace, "again")
    wait_status(control_plane, namespace, "again", "children created", tfJob="again")
    pvc_uid = get(control_plane, namespace, "pvc", "again-data")["metadata"]["uid"]
    control_plane.kubectl("delete", "dtr", "again", "-n", namespace, "--wait=true")
    wait_for(lambda: get(control_plane, namespace, "tfjob", "again") is None, "the old TFJob to go")

    create_run(control_plane, namespace, "again")
    st = wait_status(control_plane, namespace, "again", "children created", tfJob="again", pvc="again-data")
    assert st["phase"] == "Pending"
    assert get(control_plane, namespace, "pvc", "again-data")["metadata"]["uid"] == pvc_uid


def test_a_run_re_created_at_once_waits_for_the_old_children_to_go(
    control_plane: Cluster, namespace: str, operator: Operator
):
    create_run(control_plane, namespace, "redo", {"storage": {"reclaimPolicy": "Delete"}})
    wait_status(control_plane, namespace, "redo", "children created", tfJob="redo")
    worker_pods(control_plane, namespace, "redo", 2)
    # A finalizer holds the old TFJob back, so the new run certainly meets it (owned by the old uid).
    hold = '{"metadata":{"finalizers":["test.distml.dev/hold"]}}'
    control_plane.kubectl("patch", "tfjob", "redo", "-n", namespace, "--type=merge", "-p", hold)
    control_plane.kubectl("delete", "dtr", "redo", "-n", namespace, "--wait=false")
    wait_for(lambda: get(control_plane, namespace, "dtr", "redo") is None, "the old run to be gone")
    new_uid = create_run(control_plane, namespace, "redo", {"storage": {"reclaimPolicy": "Delete"}})["metadata"]["uid"]
    st = wait_status(control_plane, namespace, "redo", "waiting for the old TFJob", reason="WaitingForCleanup")
    assert st["phase"] == "Pending" and "TFJob redo, left by an earlier run of the same name" in st["message"]
    control_plane.kubectl("patch", "tfjob", "redo", "-n", namespace, "--type=merge",
                          "-p", '{"metadata":{"finalizers":null}}')

    def owned_by_new_run() -> bool:
        job, pvc = get(control_plane, namespace, "tfjob", "redo"), get(control_plane, namespace, "pvc", "redo-data")
        return bool(job and pvc) and all(
            o["metadata"]["ownerReferences"][0]["uid"] == new_uid for o in (job, pvc)  # type: ignore[index]
        )

    wait_for(owned_by_new_run, "the new run's own TFJob and PVC", timeout=90)

    def created() -> dict | None:  # the waiting status names the TFJob too: its Created condition says they are made
        st = status(control_plane, namespace, "redo")
        return st if any(c["type"] == "Created" and c["status"] == "True" for c in st.get("conditions", [])) else None

    # read in-process, a few ms after the TFJob appears: the status saying so comes just after (a local run of f6058aa)
    st = wait_for(created, "run redo: its Created condition True", timeout=60)
    assert st["phase"] == "Pending" and st["tfJob"] == "redo", st
    assert not [r for k, r, _ in events(control_plane, namespace, "redo") if r == "NameConflict"]


# ---- worker pods that cannot start ----------------------------------------------------------------


def test_a_run_whose_pods_cannot_pull_their_image_says_so_and_carries_no_finalizer(
    control_plane: Cluster, namespace: str, operator: Operator
):
    create_run(control_plane, namespace, "stuck")
    wait_status(control_plane, namespace, "stuck", "TFJob created", reason="TFJobCreated")
    pulled = f'Back-off pulling image "{IMAGE}": not found'
    for pod in worker_pods(control_plane, namespace, "stuck", 2):
        container = {"name": "tensorflow", "image": IMAGE, "imageID": "", "restartCount": 0, "ready": False,
                     "state": {"waiting": {"reason": "ImagePullBackOff", "message": pulled}}}  # fmt: skip
        body = {"status": {"phase": "Pending", "containerStatuses": [container]}}
        control_plane.kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status",
                              "--type=merge", "-p", json.dumps(body))  # fmt: skip

    # The operator looks at the pods of a run that has waited 20 s, every 20 s.
    st = wait_status(control_plane, namespace, "stuck", "pods not starting", timeout=90, reason="WorkerPodsNotStarting")
    assert st["phase"] == "Pending"
    assert "worker stuck-worker-0 cannot start: ImagePullBackOff" in st["message"], st["message"]
    events_once(control_plane, namespace, "stuck", "Warning", "WorkerPodsNotStarting", st["message"])
    run = get(control_plane, namespace, "dtr", "stuck")
    assert not (run or {}).get("metadata", {}).get("finalizers"), "a run must stay deletable while the operator is down"


def test_a_running_run_with_a_worker_that_cannot_be_scheduled_says_why_until_it_runs(
    control_plane: Cluster, namespace: str, operator: Operator
):
    create_run(control_plane, namespace, "partly")
    wait_status(control_plane, namespace, "partly", "TFJob created", reason="TFJobCreated")
    first, second = worker_pods(control_plane, namespace, "partly", 2)
    set_pod_state(control_plane, namespace, first, "Running")
    why = ("0/2 nodes are available: 1 node(s) didn't match pod anti-affinity rules, 1 node(s) had volume node "
           "affinity conflict.")  # fmt: skip
    body = {"status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why}]}}  # fmt: skip
    control_plane.kubectl("patch", "pod", second["metadata"]["name"], "-n", namespace, "--subresource=status",
                          "--type=merge", "-p", json.dumps(body))  # fmt: skip

    # The TFJob runs once one worker does; 20 s later the operator looks at the pods, and every 20 s after.
    st = wait_status(control_plane, namespace, "partly", "a worker not running", timeout=90,
                     reason="WorkersNotAllRunning")  # fmt: skip
    assert (st["phase"], st["workersReady"]) == ("Running", "1/2"), st
    assert st["message"] == ("1 of 2 workers run; training waits for all (MultiWorkerMirroredStrategy): worker "
                             f"partly-worker-1 cannot be scheduled: {why}"), st["message"]  # fmt: skip
    events_once(control_plane, namespace, "partly", "Warning", "WorkersNotAllRunning", st["message"])
    set_pod_state(control_plane, namespace, second, "Running")
    wait_status(control_plane, namespace, "partly", "every worker running", phase="Running", reason="TFJobRunning",
                workersReady="2/2")  # fmt: skip
