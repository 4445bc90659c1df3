"""The NetworkPolicy that guards a run's workers (H1): what builders.py makes of a run, and when the
reconciler creates it (before the PVC and the TFJob) or stops for a policy of that name that is not the run's.
The integration tier checks it on a real API server; the node tier that the node enforces it."""

from __future__ import annotations

from typing import Any

import pytest
from dtr_contract.container import PORT
from dtr_operator.api import RUN_LABEL
from dtr_operator.builders import build_network_policy, build_tfjob, owned_by
from dtr_operator.kube import AlreadyExists
from dtr_operator.reconcile.decide import network_policy_taken
from dtr_operator.spec import parse_run

from support.fake_kube import FakeKube
from support.reconciler import reconciler, status_writes
from support.runs import make_run

UID = "0b6e4a52-1111-2222-3333-444455556666"


def run_of(name: str = "mnist-cnn", uid: str = UID, spec: dict[str, Any] | None = None):
    return parse_run(make_run(spec or {"workers": 3}, name=name, uid=uid))


def test_the_policy_admits_the_grpc_port_only_from_the_same_runs_pods_and_nothing_else():
    policy = build_network_policy(run_of("victim"))
    assert policy["apiVersion"] == "networking.k8s.io/v1" and policy["kind"] == "NetworkPolicy"
    assert policy["metadata"]["name"] == "victim" and policy["metadata"]["namespace"] == "ml"
    spec = policy["spec"]
    same_run = {"matchLabels": {RUN_LABEL: "victim"}}
    assert spec["podSelector"] == same_run
    # Ingress only: the selected pods get no other ingress; egress (DNS, datasetSource) is not policed.
    assert spec["policyTypes"] == ["Ingress"]
    # A podSelector without a namespaceSelector means this namespace only.
    assert spec["ingress"] == [{"from": [{"podSelector": same_run}], "ports": [{"protocol": "TCP", "port": PORT}]}]


def test_the_policy_selects_the_label_the_worker_pods_carry_and_the_port_they_serve():
    run = run_of("victim", spec={"workers": 2, "podLabels": {"team": "a"}})
    template = build_tfjob(run)["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    (container,) = template["spec"]["containers"]
    selector = build_network_policy(run)["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    assert [p["containerPort"] for p in container["ports"]] == [PORT]


def test_the_policy_is_owned_by_the_run_as_the_tfjob_is():
    run = run_of()
    policy = owned_by(build_network_policy(run), run)
    tfjob = owned_by(build_tfjob(run), run)
    assert policy["metadata"]["ownerReferences"] == tfjob["metadata"]["ownerReferences"]
    assert policy["metadata"]["ownerReferences"][0]["uid"] == UID


def _policy(owner_uid: str | None, owner_name: str = "mnist-cnn") -> dict[str, Any]:
    refs = [{"kind": "DistTrainingRun", "name": owner_name, "uid": owner_uid, "controller": True}] if owner_uid else []
    return {"metadata": {"name": "mnist-cnn", "ownerReferences": refs}}


def test_a_taken_policy_name_stops_the_run_unless_the_policy_is_its_own():
    run = run_of()
    assert network_policy_taken(run, _policy(UID)) is None
    earlier = network_policy_taken(run, _policy("an-earlier-uid"))
    assert earlier is not None and earlier.state.reason == "WaitingForCleanup" and earlier.retry
    stranger = network_policy_taken(run, _policy(None))
    assert stranger is not None and stranger.state.reason == "NameConflict" and not stranger.retry
    assert "NetworkPolicy named mnist-cnn" in stranger.state.message


def _api(existing_policy: dict[str, Any] | None = None) -> FakeKube:
    """A new run, and a NetworkPolicy of its name already there (or none)."""
    kube = FakeKube()
    kube.put(make_run({"workers": 2}, uid=UID, generation=1, resourceVersion="1"))
    if existing_policy is not None:
        kube.put(existing_policy, "NetworkPolicy")
    return kube


def _reconcile(kube: FakeKube) -> float | None:
    rec, _ = reconciler(kube)
    return rec.reconcile_run(make_run({"workers": 2}, uid=UID, generation=1, resourceVersion="1"))


def _created(kube: FakeKube) -> list[str]:
    """The kinds the reconcile created, in order."""
    return [args["manifest"]["kind"] for args in kube.succeeded("create")]


def test_a_new_run_gets_its_policy_before_its_volume_and_its_workers():
    kube = _api()
    assert _reconcile(kube) is None
    assert _created(kube) == ["NetworkPolicy", "PersistentVolumeClaim", "TFJob"]


def test_a_policy_of_its_own_left_by_an_earlier_attempt_is_kept():
    kube = _api(owned_by(build_network_policy(run_of(spec={"workers": 2})), run_of(spec={"workers": 2})))
    assert _reconcile(kube) is None
    assert _created(kube) == ["PersistentVolumeClaim", "TFJob"]
    read = [(a["api_version"], a["kind"]) for a in kube.succeeded("get")]
    # The policy once; the namespace once, for its Pod Security (guard.report).
    assert read == [("networking.k8s.io/v1", "NetworkPolicy"), ("v1", "Namespace")]
    assert kube.succeeded("patch") == [], "as the operator makes it: nothing to put back"


def test_a_policy_of_its_own_that_was_changed_before_the_workers_exist_is_put_back_first():
    kube = _api({**_policy(UID), "spec": {"podSelector": {}, "ingress": [{}]}})
    assert _reconcile(kube) is None
    assert _created(kube) == ["PersistentVolumeClaim", "TFJob"]
    policy = kube.stored("NetworkPolicy", "mnist-cnn")
    assert policy is not None and policy["spec"] == build_network_policy(run_of())["spec"]


@pytest.mark.parametrize(("owner", "reason", "retried"), [(None, "NameConflict", False),
                                                          ("an-earlier-uid", "WaitingForCleanup", True)])
def test_a_policy_not_its_own_creates_no_workers(owner: str | None, reason: str, retried: bool):
    kube = _api(_policy(owner))
    delay = _reconcile(kube)
    assert _created(kube) == []
    assert status_writes(kube)[-1]["reason"] == reason and (delay is not None) == retried


def test_a_policy_gone_between_the_conflict_and_the_read_is_made_on_the_next_look():
    kube = _api()
    kube.fail("create", AlreadyExists(409, "AlreadyExists", "networkpolicies already exists"),
              when=lambda args: args["manifest"]["kind"] == "NetworkPolicy")  # fmt: skip
    assert _reconcile(kube) is None
    assert _created(kube) == ["NetworkPolicy", "PersistentVolumeClaim", "TFJob"]


def test_a_policy_that_keeps_changing_is_retried_and_nothing_is_created():
    kube = _api()
    kube.fail("create", AlreadyExists(409, "AlreadyExists", "networkpolicies already exists"), times=None,
              when=lambda args: args["manifest"]["kind"] == "NetworkPolicy")  # fmt: skip
    assert _reconcile(kube) is not None
    assert _created(kube) == [] and status_writes(kube)[-1]["reason"] == "APIUnavailable"
