"""watchdog.py: when a Running run is stalled, and the steps the operator takes (pure); then the same in
reconcile.Reconciler against a fake API: what the poll reads, writes and says (milliseconds)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dtr_operator import watchdog
from dtr_operator.api import KIND
from dtr_operator.kube import ApiError
from dtr_operator.reconcile.reconciler import Reconciler
from dtr_operator.spec import WatchdogSpec
from dtr_operator.watchdog import Clear, Flag, Healthy, Remind, Stalled
from hypothesis import given
from hypothesis import strategies as st

from support.fake_kube import FakeKube
from support.reconciler import IMAGE, TFJOB, run_policy_patches, status_writes
from support.runs import make_run
from support.tfjobs import controlled_by

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return watchdog.format_time(T0 + timedelta(seconds=seconds))


def running(started: float = 0, **extra: Any) -> dict[str, Any]:
    """A Running run whose workers started `started` seconds after T0."""
    conditions = [{"type": "Running", "status": "True", "reason": "TFJobRunning", "lastTransitionTime": at(started)}]
    return {"phase": "Running", "reason": "TFJobRunning", "message": "TFJob x is running", "conditions": conditions,
            **extra}  # fmt: skip


def seen(status: dict[str, Any], ends: list[tuple[int, float]]) -> dict[str, Any]:
    """The status after the poll saw each (epoch, seconds after T0)."""
    for epoch, second in ends:
        status = watchdog.with_epoch(status, epoch, at(second))
    return status


WATCH = WatchdogSpec(stall_factor=5, min_stall_seconds=600)


def test_before_the_first_epoch_only_the_floor_counts_from_the_start():
    status = running(started=100)
    assert watchdog.check(WATCH, status, at(100 + 599)) == Healthy(T0 + timedelta(seconds=700))
    verdict = watchdog.check(WATCH, status, at(100 + 650))
    assert isinstance(verdict, Stalled)
    assert (verdict.first_epoch, verdict.silent_seconds) == (True, 650)
    assert watchdog.stall_message(verdict, ["r-worker-1"], 2) == (
        "no epoch finished in the 650 s since the workers started (minStallSeconds 600); silent: r-worker-1")


def test_the_mean_leaves_out_the_first_epoch_and_the_factor_sets_the_limit():
    status = seen(running(), [(1, 300), (2, 362), (3, 424)])  # tracing in the first; then 62 s epochs
    record = status["watchdog"]
    assert (record["meanEpochSeconds"], record["timedEpochs"], record["lastEpoch"]) == (62.0, 2, 3)
    watch = WatchdogSpec(stall_factor=5, min_stall_seconds=60)
    assert isinstance(watchdog.check(watch, status, at(424 + 309)), Healthy)
    verdict = watchdog.check(watch, status, at(424 + 312))
    assert isinstance(verdict, Stalled)
    assert watchdog.stall_message(verdict, ["r-worker-1"], 2) == (
        "no epoch finished for 312 s (5 x mean epoch 62 s); silent: r-worker-1")


def test_an_epoch_seen_again_or_a_run_not_running_changes_nothing():
    status = seen(running(), [(1, 300), (2, 362)])
    assert watchdog.with_epoch(status, 2, at(400)) == status
    assert watchdog.with_epoch({**status, "phase": "Pending"}, 3, at(400)) == {**status, "phase": "Pending"}
    assert watchdog.with_epoch(status, None, at(400)) == status


def test_an_epoch_across_a_new_start_is_not_timed():
    status = seen(running(), [(1, 100), (2, 110)])  # one timed epoch of 10 s
    restarted = running(started=1000, watchdog=status["watchdog"])  # suspended and resumed, say
    after = seen(restarted, [(3, 1500)])
    assert after["watchdog"]["meanEpochSeconds"] == 10.0 and after["watchdog"]["timedEpochs"] == 1
    # The epoch before the new start does not count as progress since it: the floor from the start does.
    assert isinstance(watchdog.check(WATCH, restarted, at(1000 + 601)), Stalled)


def test_with_one_epoch_only_its_own_time_stands_for_the_mean():
    status = seen(running(), [(1, 200)])
    watch = WatchdogSpec(stall_factor=3, min_stall_seconds=10)
    assert isinstance(watchdog.check(watch, status, at(200 + 599)), Healthy)
    verdict = watchdog.check(watch, status, at(200 + 600))
    assert isinstance(verdict, Stalled) and verdict.why == "3 x mean epoch 200 s"


def test_off_or_not_running_is_never_stalled():
    assert watchdog.check(WatchdogSpec(enabled=False), running(), at(10**6)) == Healthy(None)
    assert watchdog.check(WATCH, {**running(), "phase": "Pending"}, at(10**6)) == Healthy(None)
    assert watchdog.decide(WATCH, {"phase": "Running"}, at(10**6)) is None, "no Running condition: no start"


durations = st.lists(st.floats(min_value=1, max_value=5000), min_size=1, max_size=12)


@given(durations, st.floats(min_value=2, max_value=100), st.integers(min_value=10, max_value=100_000),
       st.floats(min_value=0, max_value=1))  # fmt: skip
def test_never_stalled_before_the_floor(epochs: list[float], k: float, floor: int, fraction: float):
    watch = WatchdogSpec(stall_factor=k, min_stall_seconds=floor)
    ends, t = [], 0.0
    for n, seconds in enumerate(epochs, start=1):
        t += seconds
        ends.append((n, round(t)))
    status = seen(running(), ends)
    assert isinstance(watchdog.check(watch, status, at(ends[-1][1] + fraction * (floor - 1))), Healthy)
    assert isinstance(watchdog.check(watch, running(), at(fraction * (floor - 1))), Healthy)


@given(st.integers(min_value=1, max_value=3000), st.integers(min_value=2, max_value=10),
       st.integers(min_value=2, max_value=50), st.integers(min_value=10, max_value=5000))  # fmt: skip
def test_stalled_once_k_times_the_mean_and_the_floor_have_passed(epoch: int, epochs: int, k: int, floor: int):
    watch = WatchdogSpec(stall_factor=k, min_stall_seconds=floor)
    status = seen(running(), [(n, 1000 + n * epoch) for n in range(1, epochs + 1)])
    assert status["watchdog"]["meanEpochSeconds"] == epoch
    last = 1000 + epochs * epoch
    limit = max(floor, k * epoch)
    assert isinstance(watchdog.check(watch, status, at(last + limit - 1)), Healthy)
    verdict = watchdog.check(watch, status, at(last + limit))
    assert isinstance(verdict, Stalled) and verdict.limit_seconds == limit


# ---- the steps -----------------------------------------------------------------------------------


def stalled_run() -> dict[str, Any]:
    return seen(running(), [(1, 300), (2, 362), (3, 424)])


def test_a_stall_is_flagged_once_then_reminded_then_cleared_by_an_epoch():
    watch = WatchdogSpec(stall_factor=5, min_stall_seconds=60)
    status, now = stalled_run(), at(424 + 400)
    step = watchdog.decide(watch, status, now)
    assert isinstance(step, Flag)
    assert step.then == watchdog.REPORT
    flagged = watchdog.flagged_status(status, step, "no epoch ...; silent: r-worker-1", now, 1)
    [cond] = [c for c in flagged["conditions"] if c["type"] == "Stalled"]
    assert (cond["status"], cond["reason"], cond["lastTransitionTime"]) == ("True", "NoEpochProgress", now)
    assert (flagged["phase"], flagged["message"]) == ("Running", "Stalled: no epoch ...; silent: r-worker-1")
    assert watchdog.decide(watch, flagged, at(424 + 500)) is None, "said once"
    rewritten = {**flagged, "message": "TFJob x is running"}  # a TFJob event
    assert watchdog.decide(watch, rewritten, at(424 + 500)) == Remind("no epoch ...; silent: r-worker-1")
    assert watchdog.reminded_status(rewritten, "m")["message"] == "Stalled: m"


def test_an_epoch_after_a_stall_clears_it():
    watch = WatchdogSpec(stall_factor=5, min_stall_seconds=60)
    status, now = stalled_run(), at(424 + 400)
    step = watchdog.decide(watch, status, now)
    assert isinstance(step, Flag)
    flagged = watchdog.flagged_status(status, step, "m", now, 1)
    resumed = watchdog.with_epoch(flagged, 4, at(424 + 900))
    assert watchdog.decide(watch, resumed, at(424 + 905)) == Clear()
    cleared = watchdog.cleared_status(resumed, at(424 + 905), 1)
    [cond] = [c for c in cleared["conditions"] if c["type"] == "Stalled"]
    assert (cond["status"], cond["reason"]) == ("False", "EpochFinished")
    assert not cleared["message"].startswith("Stalled")
    assert watchdog.decide(watch, cleared, at(424 + 910)) is None


def test_restarts_are_counted_up_to_the_limit_then_the_run_fails():
    watch = WatchdogSpec(stall_factor=5, min_stall_seconds=60, on_stall="Restart", max_restarts=2)
    status, now = stalled_run(), at(424 + 400)
    step = watchdog.decide(watch, status, now)
    assert isinstance(step, Flag)
    assert (step.restart, step.fail) == (1, False)
    flagged = watchdog.flagged_status(status, step, "m", now, 1)
    assert flagged["watchdog"]["restarts"] == 1
    assert watchdog.restarting(flagged)
    assert not watchdog.restarting(watchdog.restarted_status(flagged))
    assert "restart 1 of 2" in watchdog.then_message(step, watch)


def test_after_a_restart_the_floor_counts_from_the_new_start_until_no_restart_is_left():
    watch = WatchdogSpec(stall_factor=5, min_stall_seconds=60, on_stall="Restart", max_restarts=2)
    status, now = stalled_run(), at(424 + 400)
    step = watchdog.decide(watch, status, now)
    assert isinstance(step, Flag)
    flagged = watchdog.flagged_status(status, step, "m", now, 1)
    # Resumed: a new start; stalled again after the floor from it.
    again = {**watchdog.restarted_status(flagged), "conditions": [
        {**c, "lastTransitionTime": at(2000)} if c["type"] == "Running" else c for c in flagged["conditions"]]}
    assert watchdog.decide(watch, again, at(2000 + 59)) is None
    second = watchdog.decide(watch, again, at(2000 + 61))
    assert isinstance(second, Flag)
    assert (second.restart, second.fail) == (2, False)
    used = {**again, "watchdog": {**again["watchdog"], "restarts": 2}}
    last = watchdog.decide(watch, used, at(2000 + 61))
    assert isinstance(last, Flag)
    assert last.fail
    assert "maxRestarts" in watchdog.then_message(last, watch)


def test_silent_workers_are_those_whose_recent_log_is_empty():
    logs = {"r-worker-0": "dtr_trainer[worker-0]: alive\n", "r-worker-1": "", "r-worker-2": None}
    assert watchdog.silent_workers(logs) == ["r-worker-1", "r-worker-2"]
    verdict = Stalled(T0, 100, 60, "minStallSeconds 60", first_epoch=False)
    assert "silent: none (all 3 workers logged within 50 s" in watchdog.stall_message(verdict, [], 3)


# ---- the shell: the Reconciler --------------------------------------------------------------------

Event = tuple[str, str, str]  # type, reason, message


def api(logs: dict[str, str | None], run: dict[str, Any]) -> FakeKube:
    """The run, its TFJob (the training-operator created it) and each pod's log (the chief's tail and the recent
    lines alike; None: no log to read)."""
    kube = FakeKube()
    kube.put(run)
    kube.put({**TFJOB, "status": {"conditions": [{"type": "Created", "status": "True"}]}})
    for pod, text in logs.items():
        kube.put({"metadata": {"name": pod, "ownerReferences": controlled_by(),
                               "labels": {"training.kubeflow.org/job-name": "mnist-cnn"}}}, "Pod")  # fmt: skip
        if text is not None:
            kube.set_log(pod, text)
    return kube


def log_reads(kube: FakeKube) -> list[tuple[str, dict[str, Any]]]:
    """(pod, what was asked of its log besides whose) for each log read."""
    return [(a["pod"], {k: v for k, v in a.items() if k not in ("namespace", "pod", "container")})
            for a in kube.succeeded("pod_log")]  # fmt: skip


def policy_patches(kube: FakeKube) -> list[dict[str, Any]]:
    return [fields for _, fields in run_policy_patches(kube)]


def poller(kube: FakeKube, now: str) -> tuple[Reconciler, list[Event]]:
    events: list[Event] = []
    rec = Reconciler(kube, lambda body, t, reason, message: events.append((t, reason, message)), IMAGE,
                     now=lambda: now)  # fmt: skip
    return rec, events


def body(status: dict[str, Any], **watch: Any) -> dict[str, Any]:
    run = make_run({"workers": 2, "watchdog": {"minStallSeconds": 60, **watch}}, uid="u-1", generation=1,
                   resourceVersion="1")  # fmt: skip
    run["status"] = status
    return run


CHIEF_LOG = "dtr_trainer[worker-0]: epoch 3/3 end loss=0.5000 examples_per_second=10.0\n"
# The chief blocked in the all-reduce: only its heartbeat since the last epoch end (out of the tail by now).
STALLED_LOGS = {"mnist-cnn-worker-0": "dtr_trainer[worker-0]: alive\n", "mnist-cnn-worker-1": ""}


def test_a_healthy_poll_reads_only_the_chiefs_log():
    run = body(seen(running(), [(1, 300), (2, 362), (3, 424)]))
    kube = api(STALLED_LOGS, run)
    rec, events = poller(kube, at(424 + 30))
    rec.poll_progress(run)
    assert [pod for pod, _ in log_reads(kube)] == ["mnist-cnn-worker-0"]
    assert status_writes(kube) == [] and events == []


def test_the_record_keeps_when_the_chief_logged_the_epoch_not_when_the_poll_read_it():
    stamped = f"{at(420)[:-1]}.123456789Z dtr_trainer[worker-0]: epoch 3/3 end loss=0.5000 examples_per_second=10.0\n"
    run = body(seen(running(), [(1, 300), (2, 362)]))
    kube = api({"mnist-cnn-worker-0": stamped}, run)
    rec, _ = poller(kube, at(424))  # read 4 s after the epoch ended
    rec.poll_progress(run)
    assert log_reads(kube)[0] == ("mnist-cnn-worker-0", {"tail_lines": 40, "timestamps": True})
    [write] = status_writes(kube)
    assert write["watchdog"]["lastEpochTime"] == at(420), "the chief's time, not the read's"
    assert write["watchdog"]["meanEpochSeconds"] == 60.0  # (62 + 58) / 2: the 4 s the read came later are not in it
    assert write["progress"]["lastUpdatedTime"] == at(424)


def test_an_epoch_logged_after_the_operators_now_counts_as_ended_now():
    ahead = f"{at(430)} dtr_trainer[worker-0]: epoch 3/3 end loss=0.5000 examples_per_second=10.0\n"  # node clock ahead
    run = body(seen(running(), [(1, 300), (2, 362)]))
    kube = api({"mnist-cnn-worker-0": ahead}, run)
    rec, _ = poller(kube, at(424))
    rec.poll_progress(run)
    assert status_writes(kube)[0]["watchdog"]["lastEpochTime"] == at(424)


def test_a_stall_names_the_silent_worker_in_the_condition_the_message_and_a_warning():
    run = body(seen(running(), [(1, 300), (2, 362), (3, 424)]))
    kube = api(STALLED_LOGS, run)
    rec, events = poller(kube, at(424 + 400))
    rec.poll_progress(run)
    recent = [(pod, q) for pod, q in log_reads(kube) if q.get("since_seconds")]
    assert [pod for pod, _ in recent] == ["mnist-cnn-worker-0", "mnist-cnn-worker-1"]
    assert all(q == {"tail_lines": 1, "since_seconds": 50} for _, q in recent), "bounded reads"
    [write] = status_writes(kube)
    [cond] = [c for c in write["conditions"] if c["type"] == "Stalled"]
    assert (cond["status"], cond["reason"]) == ("True", "NoEpochProgress")
    assert cond["message"].startswith("no epoch finished for 400 s (5 x mean epoch 62 s); silent: mnist-cnn-worker-1;")
    assert write["message"] == "Stalled: " + cond["message"]
    assert events == [("Warning", "Stalled", cond["message"])]


def suspended(kube: FakeKube) -> dict[str, Any]:
    """The training-operator's part: the TFJob says it is suspended, and its pods go; the run as the TFJob's
    handler then left it (Pending), with the restart pending."""
    tfjob = kube.stored("TFJob", "mnist-cnn")
    assert tfjob is not None and tfjob["spec"]["runPolicy"]["suspend"] is True
    kube.put({**tfjob, "status": {"conditions": [{"type": "Suspended", "status": "True"}]}})
    for i in range(2):
        kube.delete_pod("ml", f"mnist-cnn-worker-{i}")
    run = kube.stored(KIND, "mnist-cnn")
    assert run is not None and run["status"]["watchdog"]["restarting"] is True
    return kube.put({**run, "status": {**run["status"], "phase": "Pending"}})


def test_restart_suspends_the_tfjob_and_its_suspended_event_resumes_it():
    stalled = body(seen(running(), [(1, 300), (2, 362), (3, 424)]), onStall="Restart")
    kube = api(STALLED_LOGS, stalled)
    rec, events = poller(kube, at(424 + 400))
    rec.poll_progress(stalled)
    assert policy_patches(kube) == [{"annotations": {"distml.dev/suspended-by": "dtr-operator"}, "suspend": True}]
    assert [e[:2] for e in events] == [("Warning", "Stalled"), ("Warning", "StallRestart")]
    assert "restart 1 of 3" in events[1][2]
    [write] = status_writes(kube)
    assert write["watchdog"]["restarts"] == 1 and write["watchdog"]["restarting"] is True
    # The TFJob says it is suspended: the operator resumes it (once) and forgets the pending restart.
    run = suspended(kube)
    tfjob = {"metadata": {"name": "mnist-cnn", "namespace": "ml", "ownerReferences": [
        {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "name": "mnist-cnn", "uid": "u-1",
         "controller": True}]}, "spec": {"runPolicy": {"suspend": True}},
        "status": {"conditions": [{"type": "Suspended", "status": "True"}]}}  # fmt: skip
    rec.tfjob_event("MODIFIED", tfjob, cached_run=lambda namespace, name: run)
    assert policy_patches(kube)[-1] == {"annotations": {"distml.dev/suspended-by": None}, "suspend": False}
    assert status_writes(kube)[1]["watchdog"]["restarting"] is False  # named: the status write is a merge patch


def test_a_restart_whose_suspend_failed_is_suspended_by_the_next_poll_not_left_pending_forever():
    """The restart is recorded (restarting), then the suspend fails (the training-operator's webhook timing out
    under load): nothing would ever resume the run, its poll only waiting for a suspended TFJob. The next poll
    suspends it (CI-like runs of 3ed32af: no StallRestart in 195 s, the workers never restarted)."""
    stalled = body(seen(running(), [(1, 300), (2, 362), (3, 424)]), onStall="Restart")
    kube = api(STALLED_LOGS, stalled)
    kube.fail("patch_tfjob_run_policy", ApiError(500, "InternalError", "failed calling webhook: context deadline"))
    rec, events = poller(kube, at(424 + 400))
    rec.poll_progress(stalled)
    assert policy_patches(kube) == [] and [e[:2] for e in events] == [("Warning", "Stalled")]
    [write] = status_writes(kube)
    assert write["watchdog"]["restarting"] is True
    run = kube.stored(KIND, "mnist-cnn")
    assert run is not None
    rec.poll_progress(run)
    assert policy_patches(kube) == [{"annotations": {"distml.dev/suspended-by": "dtr-operator"}, "suspend": True}]
    assert [e[:2] for e in events] == [("Warning", "Stalled"), ("Warning", "StallRestart")]
    assert "restart 1 of 3" in events[1][2]
    rec.poll_progress(run)  # the TFJob asks to be suspended: the training-operator's turn, nothing again
    assert len(policy_patches(kube)) == 1


def test_a_suspend_is_missing_only_while_the_tfjob_has_not_been_suspended_since_the_flag():
    flagged = {"phase": "Running", "watchdog": {"restarting": True, "restarts": 2},
               "conditions": [{"type": "Stalled", "status": "True", "lastTransitionTime": at(600)}]}  # fmt: skip

    def tfjob(suspend: bool = False, moved: float | None = None) -> dict[str, Any]:
        conds = [] if moved is None else [{"type": "Suspended", "status": "False", "lastTransitionTime": at(moved)}]
        return {"spec": {"runPolicy": {"suspend": suspend}}, "status": {"conditions": conds}}

    assert watchdog.suspend_missing(flagged, tfjob())
    assert watchdog.suspend_missing(flagged, tfjob(moved=300)), "resumed after the first restart, not since"
    assert not watchdog.suspend_missing(flagged, tfjob(moved=600)), "suspended (and resumed) since"
    assert not watchdog.suspend_missing(flagged, tfjob(suspend=True)), "asked: the training-operator's turn"
    assert not watchdog.suspend_missing({**flagged, "watchdog": {"restarting": False}}, tfjob()), "none pending"


def test_a_resume_whose_record_failed_is_recorded_by_the_next_poll_not_left_restarting():
    """The TFJob suspended for the restart is resumed, then the record of it (restarting: false) fails: the
    training-operator resumes the workers, and the run would stay `restarting`, its progress never read again. The
    next poll sees the TFJob resumed since the flag and records it."""
    stalled = body(seen(running(), [(1, 300), (2, 362), (3, 424)]), onStall="Restart")
    kube = api(STALLED_LOGS, stalled)
    rec, _ = poller(kube, at(424 + 400))
    rec.poll_progress(stalled)
    run = suspended(kube)
    kube.fail("patch_run_status", ApiError(500, "InternalError", "etcdserver: request timed out"))
    rec.poll_progress(run)
    assert policy_patches(kube)[-1] == {"annotations": {"distml.dev/suspended-by": None}, "suspend": False}
    run = kube.stored(KIND, "mnist-cnn")
    assert run is not None and run["status"]["watchdog"]["restarting"] is True, "the record failed"
    tfjob = kube.stored("TFJob", "mnist-cnn")
    assert tfjob is not None and tfjob["spec"]["runPolicy"]["suspend"] is False
    resumed = [{"type": "Suspended", "status": "False", "lastTransitionTime": at(424 + 460)}]
    kube.put({**tfjob, "status": {"conditions": resumed}})  # the training-operator's part
    rec.poll_progress(run)
    run = kube.stored(KIND, "mnist-cnn")
    assert run is not None and run["status"]["watchdog"]["restarting"] is False
    assert len(policy_patches(kube)) == 2, "nothing suspended or resumed again"


def test_a_resume_is_unrecorded_only_while_the_tfjob_has_been_resumed_since_the_flag():
    flagged = {"phase": "Running", "watchdog": {"restarting": True, "restarts": 1},
               "conditions": [{"type": "Stalled", "status": "True", "lastTransitionTime": at(600)}]}  # fmt: skip

    def tfjob(suspend: bool = False, status: str = "False", moved: float | None = 660) -> dict[str, Any]:
        conds = [] if moved is None else [{"type": "Suspended", "status": status, "lastTransitionTime": at(moved)}]
        return {"spec": {"runPolicy": {"suspend": suspend}}, "status": {"conditions": conds}}

    assert watchdog.resume_unrecorded(flagged, tfjob())
    assert not watchdog.resume_unrecorded(flagged, tfjob(moved=300)), "resumed after an earlier restart, not since"
    assert not watchdog.resume_unrecorded(flagged, tfjob(moved=None)), "never suspended: suspend_missing's case"
    assert not watchdog.resume_unrecorded(flagged, tfjob(status="True")), "still suspended: the resume's turn"
    assert not watchdog.resume_unrecorded(flagged, tfjob(suspend=True)), "asked to suspend"
    assert not watchdog.resume_unrecorded({**flagged, "watchdog": {"restarting": False}}, tfjob()), "recorded"


def test_a_tfjob_kueue_manages_without_the_runs_queue_name_is_reported_not_restarted():
    """Security review R10: Kueue's LocalQueue defaulting labels the TFJob of a run that names no queue; suspending
    and resuming it would fight Kueue over an admitted workload, so its stall is reported only."""
    stalled = body(seen(running(), [(1, 300), (2, 362), (3, 424)]), onStall="Restart")
    kube = api(STALLED_LOGS, stalled)
    job = kube.stored("TFJob", "mnist-cnn")
    job["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "default"
    kube.put(job)
    rec, events = poller(kube, at(424 + 400))
    rec.poll_progress(stalled)
    assert policy_patches(kube) == [], "no suspend of a TFJob Kueue manages"
    assert [e[:2] for e in events] == [("Warning", "Stalled")]
    assert "Kueue's queue default manages the TFJob" in events[0][2]
    [write] = status_writes(kube)
    assert "restarts" not in write["watchdog"] and not write["watchdog"].get("restarting")


def test_a_restart_resumes_only_once_the_old_pods_are_gone_and_the_poll_does_it():
    """The training-operator counts an old pod its deletion failed (the frozen worker's, killed after its grace
    period) against the resumed TFJob, which then fails: seen on the real node."""
    stalled = body(seen(running(), [(1, 300), (2, 362), (3, 424)]), onStall="Restart")
    kube = api(STALLED_LOGS, stalled)
    rec, _ = poller(kube, at(424 + 400))
    rec.poll_progress(stalled)
    assert len(status_writes(kube)) == 1
    run = suspended(kube)
    old = {"metadata": {"name": "mnist-cnn-worker-1", "deletionTimestamp": "2026-12-01T12:20:00Z",
                        "ownerReferences": controlled_by(),
                        "labels": {"training.kubeflow.org/job-name": "mnist-cnn"}}}  # fmt: skip
    kube.put(old, "Pod")
    rec.poll_progress(run)
    assert policy_patches(kube)[-1]["suspend"] is True, "resumed while an old pod is still there"
    kube.delete_pod("ml", "mnist-cnn-worker-1")  # the kubelet's part: the pod is gone at last
    rec.poll_progress(run)
    assert policy_patches(kube)[-1] == {"annotations": {"distml.dev/suspended-by": None}, "suspend": False}
    assert [w["watchdog"]["restarting"] for w in status_writes(kube)[1:] if "watchdog" in w] == [False]


def test_no_restart_left_fails_the_run_and_suspends_its_tfjob():
    status = seen(running(), [(1, 300), (2, 362), (3, 424)])
    status["watchdog"]["restarts"] = 1
    run = body(status, onStall="Restart", maxRestarts=1)
    kube = api(STALLED_LOGS, run)
    rec, events = poller(kube, at(424 + 400))
    rec.poll_progress(run)
    [write] = status_writes(kube)
    assert (write["phase"], write["reason"]) == ("Failed", "Stalled")
    assert "spec.watchdog.maxRestarts" in write["message"]
    assert [c["status"] for c in write["conditions"] if c["type"] in ("Stalled", "Failed")] == ["True", "True"]
    assert events == [("Warning", "Stalled", write["message"])]
    assert policy_patches(kube) == [{"annotations": {"distml.dev/suspended-by": "dtr-operator"}, "suspend": True}]


def test_an_epoch_after_the_stall_clears_it_with_one_write_each():
    stalled = seen(running(), [(1, 300), (2, 362)])
    step = watchdog.decide(watchdog.WatchdogSpec(min_stall_seconds=60), stalled, at(362 + 400))
    assert isinstance(step, watchdog.Flag)
    flagged = body(watchdog.flagged_status(stalled, step, "m", at(362 + 400), 1))
    kube = api({"mnist-cnn-worker-0": CHIEF_LOG}, flagged)
    rec, events = poller(kube, at(362 + 500))
    rec.poll_progress(flagged)
    assert status_writes(kube)[0]["watchdog"]["lastEpoch"] == 3  # the epoch, with status.progress
    [cond] = [c for c in status_writes(kube)[1]["conditions"] if c["type"] == "Stalled"]
    assert (cond["status"], cond["reason"]) == ("False", "EpochFinished")
    assert [e[:2] for e in events] == [("Normal", "StallEnded")]
    assert len(status_writes(kube)) == 2


def test_dtr_run_does_not_print_the_heartbeat():
    import io

    from dtr_client.local.console import Console
    from dtr_contract.progress import HEARTBEAT, is_heartbeat, trainer_line

    beat = trainer_line("worker-1", HEARTBEAT)
    assert is_heartbeat(beat) and not is_heartbeat(trainer_line("worker-1", "epoch 1/2 begin"))
    out = io.StringIO()
    console = Console(out)
    console.replica_line("worker-1", beat)
    console.replica_line("worker-1", trainer_line("worker-1", "epoch 1/2 begin"))
    assert out.getvalue() == "[worker-1] dtr_trainer[worker-1]: epoch 1/2 begin\n"


def test_a_run_that_succeeds_while_stalled_ends_not_stalled_and_a_failed_one_stays_stalled():
    status = stalled_run()
    step = watchdog.decide(WatchdogSpec(min_stall_seconds=60), status, at(1200))
    assert isinstance(step, Flag)
    flagged = watchdog.flagged_status(status, step, "m", at(1200), 1)
    done = watchdog.settled({**flagged, "phase": "Succeeded", "reason": "TrainingSucceeded"}, at(1300), 1)
    assert not watchdog.is_stalled(done)
    assert watchdog.condition(done, "Stalled")["reason"] == "TrainingSucceeded"  # type: ignore[index]
    assert watchdog.is_stalled(watchdog.settled({**flagged, "phase": "Failed"}, at(1300), 1))
