"""The NetworkPolicy of a run (H1) on a real API server: the operator makes it with the run's children, owned
by the run, and the garbage collector (kube-controller-manager) removes it with the run. That a node enforces
it is tests/node/test_network_isolation.py's part."""

from __future__ import annotations

from dtr_contract.container import PORT
from dtr_operator.api import RUN_LABEL
from operator_support import create_run, get, wait_status

from support.cluster import Cluster
from support.operator import Operator
from support.wait import wait_for


def test_a_run_owns_a_policy_that_admits_only_its_own_workers_and_goes_with_it(
    control_plane: Cluster, namespace: str, operator: Operator
):
    run = create_run(control_plane, namespace, "guarded", {"workers": 2})
    wait_status(control_plane, namespace, "guarded", "children created", tfJob="guarded")
    policy = get(control_plane, namespace, "networkpolicy", "guarded")
    job = get(control_plane, namespace, "tfjob", "guarded")
    assert policy is not None and job is not None
    (ref,) = policy["metadata"]["ownerReferences"]
    assert ref["uid"] == run["metadata"]["uid"] and ref["controller"] is True
    assert policy["metadata"]["ownerReferences"] == job["metadata"]["ownerReferences"]
    same_run = {"matchLabels": {RUN_LABEL: "guarded"}}
    assert policy["spec"]["podSelector"] == same_run
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    from_the_run = {"from": [{"podSelector": same_run}], "ports": [{"protocol": "TCP", "port": PORT}]}
    assert policy["spec"]["ingress"] == [from_the_run]
    # The workers the training-operator makes carry the label the policy selects.
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"][RUN_LABEL] == "guarded"

    control_plane.kubectl("delete", "dtr", "guarded", "-n", namespace, "--wait=true")
    wait_for(lambda: get(control_plane, namespace, "networkpolicy", "guarded") is None,
             "the NetworkPolicy to be garbage-collected")  # fmt: skip


def test_a_foreign_policy_with_the_runs_name_creates_no_workers(
    control_plane: Cluster, namespace: str, operator: Operator
):
    foreign = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "open", "namespace": namespace, "labels": {"team": "other"}},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]},  # admits everything
    }
    control_plane.create(foreign)
    create_run(control_plane, namespace, "open")
    st = wait_status(control_plane, namespace, "open", "conflict", phase="Failed", reason="NameConflict")
    assert "NetworkPolicy named open already exists and does not belong to this run" in st["message"]
    after = get(control_plane, namespace, "networkpolicy", "open")
    assert after is not None and not after["metadata"].get("ownerReferences")
    assert after["spec"]["ingress"] == [{}]
    assert get(control_plane, namespace, "tfjob", "open") is None
    assert get(control_plane, namespace, "pvc", "open-data") is None
