"""dtr_client's cluster backend against the real API server, the operator and the training-operator: create, list,
wait (raising the run's failure), suspend, resume and delete. No kubelet: pod states are written as a kubelet would."""

from __future__ import annotations

import pytest
from dtr_client import RunFailed, RunNotFound, TrainingClient
from operator_support import get, set_pod_state, wait_status, worker_pods

from support.cluster import Cluster
from support.operator import Operator
from support.runs import run_doc
from support.wait import wait_for


@pytest.fixture
def client(control_plane: Cluster, namespace: str, monkeypatch: pytest.MonkeyPatch) -> TrainingClient:
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))  # Kube.for_cli's first choice, as for dtr
    return TrainingClient("cluster", namespace=namespace)


def test_create_list_and_wait_raising_the_runs_failure(control_plane: Cluster, namespace: str, operator: Operator,
                                                       client: TrainingClient) -> None:  # fmt: skip
    name = client.create(run_doc("broken", spec={"restartPolicy": "Never"}))
    assert name == "broken" and [r.name for r in client.list()] == ["broken"]
    pods = worker_pods(control_plane, namespace, "broken", 2)
    set_pod_state(control_plane, namespace, pods[0], "Running")
    set_pod_state(control_plane, namespace, pods[1], "Failed", exit_code=2,
                  message="Traceback (most recent call last):\nValueError: dataset x.npz not found")  # fmt: skip
    with pytest.raises(RunFailed) as raised:
        client.wait(name, timeout=60)
    assert raised.value.status.phase == "Failed" and raised.value.reason == client.get(name).reason
    assert "broken-worker-1 exited with code 2: ValueError: dataset x.npz not found" in raised.value.message


def test_suspend_resume_and_delete(control_plane: Cluster, namespace: str, operator: Operator,
                                   client: TrainingClient) -> None:  # fmt: skip
    name = client.create({"metadata": {"name": "pause"}, "spec": {"workers": 2}})
    for pod in worker_pods(control_plane, namespace, name, 2):
        set_pod_state(control_plane, namespace, pod, "Running")
    wait_status(control_plane, namespace, name, "running", phase="Running")

    client.suspend(name)
    wait_for(lambda: client.get(name).reason == "RunSuspended", "the run suspended", timeout=60)
    assert client.get(name).phase == "Suspended"

    client.resume(name)
    for pod in worker_pods(control_plane, namespace, name, 2):  # created again by the training-operator
        set_pod_state(control_plane, namespace, pod, "Running")
    wait_for(lambda: client.get(name).phase == "Running", "the run running again", timeout=60)

    client.delete(name)
    wait_for(lambda: get(control_plane, namespace, "dtr", name) is None, "the run deleted", timeout=60)
    assert client.list() == []
    with pytest.raises(RunNotFound, match=f"no DistTrainingRun pause in namespace {namespace}"):
        client.get(name)
