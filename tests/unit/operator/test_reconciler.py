"""reconcile.Reconciler against the fake API (support.fake_kube): what the shell writes, says and remembers
(milliseconds).

decide() has its own tests (test_reconcile_decide.py); the integration tier runs the same shell against
a real API server.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from dtr_contract import exits
from dtr_operator.api import JOB_NAME_LABEL, KIND
from dtr_operator.kube import ApiError, Conflict
from dtr_operator.reconcile.context import ObservedRun
from dtr_operator.reconcile.reconciler import Reconciler
from dtr_operator.settings import Settings

from support.fake_kube import FakeKube
from support.reconciler import TFJOB, reconciler, run_policy_patches, status_writes
from support.runs import make_run
from support.tfjobs import controlled_by

CONFLICT = Conflict(409, "Conflict", "the object has been modified")


def api(*objects: dict[str, Any], kind: str | None = None) -> FakeKube:
    """The fake API with these objects stored (runs, unless `kind` says otherwise)."""
    kube = FakeKube()
    for obj in objects:
        kube.put(obj, kind)
    return kube


def writes(kube: FakeKube) -> list[tuple[str, dict[str, Any], str | None]]:
    """(run name, status patch, the resourceVersion it was guarded by) for each status write the API took."""
    return [(a["name"], a["status"], a["resource_version"]) for a in kube.succeeded("patch_run_status")]


def stored_run(kube: FakeKube) -> dict[str, Any]:
    found = kube.stored(KIND, "mnist-cnn")
    assert found is not None
    return found


def run(status: dict[str, Any] | None = None, spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    body = make_run(spec or {"workers": 2}, **{"uid": "u-1", "generation": 1, "resourceVersion": "1", **meta})
    if status is not None:
        body["status"] = status
    return body


WAITING = {"phase": "Pending", "reason": "WaitingForPVC", "message": "waiting for PVC shared"}


def test_a_new_reason_is_written_with_the_runs_version_and_said_once():
    kube = api(run(resourceVersion="7"))
    rec, events = reconciler(kube)
    assert rec.ctx.record(run(resourceVersion="7"), lambda prev: WAITING) == WAITING
    assert writes(kube) == [("mnist-cnn", WAITING, "7")]
    assert events == [("mnist-cnn", "Warning", "WaitingForPVC", "waiting for PVC shared")]
    assert rec.ctx.record(stored_run(kube), lambda prev: WAITING) is None, "nothing changed: no write"
    assert len(writes(kube)) == 1
    assert rec.ctx.record(stored_run(kube), lambda prev: {**WAITING, "message": "still"}) == {"message": "still"}
    assert len(events) == 1, "the same phase and reason: no second event"


def test_a_quiet_write_says_nothing_and_a_normal_reason_is_a_normal_event():
    kube = api(run())
    rec, events = reconciler(kube)
    rec.ctx.record(run(), lambda prev: {"phase": "Pending", "reason": "TFJobSubmitted"}, quiet=True)
    assert events == []
    rec.ctx.record(stored_run(kube), lambda prev: {"phase": "Running", "reason": "TFJobRunning"})
    assert events == [("mnist-cnn", "Normal", "TFJobRunning", "")]


def test_a_conflict_rereads_the_run_and_recomputes_from_its_status():
    fresh = run({"phase": "Pending", "reason": "TFJobCreated"}, resourceVersion="8")
    kube = api(fresh)  # the operator read the run at 7; it has changed since
    rec, _ = reconciler(kube)
    seen: list[Any] = []
    rec.ctx.record(run(resourceVersion="7"), lambda prev: seen.append(prev.get("reason")) or {"phase": "Running"})
    assert seen == [None, "TFJobCreated"]
    assert writes(kube) == [("mnist-cnn", {"phase": "Running"}, "8")]


@pytest.mark.parametrize("fresh", [None, run(uid="u-2", resourceVersion="2"),
                                   run(deletionTimestamp="2026-01-01T00:00:00Z", resourceVersion="2")],
                         ids=["deleted", "replaced", "being-deleted"])  # fmt: skip
def test_a_conflict_with_a_run_gone_replaced_or_going_writes_nothing(fresh: dict[str, Any] | None):
    kube = api(*[fresh] if fresh else [])
    if fresh is None:  # changed, then deleted, between the write's conflict and the re-read
        kube.fail("patch_run_status", CONFLICT)
    rec, events = reconciler(kube)
    assert rec.ctx.record(run(), lambda prev: WAITING) is None
    assert writes(kube) == [] and events == []
    assert [c.method for c in kube.calls] == ["patch_run_status", "get_run"], "a conflict, then the re-read"


def test_a_run_deleted_since_it_was_read_is_not_written_and_not_read_again():
    kube = api()
    rec, events = reconciler(kube)
    assert rec.ctx.record(run(), lambda prev: WAITING) is None
    assert [(c.method, type(c.error).__name__) for c in kube.calls] == [("patch_run_status", "NotFound")]
    assert events == []


def test_a_status_that_keeps_changing_is_left_to_a_later_retry():
    kube = api(run())
    kube.fail("patch_run_status", CONFLICT, times=None)  # another writer, always first
    rec, _ = reconciler(kube)
    with pytest.raises(ApiError) as err:
        rec.ctx.record(run(), lambda prev: WAITING)
    tried = [c for c in kube.calls if c.method == "patch_run_status"]
    assert err.value.status == 409 and len(tried) == rec.retries.write_attempts


def worker_pod(index: int, **pod: Any) -> dict[str, Any]:
    """A worker pod of the run's TFJob, labelled as the training-operator labels it."""
    labels = {JOB_NAME_LABEL: "mnist-cnn", "training.kubeflow.org/replica-type": "worker",
              "training.kubeflow.org/replica-index": str(index)}  # fmt: skip
    return {"metadata": {"name": f"mnist-cnn-worker-{index}", "labels": labels, "ownerReferences": controlled_by()},
            **pod}


def test_a_conflict_mirrors_the_tfjob_as_it_is_now_not_the_creators_copy():
    # The creator's copy has no conditions; meanwhile the training-operator said Created and the TFJob
    # handler wrote it. Mirroring the old copy after the conflict took the run back to TFJobSubmitted
    # for good (no TFJob event follows until a pod runs): a CI run saw it.
    created = {"type": "Created", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    kube = api(run({"phase": "Pending", "reason": "TFJobCreated"}, resourceVersion="8"))
    kube.put({**TFJOB, "status": {"conditions": [created]}})
    rec, _ = reconciler(kube)
    as_created = {"metadata": {"name": "mnist-cnn", "namespace": "ml"}}
    rec.mirror.sync_status(ObservedRun.parse(run(resourceVersion="7"), "localhost/distml/trainer:test"), as_created)
    assert [patch.get("reason") for patch in status_writes(kube)] in ([], [None])
    assert kube.succeeded("get_tfjob"), "the TFJob read again after the conflict"


def test_a_conflict_that_finds_the_tfjob_finished_reads_its_pods_for_the_chiefs_metrics():
    # The event's copy still ran; by the re-read after the conflict the TFJob had Succeeded. Mirrored without its
    # pods, the run ended Succeeded/MetricsUnavailable for good (a finished run is never written again): a CI
    # run's reliability tier saw it twice.
    succeeded = {"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"}
    done = {**TFJOB, "status": {"conditions": [succeeded], "replicaStatuses": {"Worker": {"succeeded": 2}}}}
    summary = {"loss": 0.1, "accuracy": 0.97, "epochs": 3, "modelPath": "/mnt/dtr/models/r/1", "modelVersion": 1}
    chief = worker_pod(0, status={"containerStatuses": [{"name": "tensorflow", "state": {"terminated": {
        "exitCode": 0, "message": json.dumps(summary)}}}]})  # fmt: skip
    kube = api(run({"phase": "Running", "reason": "TFJobRunning"}, resourceVersion="8"))
    kube.put(done)
    kube.put(chief, "Pod")
    rec, _ = reconciler(kube)
    running = {"metadata": {"name": "mnist-cnn", "namespace": "ml"},
               "status": {"conditions": [{"type": "Running", "status": "True"}]}}  # fmt: skip
    rec.mirror.sync_status(ObservedRun.parse(run({"phase": "Running"}, resourceVersion="7"), "img:1"), running)
    [patch] = status_writes(kube)
    assert (patch["phase"], patch["reason"]) == ("Succeeded", "TrainingSucceeded"), patch
    assert patch["metrics"]["accuracy"] == 0.97 and len(kube.succeeded("list_job_pods")) == 1


def test_a_running_run_short_of_a_worker_that_cannot_be_scheduled_is_told_why_and_a_finished_one_is_not_read():
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/2 nodes are available: 1 node(s) didn't match pod anti-affinity rules."}
    kube = api(run({"phase": "Running", "reason": "TFJobRunning", "workersReady": "1/2"}))
    kube.put(TFJOB)
    for i in range(2):
        kube.put(worker_pod(i, status={"conditions": [unschedulable] if i else []}), "Pod")
    rec, events = reconciler(kube)
    rec.check_waiting_pods(("ml", "mnist-cnn", "u-1"))
    [patch] = status_writes(kube)
    assert (patch["reason"], "phase" in patch) == ("WorkersNotAllRunning", False), "still Running"
    assert patch["message"].startswith("1 of 2 workers run; training waits for all (MultiWorkerMirroredStrategy): "
                                       "worker mnist-cnn-worker-1 cannot be scheduled: 0/2 nodes")  # fmt: skip
    assert [e[1:3] for e in events] == [("Warning", "WorkersNotAllRunning")]
    kube.put(run({"phase": "Succeeded", "reason": "TrainingSucceeded", "workersReady": "1/2"}))
    rec.check_waiting_pods(("ml", "mnist-cnn", "u-1"))
    assert len(kube.succeeded("list_job_pods")) == 1 and len(status_writes(kube)) == 1


def test_a_finished_run_is_never_reconciled_and_a_bad_spec_fails_the_run_without_an_api_read():
    kube = api(run(spec={"workers": 0}))
    rec, events = reconciler(kube)
    assert rec.reconcile_run(run({"phase": "Succeeded"})) is None
    assert kube.calls == []
    assert rec.reconcile_run(run(spec={"workers": 0})) is None
    assert [c.method for c in kube.calls] == ["patch_run_status"], "no read"
    [patch] = status_writes(kube)
    assert (patch["phase"], patch["reason"]) == ("Failed", "InvalidSpec")
    assert [e[1:3] for e in events] == [("Warning", "InvalidSpec")]


def test_a_run_whose_anti_affinity_splits_workers_that_share_a_readwriteonce_volume_fails_before_anything_exists():
    term = {"labelSelector": {"matchLabels": {"distml.dev/run": "mnist-cnn"}}, "topologyKey": "kubernetes.io/hostname"}
    affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    kube = api(run(spec={"workers": 2, "affinity": affinity}))
    rec, events = reconciler(kube)
    assert rec.reconcile_run(run(spec={"workers": 2, "affinity": affinity})) is None
    assert [c.method for c in kube.calls] == ["patch_run_status"], "nothing read, nothing created"
    [patch] = status_writes(kube)
    assert (patch["phase"], patch["reason"]) == ("Failed", "InvalidSpec")
    assert patch["message"].startswith("spec.affinity.podAntiAffinity: a required term puts each of the 2 workers")
    assert [e[1:3] for e in events] == [("Warning", "InvalidSpec")]


def test_tfjob_events_that_need_no_write_read_nothing():
    kube = FakeKube()
    rec, _ = reconciler(kube)
    foreign = {"metadata": {"name": "x", "namespace": "ml"}, "status": {"conditions": [{"type": "Running"}]}}
    rec.tfjob_event("MODIFIED", foreign)
    owned = {"metadata": {"name": "mnist-cnn", "namespace": "ml", "ownerReferences": [
        {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "name": "mnist-cnn", "uid": "u-1",
         "controller": True}]}}  # fmt: skip
    rec.tfjob_event("ADDED", owned)  # no conditions yet: its creator recorded TFJobSubmitted
    finished = run({"phase": "Succeeded"})
    rec.tfjob_event("DELETED", owned, cached_run=lambda namespace, name: finished)
    assert kube.calls == [], "no read, no write"


# ---- what the watch of runs feeds --------------------------------------------------------------


def test_the_watch_keeps_the_waiting_and_running_runs_until_they_move_on_or_go():
    rec, _ = reconciler(FakeKube())
    ref = ("ml", "mnist-cnn", "u-1")
    rec.seen("ADDED", run({"phase": "Pending", "reason": "TFJobCreated"}), at=100)
    assert rec.waiting.due(100 + rec.waiting.after) == [ref] and rec.running.bodies() == []
    body = run({"phase": "Running", "reason": "TFJobRunning"})
    body["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    rec.seen("MODIFIED", body, at=130)
    assert rec.waiting.due(1000) == []
    [kept] = rec.running.bodies()
    assert "managedFields" not in kept["metadata"] and "managedFields" in body["metadata"], "a slim copy"
    rec.seen("DELETED", body, at=140)
    assert rec.running.bodies() == []


def test_the_watch_keeps_each_run_slim_for_the_tfjob_handler_until_it_goes():
    rec, _ = reconciler(FakeKube())
    body = run({"phase": "Pending", "reason": "TFJobCreated"})
    body["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    rec.seen("ADDED", body, at=100)
    kept = rec.cached_run("ml", "mnist-cnn")
    assert kept is not None and kept["metadata"]["uid"] == "u-1" and "managedFields" not in kept["metadata"]
    rec.seen("DELETED", run(uid="u-0"), at=110)
    assert rec.cached_run("ml", "mnist-cnn") is not None, "the deletion of an earlier run of that name"
    rec.seen("DELETED", body, at=120)
    assert rec.cached_run("ml", "mnist-cnn") is None


class Clock:
    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def waiting_reconciler(kube: FakeKube, delays: list[float | None]) -> tuple[Reconciler, list[tuple[str, int]]]:
    """A reconciler whose reconcile_run answers `delays` in turn (the waiting itself is decide's, tested apart)."""
    rec, _ = reconciler(kube)
    calls: list[tuple[str, int]] = []

    def reconcile_run(body: dict[str, Any], retry: int = 0) -> float | None:
        calls.append((body["metadata"]["resourceVersion"], retry))
        return delays.pop(0)

    rec.reconcile_run = reconcile_run  # type: ignore[method-assign]
    return rec, calls


def test_a_waiting_run_is_kept_by_the_reconciler_and_retried_from_a_fresh_read_until_it_stops_waiting():
    kube = api(run(resourceVersion="7"))
    rec, calls = waiting_reconciler(kube, [5.0, 10.0, None])
    ref = ("ml", "mnist-cnn", "u-1")
    rec.run_waits(run(), 0, Clock(100))
    assert rec.retrying.take_due(104) == [] and rec.retrying.next_due() == 105
    [(due, retry)] = rec.retrying.take_due(105)
    rec.attempt_run(due, retry, Clock(106))
    assert rec.retrying.next_due() == 116
    rec.attempt_run(*rec.retrying.take_due(116)[0], Clock(117))
    assert calls == [("1", 0), ("7", 1), ("7", 2)], "each retry reads the run again, with the next retry count"
    assert len(rec.retrying) == 0 and due == ref


@pytest.mark.parametrize("stored", [None, run(uid="u-2"), run(deletionTimestamp="2026-12-02T00:00:00Z")],
                         ids=["deleted", "replaced", "being-deleted"])  # fmt: skip
def test_a_waiting_run_gone_or_replaced_is_dropped_at_its_retry(stored: dict[str, Any] | None):
    rec, calls = waiting_reconciler(api(*[stored] if stored else []), [])
    rec.attempt_run(("ml", "mnist-cnn", "u-1"), 3, Clock(100))
    assert calls == [] and len(rec.retrying) == 0


def test_a_run_already_done_as_read_is_not_reconciled_again():
    """kopf's create event of a run that kopf has since stored as handled (kopf_seams.handled_before) is stale."""
    rec, calls = waiting_reconciler(api(run(resourceVersion="9")), [None, None])
    ref = ("ml", "mnist-cnn", "u-1")
    rec.attempt_run(ref, 0, Clock(100), done=lambda body: body["metadata"]["resourceVersion"] == "9")
    assert calls == []
    rec.attempt_run(ref, 0, Clock(100), done=lambda body: False)
    assert calls == [("9", 0)]


def test_a_waiting_run_that_cannot_be_read_is_retried_with_its_backoff(caplog: pytest.LogCaptureFixture):
    kube = api(run())
    rec, calls = waiting_reconciler(kube, [])
    kube.fail("get_run", ApiError(503, "ServiceUnavailable", "etcd is down"))
    rec.attempt_run(("ml", "mnist-cnn", "u-1"), 2, Clock(100))
    assert calls == [] and rec.retrying.take_due(100 + rec.retries.backoff(2)) == [(("ml", "mnist-cnn", "u-1"), 3)]
    assert "etcd is down" in caplog.text


def test_a_waiting_run_whose_attempt_fails_unexpectedly_is_tried_again_with_its_backoff(caplog):
    rec, _ = waiting_reconciler(api(run()), [])  # no answer left: IndexError
    rec.attempt_run(("ml", "mnist-cnn", "u-1"), 1, Clock(100))
    assert rec.retrying.take_due(100 + rec.retries.backoff(1)) == [(("ml", "mnist-cnn", "u-1"), 2)]
    assert "its next attempt failed" in caplog.text


def test_a_deleted_run_is_retried_no_more():
    rec, _ = waiting_reconciler(FakeKube(), [5.0])
    rec.run_waits(run(), 0, Clock(100))
    rec.seen("DELETED", run(), at=101)
    assert rec.retrying.take_due(1000) == []


def test_a_progress_refusal_is_said_once_per_run_and_status(caplog: pytest.LogCaptureFixture):
    running = run({"phase": "Running", "reason": "TFJobRunning"})
    kube = api(running)
    kube.put(TFJOB)
    kube.put(worker_pod(0), "Pod")
    rec, _ = reconciler(kube)
    kube.fail("pod_log", ApiError(403, "Forbidden", "pods/log is forbidden"), times=None)
    with caplog.at_level(logging.DEBUG, logger="dtr_operator.reconcile"):
        for _ in range(3):
            rec.poll_progress(running)
    said = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and "RBAC needs get on pods/log" in said[0].getMessage()
    assert len(caplog.records) == 3, "the repeats go to the debug log"
    assert status_writes(kube) == []


# ---- a chief whose own code failed ---------------------------------------------------------------

ERROR_LOG = ("dtr_trainer[worker-0]: 2 worker(s), 2 replica(s), global batch 32\n"
             "dtr_trainer[worker-0]: error: wine_model.py:30: SyntaxError: invalid syntax\n")  # fmt: skip


def chief(exit_code: int, state: str = "lastState") -> dict[str, Any]:
    """The chief's pod after its container exited (under OnFailure: lastState once restarted, else state)."""
    terminated = {"exitCode": exit_code, "message": "dtr_trainer[worker-0]: error: wine_model.py:30: SyntaxError"}
    return worker_pod(0, status={"phase": "Running", "containerStatuses": [
        {"name": "tensorflow", "restartCount": 0, state: {"terminated": terminated}}]})  # fmt: skip


def running_job(log_text: str, pod: dict[str, Any] | None) -> tuple[FakeKube, dict[str, Any]]:
    """A Running run, its TFJob, the chief's pod (if any) and its log."""
    body = run({"phase": "Running", "reason": "TFJobRunning"})
    kube = api(body)
    kube.put(TFJOB)
    kube.set_log("mnist-cnn-worker-0", log_text)
    if pod is not None:
        kube.put(pod, "Pod")
    return kube, body


@pytest.mark.parametrize("state", ["state", "lastState"])
def test_a_chief_whose_code_failed_has_its_tfjob_fail_at_the_next_restart(state: str, caplog: pytest.LogCaptureFixture):
    kube, body = running_job(ERROR_LOG, chief(8, state))
    rec, events = reconciler(kube)
    with caplog.at_level(logging.INFO, logger="dtr_operator.reconcile"):
        rec.poll_progress(body)
    assert run_policy_patches(kube) == [("mnist-cnn", {"backoffLimit": 0})]
    assert "its chief failed for good (exit code 8); TFJob mnist-cnn fails at the next restart" in caplog.text
    assert status_writes(kube) == [] and events == [], "the run fails as its TFJob does"


DIVERGED_LOG = ("dtr_trainer[worker-0]: epoch 1/3 end accuracy=0.4000 loss=1.2000 examples_per_second=900.0\n"
                "dtr_trainer[worker-0]: epoch 2/3 begin\n"
                "dtr_trainer[worker-0]: error: training diverged: the loss became nan in epoch 2/3 (by step 9/9)\n")


def test_a_chief_whose_loss_diverged_after_an_epoch_has_its_tfjob_fail_at_the_next_restart(
    caplog: pytest.LogCaptureFixture,
):
    kube, body = running_job(DIVERGED_LOG, chief(exits.DIVERGED))
    rec, _ = reconciler(kube)
    with caplog.at_level(logging.INFO, logger="dtr_operator.reconcile"):
        rec.poll_progress(body)
    assert run_policy_patches(kube) == [("mnist-cnn", {"backoffLimit": 0})]
    assert f"its chief failed for good (exit code {exits.DIVERGED})" in caplog.text
    assert [patch["progress"]["epochsDone"] for patch in status_writes(kube)] == ["1/3"], "the epoch is recorded"


@pytest.mark.parametrize("log_text, pod", [
    (ERROR_LOG, chief(5)),  # another permanent error: the run's backoffLimit, as before
    (ERROR_LOG, None),  # the pod is gone
    ("dtr_trainer[worker-0]: epoch 1/3 begin\n", worker_pod(0)),  # no error line, no exit: training on
])  # fmt: skip
def test_a_chief_that_did_not_fail_with_its_code_keeps_the_runs_backoff_limit(log_text: str, pod: Any):
    kube, body = running_job(log_text, pod)
    rec, _ = reconciler(kube)
    rec.poll_progress(body)
    assert run_policy_patches(kube) == []


def test_a_chief_restarted_after_diverging_has_its_tfjob_fail_though_its_new_log_says_nothing_yet():
    """Under OnFailure the kubelet restarts a worker at once after its first exit: the log read is the new
    container's, its pod's lastState the exit (CI's run of 364ccf1 saw the error only at the second exit)."""
    kube, body = running_job("dtr_trainer[worker-0]: 2 worker(s), 2 replica(s), global batch 32\n",
                             chief(exits.DIVERGED))  # fmt: skip
    rec, _ = reconciler(kube)
    rec.poll_progress(body)
    assert run_policy_patches(kube) == [("mnist-cnn", {"backoffLimit": 0})]
    assert len(kube.succeeded("get_pod")) == 1, "the pod read for the log says it: not read again"


def test_a_refused_backoff_limit_patch_is_said_and_the_run_goes_on(caplog: pytest.LogCaptureFixture):
    kube, body = running_job(ERROR_LOG, chief(8))
    kube.fail("patch_tfjob_run_policy", ApiError(403, "Forbidden", "tfjobs is forbidden"), times=None)
    rec, _ = reconciler(kube)
    with caplog.at_level(logging.WARNING, logger="dtr_operator.reconcile"):
        rec.poll_progress(body)
    assert "its chief failed for good, but TFJob mnist-cnn was not told to stop restarting" in caplog.text
    assert status_writes(kube) == []


@pytest.mark.parametrize("spec, pvc, reason", [
    ({"workers": 1, "podAnnotations": {"sidecar.istio.io/proxyImage": "evil.example/x:1"}}, None,
     "PodAnnotationNotAllowed"),
    ({"workers": 1, "storage": {"claimName": "postgres-data"}}, {"metadata": {"name": "postgres-data"}},
     "ClaimNotAllowed"),
])  # fmt: skip
def test_the_operators_policy_fails_a_run_without_creating_anything(spec, pvc, reason):
    kube, settings = api(run(spec=spec)), Settings()
    if pvc is not None:
        kube.put(pvc, "PersistentVolumeClaim")
    rec, _ = reconciler(kube, run_refusal=settings.run_refusal, claim_refusal=settings.claim_refusal)
    assert rec.reconcile_run(run(spec=spec)) is None
    [patch] = status_writes(kube)
    assert (patch["phase"], patch["reason"]) == ("Failed", reason)
    assert not [c for c in kube.calls if c.method == "create"], "the refusals come before any create"
