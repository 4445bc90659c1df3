"""A run whose loss diverged, on the operator's side: the trainer's exit code (dtr_contract.exits.DIVERGED) and
its one line become the run's reason `Diverged` and its message, a final failure no restart is made for.
Pure (milliseconds); the trainer's side is tests/trainer/test_diverge.py, the real node's tests/node/test_diverge.py."""

from __future__ import annotations

from typing import Any

from dtr_contract import exits
from dtr_operator import reasons
from dtr_operator.spec import parse_run
from dtr_operator.status.compute import tfjob_status
from dtr_operator.status.pods import restart_cannot_help

from support.runs import make_run
from support.tfjobs import TFJOB_UID, controlled_by

RUN = parse_run(make_run({"workers": 2}, uid="u-1", generation=1))
LINE = ("training diverged: the loss became nan in epoch 3/10 (by step 50/117, learning rate 5); lower the learning "
        "rate, or look for NaN or infinite values in the data")


def pod(index: int, exit_code: int, message: str = "", where: str = "state") -> dict[str, Any]:
    labels = {"training.kubeflow.org/job-name": "mnist-cnn", "training.kubeflow.org/replica-type": "worker",
              "training.kubeflow.org/replica-index": str(index)}  # fmt: skip
    cs = {"name": "tensorflow", where: {"terminated": {"exitCode": exit_code, "message": message}}}
    return {"metadata": {"name": f"mnist-cnn-worker-{index}", "labels": labels, "ownerReferences": controlled_by()},
            "status": {"containerStatuses": [cs]}}


def failed_tfjob() -> dict[str, Any]:
    cond = {"type": "Failed", "status": "True", "reason": "TFJobFailed",
            "message": "TFJob ml/mnist-cnn has failed because 2 Worker replica(s) failed."}  # fmt: skip
    return {"metadata": {"name": "mnist-cnn", "uid": TFJOB_UID}, "status": {"conditions": [cond]}}


def test_a_diverged_run_fails_with_its_own_reason_and_the_workers_line_naming_the_epoch() -> None:
    message = f"dtr_trainer[worker-1]: error: {LINE}\n"
    pods = [pod(0, exits.DIVERGED, message.replace("worker-1", "worker-0")), pod(1, exits.DIVERGED, message)]
    status = tfjob_status(RUN, failed_tfjob(), pods, {}, "t")
    assert (status["phase"], status["reason"]) == ("Failed", "Diverged")
    assert status["message"] == f"{LINE} (worker mnist-cnn-worker-0, exit code {exits.DIVERGED})"


def test_a_diverged_worker_restarted_under_on_failure_is_still_named_by_its_earlier_exit() -> None:
    pods = [pod(0, exits.DIVERGED, f"dtr_trainer[worker-0]: error: {LINE}\n", where="lastState"), pod(1, 143)]
    assert tfjob_status(RUN, failed_tfjob(), pods, {}, "t")["reason"] == "Diverged"


def test_without_its_line_the_message_still_says_what_happened() -> None:
    status = tfjob_status(RUN, failed_tfjob(), [pod(0, exits.DIVERGED)], {}, "t")
    assert status["message"].startswith("training diverged: the loss became NaN or infinite (worker mnist-cnn-worker-0")


def test_diverged_is_a_failed_reason_with_a_warning_event() -> None:
    [reason] = [r for r in reasons.REASONS if r.name == "Diverged"]
    assert (reason.kind, reason.phase, reason.warning) == (reasons.STATUS, reasons.FAILED, True)
    assert "Diverged" in reasons.WARNING_REASONS


def test_only_the_exits_a_restart_would_repeat_end_the_restarts() -> None:
    assert restart_cannot_help(exits.DIVERGED) and restart_cannot_help(exits.USER_CODE)
    assert not any(restart_cannot_help(code) for code in (0, 1, 4, exits.PEER_LOST, 137, 143))
