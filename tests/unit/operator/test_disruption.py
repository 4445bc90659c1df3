"""A run Kubernetes took workers away from starts again (disruption.py), and the reconciler carries it out over the
fake API: the failed TFJob deleted, made again once it is gone, the status saying each step (milliseconds; the
integration tier runs the same against a real API server, tests/multinode on real nodes)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from dtr_operator import disruption
from dtr_operator.api import KIND, TFJOB_API_VERSION
from dtr_operator.reconcile.context import ObservedRun
from dtr_operator.runtime.kept import slim
from dtr_operator.spec import parse_run
from dtr_operator.status.pods import assigned_worker

from support.fake_kube import FakeKube
from support.reconciler import IMAGE, TFJOB, reconciler
from support.runs import make_run
from support.tfjobs import RUN, T0, T2, cond, disrupted, pod, tfjob

DRAINED = [pod(0, 138, "dtr_trainer[worker-0]: error: lost a peer"),
           disrupted(1, "EvictionByEvictionAPI", "drained", node="dtr-n2", running=True)]  # fmt: skip
FAILED = tfjob([cond("Created"), cond("Failed", message="1 Worker replica(s) failed.")], active=1, failed=1)
RUNNING = {"phase": "Running", "reason": "TFJobRunning", "message": "running",
           "conditions": [{"type": t, "status": "True", "lastTransitionTime": T0} for t in ("Created", "Running")],
           "progress": {"epoch": 6, "epochs": 20, "epochsDone": "6/20"}}  # fmt: skip


def spec(**disruption_spec: Any):
    return parse_run(make_run({"workers": 2, "disruption": disruption_spec}, uid="u-1", generation=1))


# ---- the pure decision -------------------------------------------------------------------------------------------


def test_a_drained_worker_and_its_peer_that_lost_it_resume_from_the_next_epoch():
    plan = disruption.resume(RUN, RUNNING, FAILED, DRAINED, [], T2)
    assert plan is not None and plan.uid == "tfjob-uid-1" and plan.resumes == 1
    assert plan.state.reason == "ResumingAfterDisruption" and plan.state.phase == "Pending"
    assert plan.state.message.startswith("worker mnist-cnn-worker-1 on node dtr-n2 evicted through the Eviction API")
    assert "resuming from epoch 7 as attempt 2 (1 of 3 resumes, spec.disruption.maxResumes)" in plan.state.message
    assert plan.entry == {"attempt": 2, "at": T2, "epoch": 6, "message": plan.entry["message"], "nodes": ["dtr-n2"],
                          "tfJobUID": "tfjob-uid-1"}  # fmt: skip


@pytest.mark.parametrize("pods", [
    [pod(0, 1, "Traceback ..."), disrupted(1, "EvictionByEvictionAPI", "drained")],  # an exit of its own
    [pod(0, 8, "dtr_trainer[worker-0]: error: model.py:3: ValueError"), disrupted(1, "DeletionByTaintManager", "")],
    [pod(0, 137, "Killed"), pod(1, 138, "lost a peer")],  # nothing taken away: a kill of unknown origin
    [{**pod(0, 137, "x"), "status": {"containerStatuses": [{"name": "tensorflow", "state": {"terminated": {
        "exitCode": 137, "reason": "OOMKilled"}}}]}}, disrupted(1, "EvictionByEvictionAPI", "drained")],
])  # fmt: skip
def test_a_worker_that_failed_for_its_own_reason_fails_the_run(pods: list[dict[str, Any]]):
    assert disruption.taken_away(pods, [], RUNNING) is None
    assert disruption.resume(RUN, RUNNING, FAILED, pods, [], T2) is None


def test_a_worker_deleted_by_the_taint_manager_before_the_failure_counts_by_its_events():
    gone = {"metadata": {"name": "mnist-cnn-worker-1"}, "spec": {"nodeName": "dtr-n3"},
            "status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                       "reason": "DeletionByTaintManager"}]}}  # fmt: skip
    [line] = disruption.taken_away([pod(0, 138, "lost a peer")], [gone], RUNNING)
    assert line.startswith("worker mnist-cnn-worker-1 on node dtr-n3 deleted by the taint manager")


def test_a_readmitted_run_failed_by_a_pod_of_its_earlier_admission_resumes():
    """The Kueue race: preempted, admitted again, failed at once on a worker that lost its peer at the preemption."""
    preempted = {"phase": "Suspended", "reason": "Preempted", "progress": {"epoch": 3}}
    [line] = disruption.taken_away([pod(1, 138, "lost a peer")], [], preempted)
    assert "preempted by Kueue" in line and "mnist-cnn-worker-1 (exit code 138)" in line
    assert disruption.resume(RUN, preempted, FAILED, [], [], T2) is not None  # the old pod already gone
    assert disruption.taken_away([pod(1, 2, "ValueError")], [], preempted) is None


def test_resume_false_and_resumes_used_up_fail_saying_why():
    assert disruption.resume(spec(resume=False), RUNNING, FAILED, DRAINED, [], T2) is None
    assert disruption.not_resumed(spec(resume=False), RUNNING, DRAINED, []) == \
        "not resumed: spec.disruption.resume is false"  # fmt: skip
    used = {**RUNNING, "resumes": 2}
    assert disruption.resume(spec(maxResumes=2), used, FAILED, DRAINED, [], T2) is None
    assert disruption.not_resumed(spec(maxResumes=2), used, DRAINED, []) == \
        "not resumed: resumed 2 times already (spec.disruption.maxResumes 2)"  # fmt: skip
    assert disruption.not_resumed(RUN, RUNNING, [pod(0, 1, "x")], []) is None


def test_the_status_counts_resumes_and_keeps_the_newest_disruptions():
    previous = {**RUNNING, "resumes": 12, "disruptions": [{"attempt": n, "tfJobUID": f"u{n}"} for n in range(2, 14)]}
    plan = disruption.resume(spec(maxResumes=20), previous, FAILED, DRAINED, [], T2)
    assert plan is not None
    status = disruption.resuming_status(spec(maxResumes=20), plan, previous, T2)
    assert status["resumes"] == 13 and len(status["disruptions"]) == disruption.KEPT_DISRUPTIONS
    assert status["disruptions"][-1]["attempt"] == 14 and disruption.resuming_from(status) == "tfjob-uid-1"
    assert disruption.resuming_from({**status, "reason": "TFJobRunning"}) is None


def test_waiting_for_a_pod_of_a_lost_node_names_it_and_the_admins_taint():
    state = disruption.waiting_for_pods(RUN, {"message": "worker x drained; resuming from epoch 7 as attempt 2"},
                                        [{**pod(1), "spec": {"nodeName": "dtr-n2"}}], T2)  # fmt: skip
    assert "waiting for the failed TFJob's pods to go: mnist-cnn-worker-1 on node dtr-n2" in state.message
    assert "kubectl taint node dtr-n2 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute" in state.message


def test_a_resumed_run_waits_only_so_long_then_fails_naming_the_lost_node():
    lost = [disrupted(0, "DeletionByTaintManager", "", node="dtr-n1"), disrupted(1, "DeletionByTaintManager", "",
                                                                                  node="dtr-n1")]  # fmt: skip
    plan = disruption.resume(RUN, RUNNING, FAILED, lost, [], T0)
    assert plan is not None and plan.entry["nodes"] == ["dtr-n1"]
    resumed = disruption.resuming_status(RUN, plan, RUNNING, T0)
    stuck = {**resumed, "reason": "WorkerPodsNotStarting", "message": "worker pods cannot start: volume node affinity"}
    assert disruption.waited_status(RUN, stuck, resumed, "2026-11-29T18:14:59Z") == stuck  # 899 s: within the bound
    failed = disruption.waited_status(RUN, stuck, resumed, "2026-11-29T18:15:00Z")
    assert (failed["phase"], failed["reason"]) == ("Failed", "ResumeTimedOut")
    assert "within 900 s (spec.disruption.waitSeconds): it lost node(s) dtr-n1 (the node of its ReadWriteOnce " \
           "volume, which holds the backup); worker pods cannot start: volume node affinity" in failed["message"]
    gone = disruption.waiting_for_pods(RUN, resumed, [{**pod(1), "spec": {"nodeName": "dtr-n1"}}],
                                       "2026-11-29T18:20:00Z")  # fmt: skip
    assert gone.reason == "ResumeTimedOut" and "waiting for the failed TFJob's pods to go" in gone.message


# ---- the reconciler over the fake API ----------------------------------------------------------------------------


def world(status: dict[str, Any], pods: list[dict[str, Any]], run_spec: dict[str, Any] | None = None) -> FakeKube:
    """The run (that status), its failed TFJob, and these worker pods, stored."""
    kube = FakeKube()
    body = make_run(run_spec or {"workers": 2}, uid="u-1", generation=1, resourceVersion="1")
    body["status"] = status
    kube.put(body)
    kube.put({**copy.deepcopy(TFJOB), "status": FAILED["status"]}, "TFJob")
    for p in pods:
        kube.put(copy.deepcopy(p), "Pod")
    return kube


def stored_tfjob(kube: FakeKube) -> dict[str, Any] | None:
    return kube.stored("TFJob", "mnist-cnn")


def test_the_reconciler_deletes_the_failed_tfjob_and_makes_it_again_once_it_is_gone():
    kube = world(RUNNING, DRAINED)
    rec, events = reconciler(kube)
    failed = stored_tfjob(kube)
    rec.tfjob_event("MODIFIED", failed)
    status = kube.stored(KIND, "mnist-cnn")["status"]
    assert (status["phase"], status["reason"], status["resumes"]) == ("Pending", "ResumingAfterDisruption", 1)
    assert [c for c in kube.succeeded("delete_tfjob")] == [{"namespace": "ml", "name": "mnist-cnn",
                                                            "uid": failed["metadata"]["uid"]}]  # fmt: skip
    assert ("Warning", "ResumingAfterDisruption") in [e[1:3] for e in events]
    rec.tfjob_event("DELETED", failed)  # the fake deletes at once: the DELETED event follows
    again = stored_tfjob(kube)
    assert again is not None and again["metadata"]["uid"] != failed["metadata"]["uid"]
    status = kube.stored(KIND, "mnist-cnn")["status"]
    assert (status["phase"], status["reason"], status["resumes"]) == ("Pending", "TFJobSubmitted", 1)
    assert status["disruptions"][0]["attempt"] == 2


def test_a_second_event_of_the_same_failed_tfjob_resumes_once():
    kube = world(RUNNING, DRAINED)
    rec, _ = reconciler(kube)
    failed = stored_tfjob(kube)
    rec.tfjob_event("MODIFIED", failed)
    kube.put(failed, "TFJob")  # as if the delete had not happened (the operator stopped before it)
    rec.tfjob_event("MODIFIED", failed)
    status = kube.stored(KIND, "mnist-cnn")["status"]
    assert status["resumes"] == 1 and len(status["disruptions"]) == 1
    assert len(kube.succeeded("delete_tfjob")) == 2 and stored_tfjob(kube) is None


def test_a_failed_tfjob_being_deleted_with_a_pod_left_waits_naming_it():
    kube = world(RUNNING, DRAINED)
    rec, _ = reconciler(kube)
    failed = stored_tfjob(kube)
    rec.tfjob_event("MODIFIED", failed)
    going = {**failed, "metadata": {**failed["metadata"], "deletionTimestamp": T2}}
    kube.put(going, "TFJob")  # a foreground deletion, its pod of a lost node still there
    rec.tfjob_event("MODIFIED", going)  # on its way out: the attempt says what it waits for, then the backoff
    assert rec.reconcile_run(kube.stored(KIND, "mnist-cnn")) is not None  # waits, and is tried again
    message = kube.stored(KIND, "mnist-cnn")["status"]["message"]
    assert "waiting for the failed TFJob's pods to go: mnist-cnn-worker-0, mnist-cnn-worker-1 on node dtr-n2" in message
    assert stored_tfjob(kube)["metadata"]["uid"] == failed["metadata"]["uid"], "nothing made while it goes"


def test_a_tfjob_deleted_by_someone_else_still_fails_the_run():
    kube = world(RUNNING, [])
    rec, _ = reconciler(kube)
    gone = stored_tfjob(kube)
    kube.delete(TFJOB_API_VERSION, "TFJob", "ml", "mnist-cnn")
    rec.tfjob_event("DELETED", gone)
    status = kube.stored(KIND, "mnist-cnn")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "TFJobDeleted")


def test_with_resume_false_the_run_fails_naming_the_drain_and_why_it_did_not_resume():
    kube = world(RUNNING, DRAINED, {"workers": 2, "disruption": {"resume": False}})
    rec, _ = reconciler(kube)
    rec.tfjob_event("MODIFIED", stored_tfjob(kube))
    status = kube.stored(KIND, "mnist-cnn")["status"]
    assert status["phase"] == "Failed" and "evicted through the Eviction API" in status["message"]
    assert status["message"].endswith("(not resumed: spec.disruption.resume is false)")
    assert kube.succeeded("delete_tfjob") == []


def test_the_run_the_operator_keeps_in_memory_keeps_its_disruption_spec():
    """The mirror decides from the run its watch keeps (runtime/kept.slim): found missing on the real API server,
    where a run with resume false was resumed."""
    body = make_run({"workers": 2, "disruption": {"resume": False, "maxResumes": 5}}, uid="u-1")
    kept = parse_run(slim(body)).disruption
    assert (kept.resume, kept.max_resumes) == (False, 5)


def test_a_writer_that_read_the_run_before_it_was_resumed_does_not_fail_it():
    """Found on three nodes: two TFJob events at once; one resumed the run and deleted its TFJob, the other, with the
    run as read before, then saw the failed TFJob going and wrote the failure over the resume."""
    kube = world(RUNNING, DRAINED)
    rec, _ = reconciler(kube)
    failed = stored_tfjob(kube)
    stale = ObservedRun.parse(copy.deepcopy(kube.stored(KIND, "mnist-cnn")), IMAGE)
    rec.tfjob_event("MODIFIED", failed)
    going = {**failed, "metadata": {**failed["metadata"], "deletionTimestamp": T2}}
    kube.put(going, "TFJob")  # as the API keeps it while its pods go (the fake deleted it at once)
    rec.mirror.sync_status(stale, going)
    rec.mirror.sync_status(stale, failed)  # not going yet, as read before the delete
    status = kube.stored(KIND, "mnist-cnn")["status"]
    assert (status["reason"], status["resumes"]) == ("ResumingAfterDisruption", 1), status
    assert kube.succeeded("patch_tfjob_run_policy") == [], "no pods released: the resume deletes them"


def test_a_going_tfjob_seen_with_a_stale_copy_of_the_run_still_says_what_it_waits_for():
    """Found on three nodes: the operator restarted on another node resumed the run, and the next event of its going
    TFJob came with the watch's copy of the run from before that resume: the run is read anew."""
    kube = world(RUNNING, DRAINED)
    rec, _ = reconciler(kube)
    failed = stored_tfjob(kube)
    stale = copy.deepcopy(kube.stored(KIND, "mnist-cnn"))
    rec.tfjob_event("MODIFIED", failed)
    going = {**failed, "metadata": {**failed["metadata"], "deletionTimestamp": T2}}
    kube.put(going, "TFJob")
    rec.tfjob_event("MODIFIED", going, cached_run=lambda namespace, name: stale)
    message = kube.stored(KIND, "mnist-cnn")["status"]["message"]
    assert "waiting for the failed TFJob's pods to go: mnist-cnn-worker-0, mnist-cnn-worker-1 on node dtr-n2" in message


def test_save_on_stop_gives_the_trainer_its_save_on_sigterm_and_only_then():
    from dtr_contract import flags
    from dtr_operator.builders import trainer_args

    assert flags.BACKUP_ON_SIGTERM in trainer_args(spec(saveOnStop=True))
    assert flags.BACKUP_ON_SIGTERM not in trainer_args(RUN)


def test_a_worker_whose_pod_went_unremembered_counts_as_taken_away():
    """Found on three nodes: the operator's own pod was on the drained node; the one started elsewhere saw the TFJob
    failed after the evicted worker's pod had gone, its events silent."""
    [line] = disruption.taken_away([pod(0, running=True)], [], RUNNING, ["mnist-cnn-worker-1"])
    assert line == ("worker mnist-cnn-worker-1 was deleted before the operator saw why (a drain or another eviction, "
                    "or someone deleting it)")  # fmt: skip
    plan = disruption.resume(RUN, RUNNING, FAILED, [pod(0, running=True)], [], T2)
    assert plan is not None and "mnist-cnn-worker-1 was deleted" in plan.state.message


def test_a_worker_whose_pod_went_before_its_condition_was_read_is_named_with_the_node_its_events_give():
    """Found on three nodes (CI at 9abae11): a drained worker's pod deleted before the operator read its
    DisruptionTarget; its Scheduled event still names the node."""
    events = [{"reason": "Scheduled", "message": "Successfully assigned ml/mnist-cnn-worker-1 to dtr-n2"}]
    gone = assigned_worker("mnist-cnn-worker-1", events)
    assert gone == {"metadata": {"name": "mnist-cnn-worker-1"}, "spec": {"nodeName": "dtr-n2"}, "status": {}}
    assert assigned_worker("w", []) is None
    [line] = disruption.taken_away([pod(0, running=True)], [gone], RUNNING)
    assert line == ("worker mnist-cnn-worker-1 on node dtr-n2 was deleted before the operator saw why (a drain or "
                    "another eviction, or someone deleting it)")  # fmt: skip
    plan = disruption.resume(RUN, RUNNING, FAILED, [pod(0, running=True)], [gone], T2)
    assert plan is not None and "mnist-cnn-worker-1 on node dtr-n2 was deleted" in plan.state.message


def test_the_taint_an_admin_may_set_names_the_taken_workers_node_not_a_live_peers():
    left = [{**pod(0), "spec": {"nodeName": "dtr-n1"}},
            disrupted(1, "DeletionByTaintManager", "", node="dtr-n2")]  # fmt: skip
    state = disruption.waiting_for_pods(RUN, {"message": "x; resuming"}, left, T2)
    assert "kubectl taint node dtr-n2 node.kubernetes.io/out-of-service" in state.message
