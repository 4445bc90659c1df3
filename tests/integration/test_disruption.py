"""A run Kubernetes took a worker away from starts again (spec.disruption), against a real API server, garbage
collector and training-operator: the failed TFJob deleted in the foreground, made again once its pods are gone, the
status saying each step; a pod that does not go (as one of a lost node) is waited for and named; an operator
restarted in the middle carries on; resume false fails as before. No kubelet: the tests write the pods' states as
one would (operator_support.set_pod_state), and the DisruptionTarget condition as the eviction API would."""

from __future__ import annotations

import json
from typing import Any

from operator_support import (
    create_run,
    events_once,
    get,
    set_pod_state,
    set_running,
    status,
    wait_status,
    worker_pods,
)

from support.api import now
from support.cluster import Cluster
from support.operator import Operator
from support.wait import wait_for

HOLD = "distml.dev/test-hold"  # a finalizer of the test's: the pod stays Terminating, as one of a lost node does
SUMMARY = {"loss": 0.07, "accuracy": 0.98, "epochs": 3, "examplesPerSecond": 5400.0,
           "modelPath": "/mnt/dtr/models/drained/1", "modelVersion": 1}  # fmt: skip


def evict(cluster: Cluster, namespace: str, pod: dict[str, Any]) -> None:
    """The pod as a drain leaves it: DisruptionTarget (EvictionByEvictionAPI, which the eviction API sets before the
    pod is deleted), then its trainer stopped by SIGTERM."""
    # Set now: kube-controller-manager's disruption controller turns a DisruptionTarget older than 2 minutes on a pod
    # that is not being deleted to False, as stale (the pod here is never deleted by the eviction).
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                 "message": "Eviction API: evicting", "lastTransitionTime": now()}  # fmt: skip
    cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": {"conditions": [condition]}}))  # fmt: skip
    set_pod_state(cluster, namespace, pod, "Failed", exit_code=143, message="terminated (SIGTERM)")


def start_training(cluster: Cluster, namespace: str, name: str, spec: dict[str, Any] | None = None) -> list[dict]:
    create_run(cluster, namespace, name, {"restartPolicy": "Never", **(spec or {})})
    wait_status(cluster, namespace, name, "children created", tfJob=name)
    pods = worker_pods(cluster, namespace, name, 2)
    set_running(cluster, namespace, name, pods)
    wait_status(cluster, namespace, name, "running", phase="Running", workersReady="2/2")
    return pods


def drain(cluster: Cluster, namespace: str, pods: list[dict[str, Any]]) -> None:
    """Worker 1 drained away; worker 0 lost its peer, unless the resume has deleted it by then. Its uid in the patch
    is a precondition: the API server refuses the patch once the resumed TFJob has made a pod of that name (the CI run
    at 6ab1310 failed the new pod, and with it the resumed run)."""
    evict(cluster, namespace, pods[1])
    terminated = {"exitCode": 138, "reason": "Error", "message": "dtr_trainer[worker-0]: error: lost a peer"}
    lost = {"metadata": {"uid": pods[0]["metadata"]["uid"]}, "status": {"phase": "Failed", "containerStatuses": [
        {"name": "tensorflow", "image": "x", "imageID": "", "restartCount": 0, "ready": False,
         "state": {"terminated": {**terminated, "startedAt": "2026-12-05T00:00:00Z",
                                  "finishedAt": "2026-12-05T00:00:01Z"}}}]}}  # fmt: skip
    cluster.kubectl("patch", "pod", pods[0]["metadata"]["name"], "-n", namespace, "--subresource=status",
                    "--type=merge", "-p", json.dumps(lost), check=False)  # fmt: skip


def tfjob_uid(cluster: Cluster, namespace: str, name: str) -> str | None:
    job = get(cluster, namespace, "tfjob", name)
    return None if job is None or job["metadata"].get("deletionTimestamp") else job["metadata"]["uid"]


def remade(cluster: Cluster, namespace: str, name: str, old_uid: str, timeout: float = 90) -> str:
    def new_uid() -> str | None:
        uid = tfjob_uid(cluster, namespace, name)
        return uid if uid not in (None, old_uid) else None

    return wait_for(new_uid, f"TFJob {name} made again", timeout=timeout)


def test_a_drained_worker_resumes_the_run_which_then_succeeds(
    control_plane: Cluster, namespace: str, operator: Operator
):
    pods = start_training(control_plane, namespace, "drained")
    first = tfjob_uid(control_plane, namespace, "drained")
    drain(control_plane, namespace, pods)
    second = remade(control_plane, namespace, "drained", first)
    st = status(control_plane, namespace, "drained")
    assert st["resumes"] == 1 and st["phase"] != "Failed", st
    [entry] = st["disruptions"]
    assert entry["attempt"] == 2 and entry["tfJobUID"] == first
    assert entry["message"].startswith("worker drained-worker-1 on node no node evicted through the Eviction API")
    resuming = ("Warning", "ResumingAfterDisruption")
    said = [m for kind, reason, m in events_once(control_plane, namespace, "drained", *resuming)
            if (kind, reason) == resuming]  # fmt: skip
    assert said and "resuming from the start (no epoch had finished) as attempt 2" in said[0], said

    pods = worker_pods(control_plane, namespace, "drained", 2)
    assert all(p["metadata"]["ownerReferences"][0]["uid"] == second for p in pods), "the new TFJob's pods"
    for pod in pods:
        set_pod_state(control_plane, namespace, pod, "Running")
    set_pod_state(control_plane, namespace, pods[1], "Succeeded")
    set_pod_state(control_plane, namespace, pods[0], "Succeeded", message=json.dumps(SUMMARY))
    st = wait_status(control_plane, namespace, "drained", "succeeded", phase="Succeeded")
    assert st["reason"] == "TrainingSucceeded" and st["resumes"] == 1


def test_a_pod_that_does_not_go_is_waited_for_and_named_even_across_an_operator_restart(
    control_plane: Cluster, namespace: str, operator: Operator
):
    pods = start_training(control_plane, namespace, "held")
    first = tfjob_uid(control_plane, namespace, "held")
    held = pods[1]["metadata"]["name"]
    control_plane.kubectl("patch", "pod", held, "-n", namespace, "--type=merge",
                          "-p", json.dumps({"metadata": {"finalizers": [HOLD]}}))  # fmt: skip
    drain(control_plane, namespace, pods)

    def waiting() -> dict[str, Any] | None:
        st = status(control_plane, namespace, "held")
        return st if "waiting for the failed TFJob's pods to go" in (st.get("message") or "") else None

    st = wait_for(waiting, "the run waiting for the held pod", timeout=90)
    assert st["reason"] == "ResumingAfterDisruption" and held in st["message"], st
    assert "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute" in st["message"]
    assert get(control_plane, namespace, "tfjob", "held")["metadata"]["uid"] == first, "not made again meanwhile"

    operator.stop()  # the pod goes while the operator is down: the restarted one makes the TFJob again
    control_plane.kubectl("patch", "pod", held, "-n", namespace, "--type=merge",
                          "-p", json.dumps({"metadata": {"finalizers": None}}))  # fmt: skip
    wait_for(lambda: get(control_plane, namespace, "tfjob", "held") is None, "the failed TFJob gone", timeout=60)
    operator.start()
    remade(control_plane, namespace, "held", first)
    st = status(control_plane, namespace, "held")
    assert st["resumes"] == 1 and len(st["disruptions"]) == 1 and st["phase"] == "Pending", st


def test_with_resume_false_a_drain_fails_the_run_saying_why_it_did_not_resume(
    control_plane: Cluster, namespace: str, operator: Operator
):
    pods = start_training(control_plane, namespace, "kept", {"disruption": {"resume": False}})
    first = tfjob_uid(control_plane, namespace, "kept")
    drain(control_plane, namespace, pods)
    st = wait_status(control_plane, namespace, "kept", "failed", phase="Failed")
    assert "evicted through the Eviction API" in st["message"]
    assert st["message"].endswith("(not resumed: spec.disruption.resume is false)"), st["message"]
    assert "resumes" not in st and tfjob_uid(control_plane, namespace, "kept") == first


def test_a_resumed_run_whose_pod_never_goes_fails_after_its_wait_naming_it(
    control_plane: Cluster, namespace: str, operator: Operator
):
    """spec.disruption.waitSeconds at its least (60 s): the held pod never goes, the run fails ResumeTimedOut."""
    pods = start_training(control_plane, namespace, "stuck", {"disruption": {"waitSeconds": 60}})
    held = pods[1]["metadata"]["name"]
    control_plane.kubectl("patch", "pod", held, "-n", namespace, "--type=merge",
                          "-p", json.dumps({"metadata": {"finalizers": [HOLD]}}))  # fmt: skip
    try:
        drain(control_plane, namespace, pods)
        st = wait_status(control_plane, namespace, "stuck", "timed out", timeout=150, phase="Failed")
        assert st["reason"] == "ResumeTimedOut", st
        assert "did not start again within 60 s (spec.disruption.waitSeconds)" in st["message"], st["message"]
        assert f"waiting for the failed TFJob's pods to go: {held}" in st["message"], st["message"]
    finally:
        control_plane.kubectl("patch", "pod", held, "-n", namespace, "--type=merge",
                              "-p", json.dumps({"metadata": {"finalizers": None}}), check=False)  # fmt: skip
