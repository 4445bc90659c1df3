"""A protected run's PodDisruptionBudget (spec.disruption.protect) on a real API server, with kube-controller-manager's
disruption controller computing its status: made with the run's children and owned by the run; while its workers run,
the Eviction API refuses to evict one (429) and `kubectl drain` of their node waits; once the run has finished the
budget allows every eviction, and it goes with the run. No kubelet or scheduler runs here: the workers are bound to a
Node object made for the test, and their statuses written as a kubelet would (Running and Ready, then Succeeded)."""

from __future__ import annotations

import json
from typing import Any

from dtr_operator.labels import selects
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_support import create_run, get, set_pod_state, wait_status, worker_pods

from support.api import Api, now
from support.cluster import Cluster
from support.operator import Operator
from support.wait import wait_for

PROTECTED = {"workers": 2, "disruption": {"protect": True}}


def _running_and_ready(cluster: Cluster, namespace: str, pod: dict[str, Any]) -> None:
    """A worker's status as a kubelet writes it once its container runs (no readiness probe: Ready at once)."""
    at = now()
    container = {"name": "tensorflow", "image": "trainer", "imageID": "", "restartCount": 0, "ready": True,
                 "started": True, "state": {"running": {"startedAt": at}}}  # fmt: skip
    conditions = [{"type": kind, "status": "True", "lastTransitionTime": at} for kind in ("Ready", "ContainersReady")]
    body = {"status": {"phase": "Running", "startTime": at, "conditions": conditions, "containerStatuses": [container]}}
    cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps(body))  # fmt: skip


def _bind(cluster: Cluster, namespace: str, pod: str, node: str) -> None:
    """Place the pod on the node, as the scheduler does (pods/binding)."""
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip
    cluster.kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", "-f", "-",
                    input=json.dumps(binding))  # fmt: skip


def _evict(namespace: str, pod: str) -> tuple[int, str]:
    """POST pods/<pod>/eviction, as kubectl drain does: the HTTP status and the API's answer."""
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    try:
        Api.from_kubeconfig().core.create_namespaced_pod_eviction(pod, namespace, eviction)
    except ApiException as err:
        return err.status, str(err.body)
    return 201, ""


def _budget(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    found = get(cluster, namespace, "poddisruptionbudget", name)
    assert found is not None, f"no PodDisruptionBudget {name}"
    return found


def _computed(cluster: Cluster, namespace: str, name: str, **expected: int) -> dict[str, Any]:
    """The budget once the disruption controller has computed its status for its current spec, as expected."""

    def probe() -> dict[str, Any] | None:
        pdb = _budget(cluster, namespace, name)
        st = pdb.get("status") or {}
        current = st.get("observedGeneration") == pdb["metadata"]["generation"]
        return pdb if current and all(st.get(k) == v for k, v in expected.items()) else None

    return wait_for(probe, f"the disruption controller's status of PodDisruptionBudget {name}: {expected}")


def test_a_protected_runs_workers_are_not_evicted_while_it_runs_and_are_once_it_has_ended(
    control_plane: Cluster, namespace: str, operator: Operator
):
    run = create_run(control_plane, namespace, "kept", PROTECTED)
    wait_status(control_plane, namespace, "kept", "children created", tfJob="kept")
    pdb, job = _budget(control_plane, namespace, "kept"), get(control_plane, namespace, "tfjob", "kept")
    assert job is not None
    (ref,) = pdb["metadata"]["ownerReferences"]
    assert ref["uid"] == run["metadata"]["uid"] and ref["controller"] is True
    assert pdb["metadata"]["ownerReferences"] == job["metadata"]["ownerReferences"]
    assert pdb["spec"]["minAvailable"] == 2
    # The pods the training-operator made are the ones the budget selects.
    pods = worker_pods(control_plane, namespace, "kept", 2)
    assert all(selects(pdb["spec"]["selector"], p["metadata"]["labels"]) for p in pods)

    node = namespace  # a name no other test's node has
    control_plane.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    try:
        for pod in pods:
            _bind(control_plane, namespace, pod["metadata"]["name"], node)
            _running_and_ready(control_plane, namespace, pod)
        _refused_while_it_runs(control_plane, namespace, node)
    finally:
        control_plane.kubectl("delete", "node", node, "--ignore-not-found", "--wait=false", check=False)

    # The run ends while its workers still run: its TFJob deleted, the pods left behind (orphaned) still Ready.
    control_plane.kubectl("delete", "tfjob", "kept", "-n", namespace, "--cascade=orphan", "--wait=true")
    wait_status(control_plane, namespace, "kept", "failed", phase="Failed", reason="TFJobDeleted")
    pdb = _computed(control_plane, namespace, "kept", currentHealthy=2, desiredHealthy=0, disruptionsAllowed=2)
    assert pdb["spec"]["minAvailable"] == 0 and pdb["metadata"]["ownerReferences"] == [ref]
    assert _evict(namespace, "kept-worker-1") == (201, "")

    control_plane.kubectl("delete", "dtr", "kept", "-n", namespace, "--wait=true")
    wait_for(lambda: get(control_plane, namespace, "poddisruptionbudget", "kept") is None,
             "the PodDisruptionBudget to be garbage-collected with the run")  # fmt: skip


def _refused_while_it_runs(cluster: Cluster, namespace: str, node: str) -> None:
    """Both workers run, ready, on `node`: a drain of it cordons it, then waits on the budget until its own timeout,
    and an eviction of either worker is refused; neither is deleted."""
    _computed(cluster, namespace, "kept", currentHealthy=2, desiredHealthy=2, disruptionsAllowed=0)
    # The workers' scratch dir is an emptyDir: without --delete-emptydir-data a drain refuses them outright.
    drain = cluster.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=12s",
                            check=False, timeout=60)  # fmt: skip
    said = drain.stdout + drain.stderr
    assert drain.returncode != 0, said
    assert "Cannot evict pod as it would violate the pod's disruption budget" in said and "will retry after" in said
    assert cluster.kubectl_json("get", "node", node)["spec"].get("unschedulable") is True, "cordoned"
    status, answer = _evict(namespace, "kept-worker-1")
    assert status == 429, answer
    assert "Cannot evict pod as it would violate the pod's disruption budget" in answer
    assert "The disruption budget kept needs 2 healthy pods and has 2 currently" in answer
    for index in (0, 1):
        worker = get(cluster, namespace, "pod", f"kept-worker-{index}")
        assert worker is not None and not worker["metadata"].get("deletionTimestamp"), f"worker {index} deleted"


def test_a_protected_run_that_succeeded_lets_its_budget_go(control_plane: Cluster, namespace: str, operator: Operator):
    create_run(control_plane, namespace, "done", PROTECTED)
    pods = worker_pods(control_plane, namespace, "done", 2)
    for pod in pods:
        set_pod_state(control_plane, namespace, pod, "Succeeded")
    wait_status(control_plane, namespace, "done", "succeeded", phase="Succeeded")
    wait_for(lambda: _budget(control_plane, namespace, "done")["spec"]["minAvailable"] == 0,
             "the finished run's budget to allow every eviction")  # fmt: skip


def test_a_foreign_budget_with_the_runs_name_creates_no_workers(
    control_plane: Cluster, namespace: str, operator: Operator
):
    foreign = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "theirs", "namespace": namespace},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"team": "other"}}},
    }
    control_plane.create(foreign)
    create_run(control_plane, namespace, "theirs", PROTECTED)
    st = wait_status(control_plane, namespace, "theirs", "conflict", phase="Failed", reason="NameConflict")
    assert "PodDisruptionBudget named theirs already exists and does not belong to this run" in st["message"]
    after = _budget(control_plane, namespace, "theirs")
    assert not after["metadata"].get("ownerReferences") and after["spec"]["maxUnavailable"] == 1
    assert get(control_plane, namespace, "tfjob", "theirs") is None
    assert get(control_plane, namespace, "pvc", "theirs-data") is None
