"""status/: TFJob (+ pods) -> run status; every TFJob condition, summaries, conditions' times."""

from __future__ import annotations

import json

import pytest
from dtr_operator import reasons
from dtr_operator.spec import parse_run
from dtr_operator.status.compute import next_status, state_status, tfjob_status
from dtr_operator.status.conditions import set_condition
from dtr_operator.status.pods import disrupted_workers, failed_workers, gone_worker, stuck_workers
from dtr_operator.status.state import MAX_MESSAGE, State
from dtr_operator.status.summary import parse_summary, storage_uri
from dtr_operator.status.waiting import waiting_status, waits_for_pods, workers_short

from support.runs import make_run
from support.tfjobs import (
    CONDITIONS,
    DONE_PODS,
    QUEUED_RUN,
    RUN,
    SCHEDULER,
    SHORT_PODS,
    SUMMARY,
    SUSPENDED_RUN,
    T0,
    T1,
    T2,
    cond,
    disrupted,
    pod,
    tfjob,
    waiting_pod,
)


@pytest.mark.parametrize(("conditions", "phase", "reason", "counts"), CONDITIONS)
def test_phase_follows_every_tfjob_condition(conditions, phase, reason, counts):
    job = tfjob(conditions, **counts)
    pods = DONE_PODS if phase == "Succeeded" else []
    status = tfjob_status(RUN, job, pods, {}, T1)
    assert status["phase"] == phase
    assert status["reason"] == reason
    assert status["observedGeneration"] == 1
    assert status["tfJob"] == "mnist-cnn" and status["pvc"] == "mnist-cnn-data"
    by_type = {c["type"]: c for c in status["conditions"]}
    assert [c["type"] for c in status["conditions"]] == ["Created", "Running", "Suspended", "Succeeded", "Failed"]
    assert by_type["Created"]["status"] == "True"
    for type_ in ("Running", "Succeeded", "Failed"):
        assert by_type[type_]["status"] == ("True" if phase == type_ else "False")
        assert by_type[type_]["reason"] == reason
        assert by_type[type_]["lastTransitionTime"] == T1
        assert by_type[type_]["message"] == (status["message"] if phase == type_ else "")
    expected_workers = {"active": 0, "succeeded": 0, "failed": 0, **counts}
    assert status["workers"] == expected_workers
    assert status["workersReady"] == f"{expected_workers['active'] + expected_workers['succeeded']}/2"


def test_tfjob_messages_are_carried_over():
    job = tfjob([cond("Created"), cond("Failed", message="TFJob ml/mnist-cnn has failed because it has "
                                                         "reached the specified backoff limit")])
    status = tfjob_status(RUN, job, [], {}, T1)
    assert status["message"].startswith("TFJob ml/mnist-cnn has failed because it has reached")


def test_success_reads_the_chief_summary():
    job = tfjob([cond("Created"), cond("Succeeded")], succeeded=2, start=T0, completion=T2)
    status = tfjob_status(RUN, job, list(reversed(DONE_PODS)), {}, T2)
    assert status["phase"] == "Succeeded" and status["reason"] == "TrainingSucceeded"
    assert status["metrics"] == {"loss": 0.07, "accuracy": 0.98, "examplesPerSecond": 5400.0, "epochs": 3}
    assert status["model"] == {"path": "/mnt/dtr/models/mnist-cnn/1", "claim": "mnist-cnn-data", "version": 1,
                               "storageUri": "pvc://mnist-cnn-data/models/mnist-cnn"}  # fmt: skip
    assert status["startTime"] == T0 and status["completionTime"] == T2
    assert status["message"] == "accuracy 0.9800, model exported to /mnt/dtr/models/mnist-cnn/1"
    assert status["workersReady"] == "2/2"


def test_a_run_a_callback_stopped_early_says_so_and_where_its_progress_ended():
    reason = "EarlyStopping: val_loss did not improve for 2 epoch(s); best 0.2931 at epoch 1 (its weights restored)"
    early = {**SUMMARY, "stoppedEarly": {"epoch": 2, "epochs": 3, "reason": reason}}
    job = tfjob([cond("Created"), cond("Succeeded")], succeeded=2, start=T0, completion=T2)
    previous = {"phase": "Running", "progress": {"epoch": 2, "epochs": 3, "epochsDone": "2/3", "metrics": []}}
    status = tfjob_status(RUN, job, [pod(0, 0, json.dumps(early)), pod(1, 0, None)], previous, T2)
    assert status["phase"] == "Succeeded" and status["reason"] == "TrainingSucceeded"
    assert status["message"] == (f"accuracy 0.9800, model exported to /mnt/dtr/models/mnist-cnn/1; stopped early at "
                                 f"epoch 2 of 3: {reason}")
    assert (status["progress"]["epochsDone"], status["progress"]["epoch"]) == ("2/3", 2)
    assert status["progress"]["estimatedRemainingSeconds"] == 0
    ran_out = tfjob_status(RUN, job, DONE_PODS, previous, T2)
    assert ran_out["progress"]["epochsDone"] == "3/3" and "stopped early" not in ran_out["message"]


def test_summary_model_claim_is_the_existing_claim():
    run = parse_run(make_run({"storage": {"claimName": "shared"}}, uid="u"))
    status = tfjob_status(run, tfjob([cond("Succeeded")], succeeded=2), DONE_PODS, {}, T1)
    assert status["model"]["claim"] == "shared" and status["pvc"] == "shared"


# (chief termination message, the problem mentioned in the message)
BAD_SUMMARIES = [
    (None, "no termination message"),
    ("", "no termination message"),
    ("   \n", "no termination message"),
    ("Epoch 3/3 done", "not a JSON object"),
    ("[1, 2]", "not a JSON object"),
    ('"text"', "not a JSON object"),
    (json.dumps({"loss": 0.1}), "lacks modelPath"),
    (json.dumps({"accuracy": 0.9}), "lacks modelPath"),
    (json.dumps({"modelPath": "/mnt/dtr/models/m/1"}), "lacks its headline metric loss"),
    (json.dumps({"loss": 0.1, "metric": "mae", "metrics": {"loss": 0.1}, "modelPath": "/mnt/dtr/models/m/1"}),
     "lacks its headline metric mae"),
    (json.dumps({"metric": "mae"}), "lacks its headline metric mae and modelPath"),
]


@pytest.mark.parametrize(("message", "problem"), BAD_SUMMARIES)
def test_success_without_a_usable_summary_says_so(message, problem):
    pods = [pod(0, 0, message), pod(1, 0)]
    status = tfjob_status(RUN, tfjob([cond("Succeeded")], succeeded=2), pods, {}, T1)
    assert status["phase"] == "Succeeded"
    assert status["reason"] == "MetricsUnavailable"
    assert problem in status["message"]
    assert "model" not in status or "accuracy" not in status.get("metrics", {})


def test_success_without_a_chief_pod_says_so():
    status = tfjob_status(RUN, tfjob([cond("Succeeded")], succeeded=2), [pod(1, 0)], {}, T1)
    assert status["reason"] == "MetricsUnavailable" and "no termination message" in status["message"]
    assert "metrics" not in status


def test_summary_after_log_lines_is_found():
    message = "some log line\n" + json.dumps(SUMMARY)
    summary = parse_summary(message, "c")
    assert summary.problem is None and summary.metrics["accuracy"] == 0.98


def test_summary_ignores_wrongly_typed_values():
    summary = parse_summary(json.dumps({**SUMMARY, "loss": "low", "epochs": True, "modelVersion": "1"}), "c")
    assert "loss" not in summary.metrics and "epochs" not in summary.metrics
    assert summary.model == {"path": SUMMARY["modelPath"], "claim": "c", "storageUri": "pvc://c/models/mnist-cnn"}


def test_a_version_published_in_a_bucket_gives_its_uri_and_the_versions_directory():
    message = json.dumps({**SUMMARY, "modelPath": "s3://models/team/mnist-cnn/4", "modelVersion": 4})
    summary = parse_summary(message, "c")
    assert summary.problem is None
    assert summary.model == {"path": "s3://models/team/mnist-cnn/4", "claim": "c", "version": 4,
                             "storageUri": "s3://models/team/mnist-cnn"}  # fmt: skip


def test_failure_names_the_failed_workers():
    pods = [
        pod(0, running=True, last_exit=137, last_message="Killed"),
        pod(1, 2, "Traceback (most recent call last):\n  ...\nValueError: unknown dataset"),
    ]
    job = tfjob([cond("Created"),
                 cond("Failed", message="TFJob ml/mnist-cnn has failed because 1 Worker replica(s) failed.")])
    status = tfjob_status(RUN, job, pods, {}, T1)
    assert status["phase"] == "Failed"
    assert "worker mnist-cnn-worker-0 exited with code 137: Killed" in status["message"]
    assert "worker mnist-cnn-worker-1 exited with code 2: ValueError: unknown dataset" in status["message"]
    assert "metrics" not in status


@pytest.mark.parametrize(("reason", "words"), [
    ("EvictionByEvictionAPI", "evicted through the Eviction API (kubectl drain"),  # measured: a drained node
    ("DeletionByTaintManager", "deleted by the taint manager: its node has a NoExecute taint"),  # a node lost
    ("SomethingNew", "disrupted (SomethingNew): a future reason"),
])  # fmt: skip
def test_failure_names_the_node_of_a_worker_kubernetes_took_away(reason, words):
    # Seen with 3 nodes: a drained worker failed the TFJob before its container's exit was reported, and the
    # status said only "1 Worker replica(s) failed".
    pods = [pod(0, running=True), disrupted(1, reason, "a future reason", running=True)]
    job = tfjob([cond("Created"),
                 cond("Failed", message="TFJob ml/mnist-cnn has failed because 1 Worker replica(s) failed.")])
    message = tfjob_status(RUN, job, pods, {}, T1)["message"]
    assert f"worker mnist-cnn-worker-1 on node dtr-n2 {words}" in message, message


def event(reason, message):
    return {"reason": reason, "message": message, "involvedObject": {"kind": "Pod", "name": "mnist-cnn-worker-1"}}


def test_a_worker_pod_gone_before_the_failure_is_named_with_its_node_from_its_events():
    # Seen with 3 nodes (a node powered off, then tainted out-of-service): the lost worker's pod was force-deleted
    # at once, its peer exited 138 and failed the TFJob; the status named only the peer.
    events = [event("Scheduled", "Successfully assigned ml/mnist-cnn-worker-1 to dtr-n1"),
              event("NodeNotReady", "Node is not ready"),
              event("TaintManagerEviction", "Marking for deletion Pod ml/mnist-cnn-worker-1"),
              event("TaintManagerEviction", "Cancelling deletion of Pod ml/mnist-cnn-worker-1")]
    gone = gone_worker("mnist-cnn-worker-1", events)
    grpc = "dtr_trainer[worker-0]: error: lost a peer or a collective timed out (UnavailableError: reset)"
    job = tfjob([cond("Created"),
                 cond("Failed", message="TFJob ml/mnist-cnn has failed because 1 Worker replica(s) failed.")])
    message = tfjob_status(RUN, job, [pod(0, 138, grpc)], {}, T1, gone=[gone])["message"]
    assert "worker mnist-cnn-worker-1 on node dtr-n1 deleted by the taint manager" in message, message
    assert message.index("worker-1") < message.index("worker-0"), "the lost worker first, then the peer that lost it"


def test_a_gone_worker_whose_events_tell_of_no_taint_manager_deletion_is_not_made_up():
    assert gone_worker("w", [event("Scheduled", "Successfully assigned ml/w to dtr-n1")]) is None
    assert gone_worker("w", []) is None
    no_node = gone_worker("w", [event("TaintManagerEviction", "Marking for deletion Pod ml/w")])
    assert disrupted_workers([no_node]) == ["worker w on node no node deleted by the taint manager: its node has "
                                               "a NoExecute taint (NotReady, unreachable or out of service)"]


def test_a_worker_not_disrupted_has_no_such_line():
    calm = pod(1, running=True)
    calm["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "False", "reason": "EvictionByEvictionAPI"}]
    assert disrupted_workers([pod(0, running=True), calm]) == []


def test_failure_names_the_killed_worker_before_the_peer_that_lost_it():
    # Seen on the real node: worker-1 SIGKILLed (137), worker-0 then exits 138 with a long gRPC error.
    grpc = "dtr_trainer[worker-0]: error: lost a peer or a collective timed out (UnavailableError: " + "x" * 400
    pods = [pod(0, 138, grpc), pod(1, 137, "epoch 1/5 end")]
    job = tfjob([cond("Created"),
                 cond("Failed", message="TFJob ml/mnist-cnn has failed because 1 Worker replica(s) failed.")])
    message = tfjob_status(RUN, job, pods, {}, T1)["message"]
    assert "worker mnist-cnn-worker-1 exited with code 137" in message
    assert message.index("worker-1") < message.index("worker-0"), message


def test_a_kill_at_the_backoff_limit_does_not_hide_the_permanent_error_before_it():
    # Seen with `dtr run examples/mnist.yaml` offline: each worker exits 5, is restarted under OnFailure,
    # and is killed (143) when the TFJob reaches its backoff limit; the status named only the 143.
    offline = "dtr_trainer[worker-{}]: error: cannot download mnist: use --dataset digits or synthetic (offline)"
    pods = [pod(i, 143, "", last_exit=5, last_message=offline.format(i)) for i in (0, 1)]
    job = tfjob([cond("Created"), cond("Failed", reason="BackoffLimitExceeded",
                                       message="TFJob ml/mnist-cnn has failed because it has reached "
                                               "the specified backoff limit")])  # fmt: skip
    message = tfjob_status(RUN, job, pods, {}, T1)["message"]
    cause = "worker mnist-cnn-worker-0 exited with code 5: dtr_trainer[worker-0]: error: cannot download mnist"
    assert cause in message
    assert "143" not in message, message


def test_failed_workers_in_the_order_they_finished():
    first, second = pod(1, 2, "ValueError: a"), pod(0, 3, "ValueError: b")
    first["status"]["containerStatuses"][1]["state"]["terminated"]["finishedAt"] = "2026-01-01T00:00:01Z"
    second["status"]["containerStatuses"][1]["state"]["terminated"]["finishedAt"] = "2026-01-01T00:00:02Z"
    lines = failed_workers([second, first])
    assert [line.split()[1] for line in lines] == ["mnist-cnn-worker-1", "mnist-cnn-worker-0"]


def test_long_messages_are_bounded_to_one_line():
    long = "x" * 2000 + "\nsecond line"
    job = tfjob([cond("Failed", message=long)])
    status = tfjob_status(RUN, job, [pod(i, 1, long) for i in range(20)], {}, T1)
    assert len(status["message"]) <= MAX_MESSAGE and "\n" not in status["message"]


def test_last_transition_time_only_moves_when_status_changes():
    running = tfjob([cond("Created"), cond("Running")], active=2)
    first = tfjob_status(RUN, running, [], {}, T1)
    again = tfjob_status(RUN, running, [], first, T2)
    assert again == first  # nothing changed, so nothing moved
    assert next_status(first, again) is None
    restarting = tfjob([cond("Created"), cond("Restarting")], active=1)
    third = tfjob_status(RUN, restarting, [], again, T2)
    by_type = {c["type"]: c for c in third["conditions"]}
    assert by_type["Running"]["status"] == "True" and by_type["Running"]["lastTransitionTime"] == T1
    assert by_type["Running"]["reason"] == "TFJobRestarting"
    assert by_type["Created"]["lastTransitionTime"] == T1
    assert by_type["Failed"]["lastTransitionTime"] == T1
    done = tfjob_status(RUN, tfjob([cond("Succeeded")], succeeded=2), DONE_PODS, third, T2)
    by_type = {c["type"]: c for c in done["conditions"]}
    assert by_type["Running"]["status"] == "False" and by_type["Running"]["lastTransitionTime"] == T2
    assert by_type["Succeeded"]["status"] == "True" and by_type["Succeeded"]["lastTransitionTime"] == T2


def test_waiting_states_before_the_tfjob_exists():
    state = State(reasons.PENDING, reasons.WAITING_FOR_PVC, "waiting for PVC shared in namespace ml")
    status = state_status(RUN, state, {}, T1)
    assert status["phase"] == "Pending" and status["reason"] == "WaitingForPVC"
    assert status["workersReady"] == "0/2"
    created = next(c for c in status["conditions"] if c["type"] == "Created")
    assert created == {
        "type": "Created",
        "status": "False",
        "reason": "WaitingForPVC",
        "message": "waiting for PVC shared in namespace ml",
        "lastTransitionTime": T1,
        "observedGeneration": 1,
    }


def test_terminal_status_never_regresses():
    done = tfjob_status(RUN, tfjob([cond("Succeeded")], succeeded=2), DONE_PODS, {}, T1)
    assert next_status(done, tfjob_status(RUN, tfjob([cond("Running")]), [], done, T2)) is None
    deleted = state_status(RUN, State(reasons.FAILED, reasons.TFJOB_DELETED, "gone"), done, T2)
    assert next_status(done, deleted) is None
    failed = state_status(RUN, State(reasons.FAILED, reasons.NAME_CONFLICT, "clash"), {}, T1)
    assert next_status(failed, tfjob_status(RUN, tfjob([cond("Running")]), [], failed, T2)) is None


def test_next_status_writes_only_what_changed():
    first = tfjob_status(RUN, tfjob([cond("Created")]), [], {}, T1)
    assert next_status({}, first) == first
    assert next_status(None, first) == first
    running = tfjob_status(RUN, tfjob([cond("Running")], active=2), [], first, T2)
    patch = next_status(first, running)
    assert patch["phase"] == "Running" and "tfJob" not in patch and "pvc" not in patch


# ---- worker pods that cannot start (waiting_status) ----------------------------------------------


def created_status():
    return tfjob_status(RUN, tfjob([cond("Created")]), [], {}, T1)


def test_a_wrong_image_makes_a_waiting_run_say_its_pods_cannot_start():
    pulled = 'Back-off pulling image "localhost/distml/trainer:0.2.0": ErrImagePull: not found'
    pods = [waiting_pod(1, "ImagePullBackOff", pulled), waiting_pod(0, "ImagePullBackOff", pulled)]
    status = waiting_status(RUN, pods, created_status(), T2)
    assert (status["phase"], status["reason"]) == ("Pending", "WorkerPodsNotStarting")
    assert status["message"].startswith(
        "worker pods cannot start: worker mnist-cnn-worker-0 cannot start: ImagePullBackOff"
    )
    assert "localhost/distml/trainer:0.2.0" in status["message"]
    assert len(status["message"]) <= MAX_MESSAGE


def test_an_unschedulable_pod_is_named_with_the_schedulers_reason():
    why = "0/1 nodes are available: 1 Insufficient cpu."
    status = waiting_status(RUN, [waiting_pod(0, unschedulable=why)], created_status(), T2)
    assert status["reason"] == "WorkerPodsNotStarting"
    assert ("worker mnist-cnn-worker-0 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu."
            in status["message"])


def test_a_stuck_pod_without_a_message_is_one_line_by_its_reason_and_not_also_unschedulable():
    pods = [waiting_pod(1, "CreateContainerConfigError", unschedulable="x"), waiting_pod(0, unschedulable="0/1 nodes")]
    assert stuck_workers(pods) == [
        "worker mnist-cnn-worker-0 cannot be scheduled: 0/1 nodes",
        "worker mnist-cnn-worker-1 cannot start: CreateContainerConfigError",
    ]


def test_pods_merely_starting_leave_the_status_alone():
    previous = created_status()
    pods = [waiting_pod(0, "ContainerCreating"), waiting_pod(1)]
    assert next_status(previous, waiting_status(RUN, pods, previous, T2)) is None


def test_pods_that_start_after_all_clear_the_reason():
    stuck = waiting_status(RUN, [waiting_pod(0, "ErrImagePull", "x")], created_status(), T2)
    cleared = waiting_status(RUN, [waiting_pod(0, "ContainerCreating")], stuck, T2)
    assert (cleared["reason"], cleared["message"]) == (
        "TFJobCreated", "TFJob mnist-cnn created, waiting for its worker pods to run"
    )


def test_waiting_status_never_touches_a_run_past_waiting():
    running = tfjob_status(RUN, tfjob([cond("Created"), cond("Running")], active=2), [], {}, T1)
    assert waiting_status(RUN, [waiting_pod(0, "ErrImagePull", "x")], running, T2) == running


def test_a_tfjob_event_that_says_nothing_new_keeps_the_pods_trouble():
    stuck = waiting_status(RUN, [waiting_pod(0, "ErrImagePull", "x")], created_status(), T2)
    again = tfjob_status(RUN, tfjob([cond("Created")]), [], stuck, T2)
    assert next_status(stuck, again) is None
    running = tfjob_status(RUN, tfjob([cond("Created"), cond("Running")], active=2), [], stuck, T2)
    assert running["reason"] == "TFJobRunning"


# ---- a Running run short of workers (waiting_status, workers_short) --------------------------------



def running_short():
    """The TFJob runs (one worker does), the other worker is Pending."""
    return tfjob_status(RUN, tfjob([cond("Created"), cond("Running")], active=1), [], created_status(), T1)


def test_a_running_run_whose_worker_cannot_be_scheduled_says_so_and_stays_running():
    short = running_short()
    assert (short["phase"], short["reason"], short["workersReady"]) == ("Running", "TFJobRunning", "1/2")
    status = waiting_status(RUN, SHORT_PODS, short, T2)
    assert (status["phase"], status["reason"], status["workersReady"]) == ("Running", "WorkersNotAllRunning", "1/2")
    assert status["message"] == ("1 of 2 workers run; training waits for all (MultiWorkerMirroredStrategy): worker "
                                 f"mnist-cnn-worker-1 cannot be scheduled: {SCHEDULER}")  # fmt: skip
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    assert (running["status"], running["reason"], running["lastTransitionTime"]) == ("True", "WorkersNotAllRunning", T1)
    assert reasons.WORKERS_NOT_ALL_RUNNING in {r.name for r in reasons.REASONS if r.phase == "Running" and r.warning}


def test_a_short_run_also_names_a_worker_that_cannot_start_or_be_created():
    pods = [pod(0, running=True), waiting_pod(1, "ErrImagePull", "not found")]
    status = waiting_status(RUN, pods, running_short(), T2, ["the training-operator cannot create them: quota"])
    assert status["message"].endswith(
        "(MultiWorkerMirroredStrategy): the training-operator cannot create them: quota; "
        "worker mnist-cnn-worker-1 cannot start: ErrImagePull: not found")


def test_a_worker_merely_starting_leaves_a_short_run_alone():
    short = running_short()
    pods = [pod(0, running=True), waiting_pod(1, "ContainerCreating")]
    assert next_status(short, waiting_status(RUN, pods, short, T2)) is None


def test_the_tfjobs_running_updates_keep_the_explanation_until_every_worker_runs():
    stuck = waiting_status(RUN, SHORT_PODS, running_short(), T2)
    again = tfjob_status(RUN, tfjob([cond("Created"), cond("Running")], active=1), [], stuck, T2)
    assert next_status(stuck, again) is None, "the TFJob says nothing new: the cause still holds"
    all_run = tfjob_status(RUN, tfjob([cond("Created"), cond("Running")], active=2), [], stuck, T2)
    assert (all_run["phase"], all_run["reason"], all_run["workersReady"]) == ("Running", "TFJobRunning", "2/2")
    assert all_run["message"] == "TFJob mnist-cnn is running"


def test_a_short_run_whose_cause_is_gone_is_tfjob_running_again():
    stuck = waiting_status(RUN, SHORT_PODS, running_short(), T2)
    cleared = waiting_status(RUN, [pod(0, running=True), waiting_pod(1, "ContainerCreating")], stuck, T2)
    assert (cleared["phase"], cleared["reason"], cleared["message"]) == (
        "Running", "TFJobRunning", "TFJob mnist-cnn is running")


def test_a_stalled_short_run_keeps_the_watchdogs_message_and_its_running_condition_says_why():
    short = running_short()
    stalled = {**short, "message": "Stalled: no epoch finished for 600 s",
               "conditions": set_condition(short["conditions"], "Stalled", True, "NoEpochProgress", "x", T1, 1)}
    status = waiting_status(RUN, SHORT_PODS, stalled, T2)
    assert (status["reason"], status["message"]) == ("WorkersNotAllRunning", "Stalled: no epoch finished for 600 s")
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    assert running["message"].startswith("1 of 2 workers run")


@pytest.mark.parametrize(
    ("status", "short"),
    [
        ({"phase": "Running", "reason": "TFJobRunning", "workersReady": "1/2"}, (1, 2)),
        ({"phase": "Running", "reason": "WorkersNotAllRunning", "workersReady": "0/3"}, (0, 3)),
        ({"phase": "Running", "reason": "TFJobRunning", "workersReady": "2/2"}, None),
        ({"phase": "Running", "reason": "TFJobRestarting", "workersReady": "1/2"}, None),
        ({"phase": "Running", "reason": "TFJobRunning"}, None),
        ({"phase": "Running", "reason": "TFJobRunning", "workersReady": "one/2"}, None),
        ({"phase": "Succeeded", "reason": "TFJobRunning", "workersReady": "1/2"}, None),
        ({"phase": "Pending", "reason": "TFJobCreated", "workersReady": "0/2"}, None),
    ],
)
def test_a_run_is_short_of_workers_only_while_the_tfjob_runs_with_fewer_than_all(status, short):
    assert workers_short(status) == short
    assert waits_for_pods(status) == (short is not None or status["phase"] == "Pending")


def test_a_finished_run_never_goes_back_to_waiting_for_a_worker():
    stuck = waiting_status(RUN, SHORT_PODS, running_short(), T2)
    done = tfjob_status(RUN, tfjob([cond("Created"), cond("Succeeded")], succeeded=2), DONE_PODS, stuck, T2)
    assert done["phase"] == "Succeeded"
    assert waiting_status(RUN, SHORT_PODS, done, T2) == done
    assert next_status(done, {**stuck, "phase": "Running"}) is None
    failed = tfjob_status(RUN, tfjob([cond("Created"), cond("Failed")], active=1, failed=1), [], stuck, T2)
    assert (failed["phase"], failed["reason"]) == ("Failed", "TFJobFailed")


@pytest.mark.parametrize(
    ("path", "uri"),
    [
        ("/mnt/dtr/models/digits-cnn/3", "pvc://claim/models/digits-cnn"),
        ("/mnt/dtr/models/digits-cnn/3/", "pvc://claim/models/digits-cnn"),
        ("/mnt/dtr/x/y/z/12", "pvc://claim/x/y/z"),
        ("/elsewhere/models/m/1", None),
        ("/mnt/dtr/models/m/latest", None),
        ("/mnt/dtrx/models/m/1", None),
        # published in a bucket: the versions' directory there, as for the volume
        ("s3://models/team/digits-cnn/3", "s3://models/team/digits-cnn"),
        ("s3://models/3", "s3://models"),
        ("s3://models/team/digits-cnn", None),
        ("s3://models/team/digits-cnn/latest", None),
        ("s3://x/team/1", None),
    ],
)
def test_storage_uri_is_the_versions_base_directory_on_the_claim(path, uri):
    assert storage_uri("claim", path) == uri


# ---- suspend and queues ------------------------------------------------------------------------

WAS_RUNNING = {"phase": "Running", "progress": {"epochsDone": "3/8"}}


def test_a_suspended_run_says_so_with_its_last_epoch_and_how_to_resume():
    status = tfjob_status(SUSPENDED_RUN, tfjob([cond("Created"), cond("Suspended")]), [], WAS_RUNNING, T1)
    assert (status["phase"], status["reason"]) == ("Suspended", "RunSuspended")
    assert "3/8" in status["message"] and '"suspend":false' in status["message"]
    conds = {c["type"]: c["status"] for c in status["conditions"]}
    assert conds == {"Created": "True", "Running": "False", "Suspended": "True", "Succeeded": "False",
                     "Failed": "False"}  # fmt: skip


def test_suspending_while_the_tfjob_still_runs():
    status = tfjob_status(SUSPENDED_RUN, tfjob([cond("Created"), cond("Running")], active=2), [], WAS_RUNNING, T1)
    assert (status["phase"], status["reason"]) == ("Suspended", "Suspending")


def test_resuming_is_pending_until_the_tfjob_runs_again():
    previous = {"phase": "Suspended", "reason": "RunSuspended"}
    status = tfjob_status(RUN, tfjob([cond("Created"), cond("Suspended")]), [], previous, T1)
    assert (status["phase"], status["reason"]) == ("Pending", "Resuming")
    still = tfjob_status(RUN, tfjob([cond("Created"), cond("Suspended")]), [], status, T2)
    assert (still["phase"], still["reason"]) == ("Pending", "Resuming"), "until the TFJob runs again"
    running = tfjob_status(RUN, tfjob([cond("Created"), cond("Running")], active=2), [], status, T2)
    assert (running["phase"], running["reason"]) == ("Running", "TFJobRunning")


def test_a_queued_run_waits_for_kueue_and_names_its_queue():
    status = tfjob_status(QUEUED_RUN, tfjob([cond("Created"), cond("Suspended")]), [], {}, T1)
    assert (status["phase"], status["reason"]) == ("Pending", "Queued")
    assert "team-a" in status["message"]


def test_a_queued_run_suspended_by_kueue_after_it_ran_is_preempted_with_its_last_epoch_until_readmitted():
    held = tfjob([cond("Created"), cond("Suspended")])
    status = tfjob_status(QUEUED_RUN, held, [], WAS_RUNNING, T1)
    assert (status["phase"], status["reason"]) == ("Suspended", "Preempted")
    assert "LocalQueue team-a" in status["message"] and "3/8" in status["message"]
    still = tfjob_status(QUEUED_RUN, held, [], status, T2)
    assert (still["phase"], still["reason"]) == ("Suspended", "Preempted"), "while Kueue holds it"
    again = tfjob_status(QUEUED_RUN, tfjob([cond("Created"), cond("Running")], active=2), [], still, T2)
    assert (again["phase"], again["reason"]) == ("Running", "TFJobRunning")
    never_ran = tfjob_status(QUEUED_RUN, held, [], {"phase": "Pending", "reason": "TFJobCreated"}, T1)
    assert never_ran["reason"] == "Queued", "admitted and taken back before any pod ran: queued, as before"


def test_a_tfjob_suspended_by_someone_else_stays_tfjob_suspended():
    status = tfjob_status(RUN, tfjob([cond("Created"), cond("Suspended")]), [], {"phase": "Running"}, T1)
    assert (status["phase"], status["reason"]) == ("Pending", "TFJobSuspended")


def test_suspend_never_changes_a_finished_tfjobs_outcome():
    done = tfjob([cond("Created"), cond("Failed", reason="BackoffLimitExceeded")])
    assert tfjob_status(SUSPENDED_RUN, done, [], WAS_RUNNING, T1)["phase"] == "Failed"


def test_an_oom_killed_worker_is_named_with_its_memory_limit():
    oom = {"metadata": {"name": "r-worker-1", "labels": {}},
           "status": {"containerStatuses": [{"name": "tensorflow", "state": {"terminated": {
               "exitCode": 137, "reason": "OOMKilled", "finishedAt": T1}}}]}}  # fmt: skip
    assert failed_workers([oom]) == [
        "worker r-worker-1 was OOMKilled (exit code 137): it went over its memory limit (spec.resources.limits.memory)"
    ]
