"""The run's NetworkPolicy held, not just created (security review R3): the pure decision (netpolicy.step, what the
run does when the policy cannot be held, what other policies admit) and the shell that carries it out
(reconcile/guard.py through the Reconciler) against the fake API (milliseconds). On a real API server:
tests/integration/test_held_network_policy.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from dtr_contract.container import PORT
from dtr_operator import netpolicy
from dtr_operator.api import RUN_LABEL, SUSPENDED_BY, SUSPENDED_BY_ANNOTATION
from dtr_operator.builders import build_network_policy, owned_by
from dtr_operator.kube import ApiError
from dtr_operator.reconcile.decide import FailClosed, policy_not_held
from dtr_operator.spec import parse_run
from dtr_operator.status.compute import tfjob_status

from support.fake_kube import FakeKube
from support.reconciler import TFJOB, reconciler, run_policy_patches, status_writes
from support.runs import make_run
from support.tfjobs import T1, T2, cond, tfjob

RUN = parse_run(make_run({"workers": 2, "podLabels": {"team": "a"}}, uid="u-1", generation=1))
OWN = owned_by(build_network_policy(RUN), RUN)


def policy(name: str = "other", spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": "ml", **meta}, "spec": spec or {}}  # fmt: skip


def stored(own: dict[str, Any] = OWN, **changes: Any) -> dict[str, Any]:
    """The run's policy as the API server has it (a resourceVersion), with `changes` to its spec."""
    found = copy.deepcopy(own)
    found["metadata"]["resourceVersion"] = "41"
    found["spec"] = {**found["spec"], **changes}
    return found


# ---- the pure decision: the run's own policy ---------------------------------------------------------------


def test_a_missing_policy_is_made_owned_by_the_run_and_one_as_made_is_left_alone():
    step = netpolicy.step(RUN, None)
    assert isinstance(step, netpolicy.Make) and step.manifest == OWN
    assert netpolicy.step(RUN, stored()) == netpolicy.Held()
    assert netpolicy.intact(stored(), RUN.name)


def test_a_widened_policy_is_put_back_with_a_precondition_on_what_was_seen():
    step = netpolicy.step(RUN, stored(ingress=[{}]))
    assert isinstance(step, netpolicy.Restore) and step.changed == "its spec"
    assert step.patch[0] == {"op": "replace", "path": "/metadata/resourceVersion", "value": "41"}
    assert step.patch[1] == {"op": "replace", "path": "/spec", "value": OWN["spec"]}
    assert not netpolicy.intact(stored(ingress=[{}]), RUN.name)


def test_a_policy_whose_labels_were_taken_off_gets_them_back_and_keeps_its_others():
    found = stored()
    found["metadata"]["labels"] = {"extra": "kept"}  # without the run label the operator's watch no longer sees it
    step = netpolicy.step(RUN, found)
    assert isinstance(step, netpolicy.Restore) and step.changed == "its labels"
    assert step.patch[2]["value"] == {"extra": "kept", RUN_LABEL: "mnist-cnn",
                                      "app.kubernetes.io/managed-by": "dtr-operator"}  # fmt: skip


@pytest.mark.parametrize("owners", [[], [{"kind": "DistTrainingRun", "name": "mnist-cnn", "uid": "an-earlier-uid",
                                          "controller": True}]])  # fmt: skip
def test_a_policy_of_the_runs_name_not_its_own_is_taken_and_never_adopted(owners: list[dict[str, Any]]):
    found = stored()
    found["metadata"]["ownerReferences"] = owners
    assert netpolicy.step(RUN, found) == netpolicy.Taken(found)
    assert "is not this run's" in netpolicy.not_held_why(RUN, found)


# ---- the pure decision: what the run does when its policy cannot be held ---------------------------------------


def running_tfjob(suspend: bool = False, *conds: dict[str, Any]) -> dict[str, Any]:
    return {**tfjob([cond("Created"), *conds]), "spec": {"runPolicy": {"suspend": suspend}}}


def test_a_run_that_trains_without_its_policy_is_suspended_and_says_why():
    closed = policy_not_held(RUN, {"phase": "Running"}, running_tfjob(False, cond("Running")), "the API refused it")
    assert isinstance(closed, FailClosed) and closed.suspend
    assert (closed.state.phase, closed.state.reason) == ("Suspended", "NetworkPolicyNotHeld")
    assert closed.state.message.startswith("the API refused it; TFJob mnist-cnn is suspended")
    again = policy_not_held(RUN, {"phase": "Suspended"}, running_tfjob(True, cond("Suspended")), "why")
    assert again is not None and not again.suspend, "suspended already: said again, not patched again"


def test_a_finished_run_or_one_suspended_by_its_spec_has_nothing_to_stop():
    assert policy_not_held(RUN, {"phase": "Succeeded"}, running_tfjob(), "why") is None
    assert policy_not_held(RUN, {}, running_tfjob(False, cond("Failed")), "why") is None
    suspended = parse_run(make_run({"workers": 2, "suspend": True}, uid="u-1", generation=2))
    assert policy_not_held(suspended, {"phase": "Suspended"}, running_tfjob(True), "why") is None


def test_the_reason_stays_while_the_operator_holds_the_tfjob_and_goes_once_it_resumes():
    previous = {"phase": "Suspended", "reason": "NetworkPolicyNotHeld", "message": "the API refused it; ..."}
    held = tfjob_status(RUN, running_tfjob(True, cond("Suspended")), [], previous, T1)
    assert (held["phase"], held["reason"], held["message"]) == ("Suspended", "NetworkPolicyNotHeld",
                                                                 previous["message"])  # fmt: skip
    resumed = tfjob_status(RUN, running_tfjob(False, cond("Suspended")), [], held, T2)
    assert (resumed["phase"], resumed["reason"]) == ("Pending", "Resuming")


# ---- the pure decision: other policies of the namespace ----------------------------------------------------

ALL = {"podSelector": {}}
TO_PORT = [{"protocol": "TCP", "port": PORT}]


@pytest.mark.parametrize(("spec", "where"), [
    ({**ALL, "ingress": [{}]}, "anywhere"),  # the widest: everything from everywhere
    ({**ALL, "policyTypes": ["Ingress"], "ingress": [{"from": [{"namespaceSelector": {}}]}]},
     "pods of the namespaces its namespaceSelector picks"),
    ({**ALL, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": TO_PORT}]}, "addresses 10.0.0.0/8"),
    ({**ALL, "ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": "tfjob-port"}]}]},
     "other pods of the namespace"),
    ({"podSelector": {"matchLabels": {"team": "a"}}, "ingress": [{"ports": [{"port": 2000, "endPort": 3000}]}]},
     "anywhere"),  # the run's own pod label, a range over the port
    ({"podSelector": {"matchExpressions": [{"key": RUN_LABEL, "operator": "Exists"}]}, "ingress": [{}]}, "anywhere"),
    ({**ALL, "policyTypes": ["Ingress", "Egress"], "ingress": [{"from": [{"podSelector": {}}]}]},
     "other pods of the namespace"),
])  # fmt: skip
def test_a_policy_that_selects_the_workers_and_admits_their_port_from_elsewhere_is_named(spec, where):
    assert netpolicy.admits_elsewhere(RUN, policy(spec=spec)) == where
    assert netpolicy.exposure(RUN, [policy(spec=spec)]) == [f"NetworkPolicy other admits TCP {PORT} from {where}"]


@pytest.mark.parametrize("spec", [
    {**ALL, "policyTypes": ["Egress"], "egress": [{}]},  # no Ingress
    {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{}]},  # not the workers
    {"podSelector": {"matchLabels": {RUN_LABEL: "another-run"}}, "ingress": [{}]},
    {**ALL, "ingress": [{"ports": [{"port": 8080}]}]},  # another port
    {**ALL, "ingress": [{"ports": [{"protocol": "UDP", "port": PORT}]}]},
    {**ALL, "ingress": [{"from": [{"podSelector": {"matchLabels": {RUN_LABEL: "mnist-cnn"}}}]}]},  # the run's pods
    {**ALL, "policyTypes": ["Ingress"]},  # deny all
])  # fmt: skip
def test_a_policy_that_admits_nothing_more_to_the_workers_port_is_not_named(spec):
    assert netpolicy.admits_elsewhere(RUN, policy(spec=spec)) is None


def test_the_runs_own_policy_and_every_runs_own_as_made_are_not_others():
    widened = stored(ingress=[{}])
    assert netpolicy.exposure(RUN, [widened]) == [], "the run's own is held (step), not reported"
    other_run = parse_run(make_run({"workers": 1}, name="b", uid="u-2"))
    assert netpolicy.is_a_runs_own(owned_by(build_network_policy(other_run), other_run))
    assert not netpolicy.is_a_runs_own(policy("b", {**ALL, "ingress": [{}]}, ownerReferences=OWN["metadata"][
        "ownerReferences"]))  # fmt: skip


def test_the_condition_is_written_once_found_cleared_once_gone_and_absent_before():
    status = {"phase": "Running", "conditions": []}
    assert netpolicy.exposed_status(status, [], T1, 1) == status, "never found: no condition, no write"
    lines = [f"NetworkPolicy open admits TCP {PORT} from anywhere"]
    found = netpolicy.exposed_status(status, lines, T1, 1)
    [weak] = [c for c in found["conditions"] if c["type"] == "IsolationWeakened"]
    assert (weak["status"], weak["reason"], weak["lastTransitionTime"]) == ("True", "OtherPolicyAdmits", T1)
    assert weak["message"].startswith(lines[0] + ": NetworkPolicies add up")
    assert netpolicy.exposed_status(found, lines, T2, 1) == found, "the same: no write"
    gone = netpolicy.exposed_status(found, [], T2, 1)
    [clear] = [c for c in gone["conditions"] if c["type"] == "IsolationWeakened"]
    assert (clear["status"], clear["reason"], clear["lastTransitionTime"]) == ("False", "NoOtherPolicyAdmits", T2)


# ---- the shell: the Reconciler against the fake API -----------------------------------------------------------


class Clock:
    at = 100.0

    def __call__(self) -> float:
        return self.at


def world(status: dict[str, Any] | None = None, spec: dict[str, Any] | None = None,
          tfjob_suspended: bool = False) -> FakeKube:  # fmt: skip
    """A Running run, its TFJob (owned by it), and its policy as the operator made it."""
    kube = FakeKube()
    body = make_run(spec or {"workers": 2, "podLabels": {"team": "a"}}, uid="u-1", generation=1)
    body["status"] = status if status is not None else {"phase": "Running", "reason": "TFJobRunning"}
    kube.put(body)
    job = copy.deepcopy(TFJOB)
    job["spec"] = {"runPolicy": {"suspend": tfjob_suspended}}
    if tfjob_suspended:  # by the operator (spec.suspend, a restart): its to undo
        job["metadata"]["annotations"] = {SUSPENDED_BY_ANNOTATION: SUSPENDED_BY}
    job["status"] = {"conditions": [cond("Created"), cond("Suspended" if tfjob_suspended else "Running")]}
    kube.put(job)
    kube.put(copy.deepcopy(OWN))
    return kube


def own_policy(kube: FakeKube) -> dict[str, Any] | None:
    return kube.stored("NetworkPolicy", "mnist-cnn")


def test_a_policy_as_the_operator_made_it_costs_no_call():
    kube = world()
    rec, _ = reconciler(kube)
    rec.policy_event("MODIFIED", own_policy(kube) or {}, Clock())
    rec.policy_event(None, policy("foreign", {**ALL, "ingress": [{}]}, labels={RUN_LABEL: "x"}), Clock())
    assert kube.calls == []


def test_a_deleted_policy_is_made_again_at_its_event_and_said_in_a_warning():
    kube = world()
    rec, events = reconciler(kube)
    gone = own_policy(kube) or {}
    kube.delete("networking.k8s.io/v1", "NetworkPolicy", "ml", "mnist-cnn")
    rec.policy_event("DELETED", gone, Clock())
    again = own_policy(kube)
    assert again is not None and again["spec"] == OWN["spec"] and again["metadata"]["ownerReferences"] == \
        OWN["metadata"]["ownerReferences"]  # fmt: skip
    assert [e[1:3] for e in events] == [("Warning", "NetworkPolicyRestored")]
    assert "was deleted: made again" in events[0][3]
    assert run_policy_patches(kube) == [], "the workers go on"
    assert not [w for w in status_writes(kube) if "reason" in w], "the run's state is unchanged"


def test_a_widened_policy_is_put_back_at_its_event():
    kube = world()
    rec, events = reconciler(kube)
    widened = own_policy(kube) or {}
    widened["spec"]["ingress"] = [{}]
    kube.put(widened)
    rec.policy_event("MODIFIED", own_policy(kube) or {}, Clock())
    assert (own_policy(kube) or {})["spec"] == OWN["spec"]
    assert [e[2] for e in events] == ["NetworkPolicyRestored"] and "had its spec changed: put back" in events[0][3]


def test_a_refused_restore_suspends_the_workers_and_a_later_one_resumes_them():
    kube = world()
    rec, events = reconciler(kube)
    clock = Clock()
    gone = own_policy(kube) or {}
    kube.delete("networking.k8s.io/v1", "NetworkPolicy", "ml", "mnist-cnn")
    kube.fail("create", ApiError(403, "Forbidden", "networkpolicies is forbidden"), times=None,
              when=lambda args: args["manifest"]["kind"] == "NetworkPolicy")  # fmt: skip
    rec.policy_event("DELETED", gone, clock)
    assert run_policy_patches(kube) == [("mnist-cnn", {"annotations": {SUSPENDED_BY_ANNOTATION: SUSPENDED_BY},
                                                       "suspend": True})]  # fmt: skip
    [write] = [w for w in status_writes(kube) if "reason" in w]
    assert (write["phase"], write["reason"]) == ("Suspended", "NetworkPolicyNotHeld")
    assert write["message"].startswith("the API refused it: 403 Forbidden: networkpolicies is forbidden; TFJob")
    assert ("Warning", "NetworkPolicyNotHeld") in [e[1:3] for e in events]
    [(ref, retry)] = rec.retrying.take_due(clock.at + 5)
    assert ref == ("ml", "mnist-cnn", "u-1")
    # An admin fixes it; the retry makes the policy, then resumes the TFJob (the policy first).
    kube._faults.clear()
    rec.attempt_run(ref, retry, clock)
    assert own_policy(kube) is not None
    assert run_policy_patches(kube)[-1] == ("mnist-cnn", {"annotations": {SUSPENDED_BY_ANNOTATION: None},
                                                          "suspend": False})  # fmt: skip
    order = [c.method for c in kube.calls if c.error is None and c.method in ("create", "patch_tfjob_run_policy")]
    assert order[-2:] == ["create", "patch_tfjob_run_policy"]


def test_a_policy_of_the_runs_name_not_its_own_suspends_the_workers():
    kube = world()
    stranger = own_policy(kube) or {}
    stranger["metadata"]["ownerReferences"] = []
    kube.put(stranger)
    rec, _ = reconciler(kube)
    rec.reconcile_run(kube.stored("DistTrainingRun", "mnist-cnn") or {})
    assert run_policy_patches(kube)[0][1]["suspend"] is True
    [write] = [w for w in status_writes(kube) if "reason" in w]
    assert "NetworkPolicy mnist-cnn is not this run's" in write["message"]
    assert (own_policy(kube) or {})["metadata"]["ownerReferences"] == [], "left untouched"


def test_the_operators_start_finds_the_policy_gone_and_makes_it_again():
    kube = world()
    kube.delete("networking.k8s.io/v1", "NetworkPolicy", "ml", "mnist-cnn")
    rec, events = reconciler(kube)
    assert rec.reconcile_run(kube.stored("DistTrainingRun", "mnist-cnn") or {}) is None  # the resume handler's call
    assert own_policy(kube) is not None and run_policy_patches(kube) == []
    assert [e[2] for e in events] == ["NetworkPolicyRestored"]


def test_a_run_suspended_by_its_spec_is_not_failed_closed_and_its_policy_is_held_at_the_resume():
    kube = world({"phase": "Suspended", "reason": "RunSuspended"}, {"workers": 2, "suspend": True},
                 tfjob_suspended=True)  # fmt: skip
    kube.delete("networking.k8s.io/v1", "NetworkPolicy", "ml", "mnist-cnn")
    kube.fail("create", ApiError(403, "Forbidden", "no"), when=lambda a: a["manifest"]["kind"] == "NetworkPolicy")
    rec, _ = reconciler(kube)
    assert rec.reconcile_run(kube.stored("DistTrainingRun", "mnist-cnn") or {}) is None
    assert run_policy_patches(kube) == [] and not [w for w in status_writes(kube) if "reason" in w]
    # spec.suspend back to false: the policy first, then the TFJob.
    run = kube.stored("DistTrainingRun", "mnist-cnn") or {}
    run["spec"]["suspend"] = False
    kube.put(run)
    assert rec.reconcile_run(kube.stored("DistTrainingRun", "mnist-cnn") or {}) is None
    assert own_policy(kube) is not None and run_policy_patches(kube)[-1][1]["suspend"] is False


def test_other_policies_are_reported_on_the_run_and_listed_once_for_the_namespace():
    kube = world()
    kube.put(policy("allow-all", {**ALL, "ingress": [{}]}))
    body = kube.stored("DistTrainingRun", "mnist-cnn") or {}
    rec, _ = reconciler(kube)
    rec.poll_progress(body)  # no chief pod: no log read, but the other policies are looked at
    [write] = status_writes(kube)
    [weak] = [c for c in write["conditions"] if c["type"] == "IsolationWeakened"]
    assert weak["status"] == "True" and weak["message"].startswith(
        f"NetworkPolicy allow-all admits TCP {PORT} from anywhere")  # fmt: skip
    rec.poll_progress(kube.stored("DistTrainingRun", "mnist-cnn") or {})
    assert len(kube.succeeded("list_objects")) == 1 and len(status_writes(kube)) == 1


def test_a_refused_list_of_other_policies_is_said_once_and_changes_nothing(caplog: pytest.LogCaptureFixture):
    kube = world()
    kube.fail("list_objects", ApiError(403, "Forbidden", "cannot list networkpolicies"), times=None)
    rec, _ = reconciler(kube)
    for _ in range(2):
        rec.poll_progress(kube.stored("DistTrainingRun", "mnist-cnn") or {})
    assert status_writes(kube) == []
    assert caplog.text.count("RBAC needs list on networkpolicies") == 1


def test_a_stalled_runs_restart_waits_for_its_policy():
    kube = world({"phase": "Pending", "reason": "TFJobSuspended", "watchdog": {"restarting": True}},
                 tfjob_suspended=True)  # fmt: skip
    kube.delete("networking.k8s.io/v1", "NetworkPolicy", "ml", "mnist-cnn")
    kube.fail("create", ApiError(403, "Forbidden", "no"), times=None,
              when=lambda a: a["manifest"]["kind"] == "NetworkPolicy")  # fmt: skip
    rec, _ = reconciler(kube)
    job = kube.stored("TFJob", "mnist-cnn") or {}
    rec.stall.resume_after_stall(rec.ctx.parsed(kube.stored("DistTrainingRun", "mnist-cnn") or {}), job)
    assert run_policy_patches(kube) == [], "not resumed"
    [write] = [w for w in status_writes(kube) if "reason" in w]
    assert write["reason"] == "NetworkPolicyNotHeld"
