"""status/progress.py: the chief's log -> status.progress while Running, and what a finished run keeps."""

from __future__ import annotations

import json

from dtr_contract.progress import EpochEnd
from dtr_operator.spec import parse_run
from dtr_operator.status.compute import next_status, tfjob_status
from dtr_operator.status.pods import logs_an_error
from dtr_operator.status.progress import epoch_logged_at, parse_epoch_end, progress_of, running_progress

from support.runs import make_run
from support.tfjobs import CHIEF_LOG

T0, T1 = "2026-11-30T18:00:00Z", "2026-11-30T18:00:05Z"
RUN = parse_run(make_run({"workers": 2, "training": {"epochs": 8}}, uid="u-1", generation=1))


def test_the_last_finished_epoch_of_the_log():
    end = parse_epoch_end(CHIEF_LOG)
    assert end == EpochEnd(2, 8, (("accuracy", 0.993), ("loss", 0.0249)), 6932.1, 11)


def test_no_finished_epoch_yet_and_lines_that_only_look_alike():
    assert parse_epoch_end("") is None
    assert parse_epoch_end("dtr_trainer[worker-0]: epoch 1/8 begin\n") is None
    assert parse_epoch_end("dtr_trainer[worker-0]: epoch 9/8 end loss=1\nepoch 0/8 end loss=1\n") is None
    assert parse_epoch_end("dtr_trainer[worker-0]: the epoch 1/2 endpoint\n") is None


def test_values_that_are_not_finite_numbers_are_left_out():
    end = parse_epoch_end("dtr_trainer[worker-0]: epoch 1/2 end loss=nan accuracy=0.5 note=x "
                             "examples_per_second=inf")
    assert end is not None
    assert end.metrics == (("accuracy", 0.5),) and end.examples_per_second is None and end.remaining_seconds is None


def test_an_older_trainer_line_without_rate_or_eta():
    end = parse_epoch_end("dtr_trainer[worker-0]: epoch 3/5 end accuracy=0.9000 loss=0.3000")
    progress = progress_of(end, T0)
    assert "examplesPerSecond" not in progress and "estimatedRemainingSeconds" not in progress
    assert progress["epochsDone"] == "3/5" and progress["progressPercentage"] == 60


def test_progress_names_match_trainer_v2():
    progress = progress_of(parse_epoch_end(CHIEF_LOG), T0)
    assert progress == {
        "epoch": 2,
        "epochs": 8,
        "epochsDone": "2/8",
        "progressPercentage": 25,
        "estimatedRemainingSeconds": 11,
        "examplesPerSecond": 6932.1,
        "metrics": [{"name": "accuracy", "value": "0.9930"}, {"name": "loss", "value": "0.0249"}],
        "lastUpdatedTime": T0,
    }


def test_running_progress_writes_only_news_and_only_while_running():
    end = parse_epoch_end(CHIEF_LOG)
    running = {"phase": "Running", "reason": "TFJobRunning"}
    first = running_progress(running, end, T0)
    assert first["progress"]["epoch"] == 2 and first["phase"] == "Running"
    # The same epoch read again at a later time is no news: no write.
    assert next_status(first, running_progress(first, end, T1)) is None
    # Any other phase is left as it is.
    for previous in ({"phase": "Pending"}, {"phase": "Succeeded", "progress": {"epoch": 8}}, {"phase": "Failed"}):
        assert running_progress(previous, end, T0) == previous
    assert running_progress(running, None, T0) == running


def test_a_finished_run_keeps_its_final_progress():
    done = next_status({"phase": "Succeeded", "progress": {"epoch": 8}}, {"progress": {"epoch": 3}})
    assert done is None


def tfjob(conditions):
    return {"metadata": {"name": RUN.tfjob_name, "namespace": "ml"},
            "status": {"conditions": [{"type": t, "status": "True"} for t in conditions]}}  # fmt: skip


def chief(summary):
    return {
        "metadata": {"name": f"{RUN.tfjob_name}-worker-0",
                     "labels": {"training.kubeflow.org/replica-type": "worker",
                                "training.kubeflow.org/replica-index": "0"}},
        "status": {"containerStatuses": [{"name": "tensorflow",
                                          "state": {"terminated": {"exitCode": 0, "message": summary}}}]},
    }  # fmt: skip


def test_success_completes_the_progress_and_keeps_the_last_epochs_figures():
    previous = running_progress({"phase": "Running"}, parse_epoch_end(CHIEF_LOG), T0)
    summary = json.dumps({"loss": 0.1, "accuracy": 0.97, "epochs": 8, "examplesPerSecond": 6000.0,
                          "modelPath": "/mnt/dtr/models/m/1", "modelVersion": 1})  # fmt: skip
    status = tfjob_status(RUN, tfjob(["Created", "Running", "Succeeded"]), [chief(summary)], previous, T1)
    assert status["phase"] == "Succeeded"
    progress = status["progress"]
    assert (progress["epoch"], progress["epochsDone"], progress["progressPercentage"]) == (8, "8/8", 100)
    assert progress["estimatedRemainingSeconds"] == 0 and progress["lastUpdatedTime"] == T1
    assert progress["metrics"] == previous["progress"]["metrics"]


def test_success_without_any_progress_seen_still_says_every_epoch_is_done():
    status = tfjob_status(RUN, tfjob(["Created", "Succeeded"]), [chief("")], {}, T1)
    assert status["progress"]["epochsDone"] == "8/8"


def test_a_failed_run_keeps_the_progress_it_had():
    previous = running_progress({"phase": "Running"}, parse_epoch_end(CHIEF_LOG), T0)
    status = tfjob_status(RUN, tfjob(["Created", "Failed"]), [], previous, T1)
    assert status["phase"] == "Failed" and "progress" not in status  # a merge patch: the old progress stays


# ---- when an epoch ended: the container runtime's timestamp (pods/log?timestamps=true) -----------------------------

STAMPED = """2026-11-30T18:00:01.000000001Z dtr_trainer[worker-0]: epoch 1/8 end loss=0.4172 examples_per_second=2083.2
2026-11-30T18:00:11.123456789Z dtr_trainer[worker-0]: epoch 2/8 end loss=0.0249 examples_per_second=6932.1
2026-11-30T18:00:12.5Z dtr_trainer[worker-0]: epoch 3/8 begin
2026-11-30T18:00:20.999999999Z dtr_trainer[worker-0]: alive
"""


def test_an_epochs_end_time_is_its_lines_timestamp_in_whole_seconds():
    assert parse_epoch_end(STAMPED, 8).epoch == 2
    assert epoch_logged_at(STAMPED, 8) == "2026-11-30T18:00:11Z"
    assert epoch_logged_at(CHIEF_LOG, 8) is None, "a log read without timestamps has no time: the caller's now stands"
    assert epoch_logged_at("2026-11-30T18:00:11Z dtr_trainer[worker-0]: epoch 1/8 begin\n", 8) is None


def test_a_run_cannot_set_its_epochs_time_by_printing_a_timestamp():
    # The run's code prints a whole stamped epoch line: the runtime's own stamp comes first, and a line with two is
    # no epoch's end, so the time is never the one the run wrote.
    forged = "2026-11-30T18:00:30.1Z 2020-01-01T00:00:00.0Z dtr_trainer[worker-0]: epoch 3/8 end loss=0.1\n"
    assert parse_epoch_end(STAMPED + forged, 8).epoch == 2
    assert epoch_logged_at(STAMPED + forged, 8) == "2026-11-30T18:00:11Z"


def test_the_trainers_error_line_is_found_with_or_without_timestamps():
    line = "dtr_trainer[worker-0]: error: wine_model.py:30: SyntaxError: invalid syntax"
    assert logs_an_error(line) and logs_an_error(f"2026-11-30T18:00:11.123456789Z {line}")
    assert not logs_an_error(f"2026-11-30T18:00:11.1Z dtr_trainer[worker-0]: epoch 1/8 begin {line}")
