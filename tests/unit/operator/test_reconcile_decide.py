"""reconcile.decide: every branch of "what to do about the run's children", no API (milliseconds).

The integration tier proves the same decisions against a real API server (observe and act).
"""

from __future__ import annotations

from typing import Any

import pytest
from dtr_operator.api import KUEUE_QUEUE_LABEL, SUSPENDED_BY, SUSPENDED_BY_ANNOTATION
from dtr_operator.builders import build_tfjob
from dtr_operator.policy import Refusal
from dtr_operator.reasons import FAILED
from dtr_operator.reconcile import decide as decisions
from dtr_operator.reconcile.decide import UNREAD, Create, Observed, Record, Sync, decide
from dtr_operator.runtime import trackers
from dtr_operator.spec import parse_run
from dtr_operator.status.compute import tfjob_status
from dtr_operator.status.state import State

from support.runs import make_run

OWN = parse_run(make_run({"workers": 2}, uid="u-1", generation=1))
CLAIMED = parse_run(make_run({"storage": {"claimName": "shared"}}, uid="u-1", generation=1))
CREATED = {"conditions": [{"type": "Created", "status": "True"}]}


def obj(*, owner_uid: str | None = None, owner_name: str = "mnist-cnn", labels: dict[str, str] | None = None,
        deleting: bool = False) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"name": "x", "namespace": "ml", "labels": labels or {}}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun",
                                    "name": owner_name, "uid": owner_uid, "controller": True}]  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def reason(action: decisions.Action) -> tuple[str, bool]:
    assert isinstance(action, Record), action
    return action.state.reason, action.retry


def test_a_new_run_creates_its_pvc_then_its_tfjob():
    assert decide(OWN, {}, Observed(None)) == Create(pvc=True)


def test_a_run_with_a_claim_creates_only_the_tfjob_once_the_claim_exists():
    assert decide(CLAIMED, {}, Observed(None, obj())) == Create(pvc=False)


@pytest.mark.parametrize("pvc", [None, UNREAD])
def test_a_missing_claim_is_waited_for(pvc: Any):
    assert reason(decide(CLAIMED, {}, Observed(None, pvc))) == ("WaitingForPVC", True)


def test_our_tfjob_is_mirrored():
    tfjob = obj(owner_uid="u-1")
    assert decide(OWN, CREATED, Observed(tfjob)) == Sync(tfjob)


def test_our_tfjob_gone_after_we_created_it_fails_the_run():
    assert reason(decide(OWN, CREATED, Observed(None))) == ("TFJobDeleted", False)


def test_a_foreign_tfjob_with_the_name_is_a_conflict():
    foreign = Observed(obj(owner_uid="someone-else", owner_name="other"))
    assert reason(decide(OWN, {}, foreign)) == ("NameConflict", False)
    assert reason(decide(OWN, {}, Observed(obj()))) == ("NameConflict", False)


@pytest.mark.parametrize("tfjob", [obj(owner_uid="u-0"), obj(deleting=True)])
def test_a_tfjob_left_by_an_earlier_run_or_being_deleted_is_waited_for(tfjob: dict[str, Any]):
    assert reason(decide(OWN, {}, Observed(tfjob))) == ("WaitingForCleanup", True)


def test_our_pvc_found_after_a_clash_is_used():
    assert decide(OWN, {}, Observed(None, obj(owner_uid="u-1"))) == Create(pvc=False)


def test_a_pvc_retained_by_an_earlier_run_of_the_name_is_mounted_again():
    retained = obj(labels={"distml.dev/run": "mnist-cnn"})
    assert decide(OWN, {}, Observed(None, retained)) == Create(pvc=False)


def test_a_retained_pvc_being_deleted_is_waited_for_not_mounted():
    going = obj(labels={"distml.dev/run": "mnist-cnn"}, deleting=True)
    assert reason(decide(OWN, {}, Observed(None, going))) == ("WaitingForCleanup", True)


def test_a_pvc_owned_by_an_earlier_run_is_waited_for():
    assert reason(decide(OWN, {}, Observed(None, obj(owner_uid="u-0")))) == ("WaitingForCleanup", True)


def test_a_foreign_pvc_with_the_name_is_a_conflict():
    assert reason(decide(OWN, {}, Observed(None, obj()))) == ("NameConflict", False)
    other_run = obj(labels={"distml.dev/run": "someone"})
    assert reason(decide(OWN, {}, Observed(None, other_run))) == ("NameConflict", False)


def test_a_claim_being_deleted_is_waited_for():
    assert reason(decide(CLAIMED, {}, Observed(None, obj(deleting=True)))) == ("WaitingForCleanup", True)


def test_a_pvc_that_vanished_after_a_clash_is_created_again():
    assert decide(OWN, {}, Observed(None, None)) == Create(pvc=True)


# ---- which waiting runs have their pods looked at (WaitingRuns) ----------------------------------

WAITING = {"phase": "Pending", "reason": "TFJobCreated"}
REF = ("ml", "mnist-cnn", "u-1")


def test_a_run_waiting_for_its_pods_is_due_after_the_delay_and_until_it_stops_waiting():
    runs = trackers.WaitingRuns(after=20)
    runs.seen(REF, WAITING, at=100)
    assert runs.due(119) == []
    assert runs.due(120) == [REF]
    runs.seen(REF, {"phase": "Pending", "reason": "WorkerPodsNotStarting"}, at=125)
    assert runs.due(126) == [REF], "still waiting: the clock keeps the first sighting"
    runs.seen(REF, {"phase": "Running", "reason": "TFJobRunning"}, at=130)
    assert runs.due(500) == []


def test_a_running_run_short_of_workers_is_due_until_every_worker_runs():
    runs = trackers.WaitingRuns(after=20)
    runs.seen(REF, {"phase": "Running", "reason": "TFJobRunning", "workersReady": "1/2"}, at=100)
    assert runs.due(119) == [] and runs.due(120) == [REF]
    runs.seen(REF, {"phase": "Running", "reason": "WorkersNotAllRunning", "workersReady": "1/2"}, at=125)
    assert runs.due(126) == [REF]
    runs.seen(REF, {"phase": "Running", "reason": "TFJobRunning", "workersReady": "2/2"}, at=130)
    assert runs.due(500) == []


def test_runs_waiting_for_something_else_or_gone_are_never_due():
    runs = trackers.WaitingRuns(after=20)
    runs.seen(REF, {"phase": "Pending", "reason": "WaitingForPVC"}, at=0)
    runs.seen(("ml", "other", "u-2"), WAITING, at=0)
    runs.gone(("ml", "other", "u-2"))
    assert runs.due(1000) == []


# ---- which runs are retried when (RetryingRuns) -------------------------------------------------------


def test_a_waiting_run_is_due_when_its_delay_is_over_and_taken_once_with_its_next_retry_count():
    runs = trackers.RetryingRuns()
    runs.later(REF, 0, at=100, delay=5)
    assert runs.next_due() == 105 and runs.take_due(104.9) == []
    assert runs.take_due(105) == [(REF, 1)]
    assert runs.take_due(200) == [] and len(runs) == 0, "taken: kept again only when it waits again"


def test_the_longest_due_run_is_retried_first_and_a_run_gone_never():
    runs = trackers.RetryingRuns()
    other, gone = ("ml", "other", "u-2"), ("ml", "gone", "u-3")
    runs.later(REF, 3, at=100, delay=40)
    runs.later(other, 0, at=120, delay=5)
    runs.later(gone, 0, at=100, delay=5)
    runs.gone(gone)
    assert runs.take_due(200) == [(other, 1), (REF, 4)]


# ---- spec.suspend: the TFJob's runPolicy.suspend follows it ---------------------------------------

SUSPENDED_RUN = parse_run(make_run({"workers": 2, "suspend": True}, uid="u-1", generation=2))
QUEUED_RUN = parse_run(make_run({"workers": 2, "queueName": "team-a"}, uid="u-1", generation=1))


def ours(suspend: bool | None = None, conditions: tuple[str, ...] = ("Created", "Running"),
         by: str | None = "operator") -> dict[str, Any]:  # fmt: skip
    """Our TFJob; a suspended one as suspended `by` the operator (its annotation), someone else, or Kueue."""
    tfjob = obj(owner_uid="u-1")
    tfjob["spec"] = {"runPolicy": {} if suspend is None else {"suspend": suspend}}
    if suspend and by == "operator":
        tfjob["metadata"]["annotations"] = {SUSPENDED_BY_ANNOTATION: SUSPENDED_BY}
    if by == "kueue":
        tfjob["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: "default"}
    tfjob["status"] = {"conditions": [{"type": t, "status": "True"} for t in conditions]}
    return tfjob


def test_suspending_a_running_run_suspends_its_tfjob():
    tfjob = ours(suspend=False)
    assert decide(SUSPENDED_RUN, CREATED, Observed(tfjob)) == decisions.Suspend(tfjob, True)


def test_resuming_unsuspends_the_tfjob():
    tfjob = ours(suspend=True, conditions=("Created", "Suspended"))
    assert decide(OWN, CREATED, Observed(tfjob)) == decisions.Suspend(tfjob, False)


@pytest.mark.parametrize(("run", "suspend"), [(SUSPENDED_RUN, True), (OWN, False), (OWN, None)])
def test_a_tfjob_that_already_agrees_is_mirrored(run, suspend):
    tfjob = ours(suspend=suspend)
    assert decide(run, CREATED, Observed(tfjob)) == Sync(tfjob)


def test_a_queued_runs_tfjob_is_kueues_to_suspend():
    tfjob = ours(suspend=True, conditions=("Created", "Suspended"))
    assert decide(QUEUED_RUN, CREATED, Observed(tfjob)) == Sync(tfjob)


@pytest.mark.parametrize("by", [None, "kueue"])
def test_a_suspension_the_operator_did_not_make_is_never_undone(by):
    """Security review M5: an admin's or a queue manager's suspension stays, whatever spec.suspend did meanwhile
    (a toggle, or the resume handler after an operator restart, both end in this decision)."""
    tfjob = ours(suspend=True, conditions=("Created", "Suspended"), by=by)
    assert decide(OWN, CREATED, Observed(tfjob)) == Sync(tfjob)
    assert decide(SUSPENDED_RUN, CREATED, Observed(tfjob)) == Sync(tfjob)


def test_a_tfjob_kueue_labelled_is_kueues_even_without_queue_name():
    running = ours(suspend=False, by="kueue")
    assert decide(SUSPENDED_RUN, CREATED, Observed(running)) == Sync(running)


def test_the_operators_own_suspension_is_recorded_on_the_tfjob_it_creates():
    assert build_tfjob(SUSPENDED_RUN)["metadata"]["annotations"] == {SUSPENDED_BY_ANNOTATION: SUSPENDED_BY}
    assert "annotations" not in build_tfjob(OWN)["metadata"]


def test_a_tfjob_suspended_by_someone_else_says_so_in_the_runs_status():
    tfjob = ours(suspend=True, conditions=("Created", "Suspended"), by=None)
    status = tfjob_status(OWN, tfjob, [], {"phase": "Suspended", "reason": "RunSuspended"}, "2026-11-30T18:00:00Z")
    assert (status["phase"], status["reason"]) == ("Pending", "TFJobSuspended")
    assert "not by this operator" in status["message"] and SUSPENDED_BY_ANNOTATION in status["message"]
    queued = tfjob_status(OWN, ours(suspend=True, conditions=("Created", "Suspended"), by="kueue"), [], {}, "t")
    assert (queued["reason"], "LocalQueue default" in queued["message"]) == ("Queued", True)


def test_a_finished_run_or_tfjob_is_never_suspended():
    done = ours(suspend=False, conditions=("Created", "Succeeded"))
    assert decide(SUSPENDED_RUN, CREATED, Observed(done)) == Sync(done)
    running = ours(suspend=False)
    assert decide(SUSPENDED_RUN, {"phase": "Failed"}, Observed(running)) == Sync(running)


def test_an_image_the_operator_does_not_allow_fails_the_run_before_anything_is_created():
    action = decide(OWN, {}, Observed(None), image_refusal="spec.image x is not allowed by --allowed-images")
    assert reason(action) == ("ImageNotAllowed", False)
    assert "--allowed-images" in action.state.message


def test_a_run_already_running_is_not_stopped_by_a_later_allow_list():
    tfjob = ours(suspend=False)
    assert decide(OWN, CREATED, Observed(tfjob), image_refusal="not allowed") == Sync(tfjob)


REFUSED = Refusal("PodAnnotationNotAllowed", "spec.podAnnotations key x is not allowed by --allowed-pod-annotations")


def test_a_request_the_policy_refuses_fails_the_run_before_anything_is_created():
    assert decide(OWN, {}, Observed(None), policy_refusal=REFUSED) == Record(
        State(FAILED, REFUSED.reason, REFUSED.message), retry=False)
    assert reason(decide(CLAIMED, {}, Observed(None, None), policy_refusal=REFUSED)) == (REFUSED.reason, False)


def test_a_claim_the_policy_refuses_fails_the_run_once_the_claim_is_seen():
    claim = Refusal("ClaimNotAllowed", "spec.storage.claimName shared: not labelled")
    assert reason(decide(CLAIMED, {}, Observed(None, None), claim_refusal=claim)) == ("WaitingForPVC", True)
    assert decide(CLAIMED, {}, Observed(None, obj()), claim_refusal=claim) == Record(
        State(FAILED, "ClaimNotAllowed", claim.message), retry=False)
    assert decide(CLAIMED, {}, Observed(None, obj())) == Create(pvc=False)


@pytest.mark.parametrize("refusals", [{"image_refusal": "spec.image x is not allowed"}, {"policy_refusal": REFUSED}])
def test_a_suspended_run_refused_since_it_started_is_not_resumed(refusals):
    tfjob = ours(suspend=True)
    action = decide(OWN, CREATED, Observed(tfjob), **refusals)
    assert isinstance(action, Record) and action.state.phase == FAILED and not action.retry
    assert action.state.message.endswith("(checked again on resume: the run stays suspended)")
    assert decide(SUSPENDED_RUN, CREATED, Observed(tfjob), **refusals) == Sync(tfjob)  # still suspended: no news
    running = ours(suspend=False)
    assert decide(OWN, CREATED, Observed(running), **refusals) == Sync(running)  # never stopped mid-training


# ---- a failed run's pods that still run ---------------------------------------------------------


def _job(condition: str, policy: str | None = "None") -> dict[str, Any]:
    run_policy = {} if policy is None else {"cleanPodPolicy": policy}
    return {"spec": {"runPolicy": run_policy},
            "status": {"conditions": [{"type": "Created", "status": "True"},
                                      {"type": condition, "status": "True"}]}}  # fmt: skip


def _pod(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


def test_a_failed_runs_pods_that_still_run_or_wait_are_released():
    pods = [_pod("r-worker-1", "Running"), _pod("r-worker-0", "Pending"), _pod("r-worker-2", "Failed")]
    assert decisions.pods_to_release(_job("Failed"), pods) == ["r-worker-0", "r-worker-1"]


def test_nothing_is_released_after_success_when_nothing_runs_or_when_the_policy_already_cleans():
    running = [_pod("r-worker-0", "Running")]
    assert decisions.pods_to_release(_job("Succeeded"), running) == []
    assert decisions.pods_to_release(_job("Running"), running) == []
    assert decisions.pods_to_release(_job("Failed"), [_pod("r-worker-0", "Failed")]) == []
    assert decisions.pods_to_release(_job("Failed", "Running"), running) == []
    assert decisions.pods_to_release(_job("Failed", "All"), running) == []
