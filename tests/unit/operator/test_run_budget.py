"""A run's PodDisruptionBudget (spec.disruption.protect): what builders.py makes of a run, when the reconciler creates
it (before the PVC and the TFJob, after the NetworkPolicy) or stops for a budget of that name that is not the run's,
and how a finished run lets it go (minAvailable 0; reconcile/budget.py). The integration tier checks that the API
server then refuses, and later allows, an eviction of a worker (tests/integration/test_run_budget.py)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from dtr_operator.api import KIND, RUN_LABEL
from dtr_operator.builders import build_network_policy, build_pdb, build_tfjob, owned_by
from dtr_operator.kube import AlreadyExists, ApiError
from dtr_operator.labels import selects, worker_labels
from dtr_operator.reconcile import budget
from dtr_operator.reconcile.decide import budget_taken
from dtr_operator.runtime.kept import slim
from dtr_operator.spec import parse_run

from support.fake_kube import FakeKube
from support.reconciler import TFJOB, reconciler, status_writes
from support.runs import make_run
from support.tfjobs import T0, cond, disrupted, pod, tfjob

UID = "u-1"  # support.reconciler.TFJOB's owner
PROTECT = {"workers": 3, "disruption": {"protect": True}}


def run_of(spec: dict[str, Any] | None = None, name: str = "mnist-cnn", uid: str = UID):
    return parse_run(make_run(PROTECT if spec is None else spec, name=name, uid=uid))


# ---- the budget (pure) ---------------------------------------------------------------------------------------


def test_a_run_that_does_not_protect_its_workers_has_no_budget():
    assert run_of({"workers": 3}).disruption.protect is False
    assert build_pdb(run_of({"workers": 3})) is None
    assert build_pdb(run_of({"workers": 3, "disruption": {"protect": False}})) is None


def test_the_budget_keeps_every_worker_so_no_eviction_passes_while_all_train():
    pdb = build_pdb(run_of())
    assert pdb is not None
    assert (pdb["apiVersion"], pdb["kind"]) == ("policy/v1", "PodDisruptionBudget")
    assert pdb["metadata"]["name"] == "mnist-cnn" and pdb["metadata"]["namespace"] == "ml"
    assert pdb["metadata"]["labels"][RUN_LABEL] == "mnist-cnn"
    # An integer minAvailable: the disruption controller counts the pods; maxUnavailable would need a scale
    # subresource the TFJob does not have.
    assert pdb["spec"]["minAvailable"] == 3 and "maxUnavailable" not in pdb["spec"]


def test_the_budget_selects_each_worker_as_the_training_operator_labels_it_and_no_other_pod():
    run = run_of({**PROTECT, "podLabels": {"team": "a"}})
    selector = build_pdb(run)["spec"]["selector"]  # type: ignore[index]
    assert all(selects(selector, worker_labels("mnist-cnn", "mnist-cnn", {"team": "a"}, i)) for i in range(3))
    # Not another run's workers, nor a pod that only carries the run's own label (dtr data put's, say).
    assert not selects(selector, worker_labels("other", "other", {}, 0))
    assert not selects(selector, {RUN_LABEL: "mnist-cnn"})
    # The labels the training-operator adds, not the template's (those a run's author writes).
    template = build_tfjob(run)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    assert not selects(selector, template)


def test_the_budget_is_owned_by_the_run_as_the_tfjob_is():
    run = run_of()
    pdb = owned_by(build_pdb(run), run)  # type: ignore[arg-type]
    assert pdb["metadata"]["ownerReferences"] == owned_by(build_tfjob(run), run)["metadata"]["ownerReferences"]
    assert pdb["metadata"]["ownerReferences"][0]["controller"] is True


def _pdb(owner_uid: str | None, owner_name: str = "mnist-cnn", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    refs = [{"kind": "DistTrainingRun", "name": owner_name, "uid": owner_uid, "controller": True}] if owner_uid else []
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "mnist-cnn", "namespace": "ml", "ownerReferences": refs},
            "spec": spec or {"minAvailable": 3, "selector": {}}}  # fmt: skip


def test_a_taken_budget_name_stops_the_run_unless_the_budget_is_its_own():
    run = run_of()
    assert budget_taken(run, _pdb(UID)) is None
    earlier = budget_taken(run, _pdb("an-earlier-uid"))
    assert earlier is not None and earlier.state.reason == "WaitingForCleanup" and earlier.retry
    stranger = budget_taken(run, _pdb(None))
    assert stranger is not None and stranger.state.reason == "NameConflict" and not stranger.retry
    assert stranger.state.message.startswith("a PodDisruptionBudget named mnist-cnn already exists and does not "
                                             "belong to this run")  # fmt: skip


# ---- made with the run's children -----------------------------------------------------------------------------


def _api(spec: dict[str, Any] | None = None, existing: dict[str, Any] | None = None) -> FakeKube:
    kube = FakeKube()
    kube.put(make_run(spec or PROTECT, uid=UID, generation=1, resourceVersion="1"))
    if existing is not None:
        kube.put(existing)
    return kube


def _reconcile(kube: FakeKube, spec: dict[str, Any] | None = None) -> float | None:
    rec, _ = reconciler(kube)
    return rec.reconcile_run(make_run(spec or PROTECT, uid=UID, generation=1, resourceVersion="1"))


def _created(kube: FakeKube) -> list[str]:
    return [args["manifest"]["kind"] for args in kube.succeeded("create")]


def test_a_protected_run_gets_its_budget_before_its_volume_and_its_workers():
    kube = _api()
    assert _reconcile(kube) is None
    assert _created(kube) == ["NetworkPolicy", "PodDisruptionBudget", "PersistentVolumeClaim", "TFJob"]
    made = kube.stored("PodDisruptionBudget", "mnist-cnn")
    assert made is not None and made["metadata"]["ownerReferences"][0]["uid"] == UID
    assert made["spec"] == build_pdb(run_of())["spec"]  # type: ignore[index]


def test_a_run_that_does_not_protect_makes_no_budget():
    kube = _api({"workers": 2})
    assert _reconcile(kube, {"workers": 2}) is None
    assert _created(kube) == ["NetworkPolicy", "PersistentVolumeClaim", "TFJob"]


def test_a_budget_of_its_own_left_by_an_earlier_attempt_is_kept():
    run = run_of()
    kube = _api(existing=owned_by(build_pdb(run), run))  # type: ignore[arg-type]
    assert _reconcile(kube) is None
    assert _created(kube) == ["NetworkPolicy", "PersistentVolumeClaim", "TFJob"]


@pytest.mark.parametrize(("owner", "reason", "retried"), [(None, "NameConflict", False),
                                                          ("an-earlier-uid", "WaitingForCleanup", True)])
def test_a_budget_not_its_own_creates_no_workers(owner: str | None, reason: str, retried: bool):
    kube = _api(existing=_pdb(owner))
    delay = _reconcile(kube)
    assert _created(kube) == ["NetworkPolicy"]
    assert status_writes(kube)[-1]["reason"] == reason and (delay is not None) == retried
    left = kube.stored("PodDisruptionBudget", "mnist-cnn")
    assert left is not None and left["spec"] == _pdb(owner)["spec"], "left untouched"
    assert left["metadata"]["ownerReferences"] == _pdb(owner)["metadata"]["ownerReferences"]


def test_a_budget_that_keeps_vanishing_is_retried_and_no_worker_is_made():
    kube = _api()
    kube.fail("create", AlreadyExists(409, "AlreadyExists", "poddisruptionbudgets already exists"), times=None,
              when=lambda args: args["manifest"]["kind"] == "PodDisruptionBudget")  # fmt: skip
    assert _reconcile(kube) is not None
    assert "TFJob" not in _created(kube) and status_writes(kube)[-1]["reason"] == "APIUnavailable"


def test_a_budget_the_api_refuses_leaves_the_run_waiting_without_workers():
    kube = _api()
    kube.fail("create", ApiError(403, "Forbidden", "poddisruptionbudgets is forbidden"), times=None,
              when=lambda args: args["manifest"]["kind"] == "PodDisruptionBudget")  # fmt: skip
    assert _reconcile(kube) is not None
    last = status_writes(kube)[-1]
    assert "TFJob" not in _created(kube) and last["reason"] == "APIUnavailable"
    assert "poddisruptionbudgets is forbidden" in last["message"]


# ---- let go once the run has finished -------------------------------------------------------------------------

SUCCEEDED = {**TFJOB, "status": {"conditions": [{"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded",
                                                  "lastTransitionTime": "2026-01-01T00:01:00Z"}]}}  # fmt: skip


def _finish(kube: FakeKube) -> None:
    """The TFJob's event that finishes the run, its owner read from the operator's slim copy of the run."""
    rec, _ = reconciler(kube)
    kept = slim(kube.get_run("ml", "mnist-cnn"))  # type: ignore[arg-type]
    rec.tfjob_event("MODIFIED", SUCCEEDED, cached_run=lambda namespace, name: kept)


def _budget_patches(kube: FakeKube) -> list[Any]:
    return [a["body"] for a in kube.succeeded("patch") if a["kind"] == "PodDisruptionBudget"]


def test_a_finished_run_lets_its_budget_allow_every_eviction():
    kube = _api()
    assert _reconcile(kube) is None
    _finish(kube)
    assert status_writes(kube)[-1]["phase"] == "Succeeded"
    left = kube.stored("PodDisruptionBudget", "mnist-cnn")
    assert left is not None and left["spec"] == {"minAvailable": 0, "selector": build_pdb(run_of())["spec"]["selector"]}
    assert left["metadata"]["ownerReferences"][0]["uid"] == UID, "still the run's: it goes with it"
    assert len(_budget_patches(kube)) == 1


def test_a_finished_run_that_did_not_protect_reads_no_budget():
    kube = _api({"workers": 2})
    assert _reconcile(kube, {"workers": 2}) is None
    calls = len(kube.calls)
    _finish(kube)
    assert status_writes(kube)[-1]["phase"] == "Succeeded"
    assert not [c for c in kube.calls[calls:] if c.args.get("kind") == "PodDisruptionBudget"]


def test_a_budget_of_the_runs_name_not_its_own_is_never_touched_when_it_finishes():
    kube = _api()
    assert _reconcile(kube) is None
    kube.delete("policy/v1", "PodDisruptionBudget", "ml", "mnist-cnn")
    kube.put(_pdb(None))  # someone else's, made meanwhile
    _finish(kube)
    assert status_writes(kube)[-1]["phase"] == "Succeeded" and _budget_patches(kube) == []
    assert kube.stored("PodDisruptionBudget", "mnist-cnn")["spec"]["minAvailable"] == 3  # type: ignore[index]


def test_a_refused_release_is_logged_and_tried_again_on_the_next_attempt(caplog: pytest.LogCaptureFixture):
    kube = _api()
    assert _reconcile(kube) is None
    kube.fail("patch", ApiError(403, "Forbidden", "cannot patch poddisruptionbudgets"))
    with caplog.at_level(logging.WARNING):
        _finish(kube)
    assert status_writes(kube)[-1]["phase"] == "Succeeded", "the status is written all the same"
    assert "PodDisruptionBudget of finished run ml/mnist-cnn not let go: " in caplog.text
    assert kube.stored("PodDisruptionBudget", "mnist-cnn")["spec"]["minAvailable"] == 3  # type: ignore[index]
    # The operator's next start: its attempt of the finished run lets go, and writes nothing else.
    rec, _ = reconciler(kube)
    assert rec.reconcile_run(kube.get_run("ml", "mnist-cnn")) is None  # type: ignore[arg-type]
    assert kube.stored("PodDisruptionBudget", "mnist-cnn")["spec"]["minAvailable"] == 0  # type: ignore[index]
    # Let go already: read, not written again.
    assert rec.reconcile_run(kube.get_run("ml", "mnist-cnn")) is None  # type: ignore[arg-type]
    assert len(_budget_patches(kube)) == 1


def test_release_writes_only_a_protected_runs_own_budget_not_let_go_yet():
    run = run_of()
    kube = FakeKube()
    assert budget.release(kube, run) is False, "none there"
    kube.put(owned_by(build_pdb(run), run))  # type: ignore[arg-type]
    assert budget.release(kube, run_of({"workers": 3})) is False, "a run that does not protect reads nothing"
    assert budget.release(kube, run) is True
    assert budget.release(kube, run) is False, "let go already"


def test_the_network_policy_is_still_made_first():
    """The budget comes after the policy, so a run refused for its policy's name makes no budget either."""
    run = run_of()
    kube = _api(existing={**build_network_policy(run), "metadata": {"name": "mnist-cnn", "namespace": "ml"}})
    _reconcile(kube)
    assert _created(kube) == [] and status_writes(kube)[-1]["reason"] == "NameConflict"


def test_a_protected_run_resumed_after_a_disruption_keeps_its_budget_until_it_ends():
    """A resume (disruption.py) makes the TFJob again: the budget made with the first one is the run's and stays,
    neither made again nor let go, for the resumed workers too."""
    run_spec = {"workers": 2, "disruption": {"protect": True}}
    run = run_of(run_spec)
    kube = FakeKube()
    body = make_run(run_spec, uid=UID, generation=1, resourceVersion="1")
    body["status"] = {"phase": "Running", "reason": "TFJobRunning", "message": "running",
                      "conditions": [{"type": t, "status": "True", "lastTransitionTime": T0}
                                     for t in ("Created", "Running")]}  # fmt: skip
    kube.put(body)
    failed_job = tfjob([cond("Created"), cond("Failed", message="1 Worker replica(s) failed.")], active=1, failed=1)
    kube.put({**TFJOB, "status": failed_job["status"]}, "TFJob")
    for worker in (pod(0, 138, "dtr_trainer[worker-0]: error: lost a peer"),
                   disrupted(1, "EvictionByEvictionAPI", "drained", node="dtr-n2", running=True)):  # fmt: skip
        kube.put(worker, "Pod")
    kube.put(owned_by(build_pdb(run), run))  # type: ignore[arg-type]
    rec, _ = reconciler(kube)
    failed = kube.stored("TFJob", "mnist-cnn")
    rec.tfjob_event("MODIFIED", failed)
    rec.tfjob_event("DELETED", failed)  # the fake deletes at once
    again = kube.stored("TFJob", "mnist-cnn")
    assert again is not None and again["metadata"]["uid"] != failed["metadata"]["uid"]  # type: ignore[index]
    assert kube.stored(KIND, "mnist-cnn")["status"]["phase"] == "Pending"  # type: ignore[index]
    asked = [c for c in kube.calls if c.method == "create" and c.args["manifest"]["kind"] == "PodDisruptionBudget"]
    assert [type(c.error) for c in asked] == [AlreadyExists], "made again with the TFJob: the run's own was there"
    assert _budget_patches(kube) == []
    assert kube.stored("PodDisruptionBudget", "mnist-cnn")["spec"]["minAvailable"] == 2  # type: ignore[index]
