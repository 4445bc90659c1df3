"""The admin's MLflow server on a real control plane (docs/tracking.md): the operator started with
DTR_MLFLOW_TRACKING_URI gives every worker of the runs it creates MLFLOW_TRACKING_URI; without it, none. (What
the trainer does with it, against a real MLflow server: tests/mlflow.)"""

from __future__ import annotations

from typing import Any

from dtr_contract import env
from operator_support import create_run, get

from support.cluster import Cluster
from support.operator import Operator, operator_with
from support.wait import wait_for

URI = "http://mlflow.mlops.svc.cluster.local:5000"


def worker_env(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    tfjob = wait_for(lambda: get(cluster, namespace, "tfjob", name), timeout=30, what=f"TFJob {name}")
    (container,) = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_every_worker_gets_the_operators_tracking_uri(control_plane: Cluster, namespace: str) -> None:
    with operator_with(namespace, DTR_MLFLOW_TRACKING_URI=URI):
        create_run(control_plane, namespace, "tracked", {"workers": 2})
        assert worker_env(control_plane, namespace, "tracked")[env.MLFLOW_TRACKING_URI] == URI


def test_without_it_no_worker_gets_one(control_plane: Cluster, namespace: str, operator: Operator) -> None:
    create_run(control_plane, namespace, "untracked", {"workers": 1})
    assert env.MLFLOW_TRACKING_URI not in worker_env(control_plane, namespace, "untracked")
