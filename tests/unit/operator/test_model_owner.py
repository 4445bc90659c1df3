"""A model name's versions belong to their owner (issue 39 item 4, review R5), the operator's half:
spec.export.allowedPublishers reaches the trainer as --allowed-publishers, and a worker's exit 11
(dtr_contract.exits.MODEL_NAME_OWNED) fails the run ModelNameOwned with the worker's line, at once. The trainer's half,
with real workers: tests/trainer/test_model_owner.py."""

from __future__ import annotations

from typing import Any

import pytest
from dtr_contract import exits, flags
from dtr_operator.builders import effective_spec, trainer_args
from dtr_operator.fields import MAX_ALLOWED_PUBLISHERS
from dtr_operator.reasons import REASONS, WARNING_REASONS
from dtr_operator.spec import SpecError, parse_run
from dtr_operator.status.compute import tfjob_status
from dtr_operator.status.pods import restart_cannot_help

from support.runs import make_run
from support.tfjobs import TFJOB_UID, controlled_by

LINE = (
    "model mnist-cnn: its versions belong to run alice, whose spec.export.allowedPublishers does not list this "
    "run: choose another spec.export.modelName, or have a run named alice list mnist-cnn there"
)


def parsed(spec: dict[str, Any]) -> Any:
    return parse_run(make_run(spec, uid="u-1", generation=1))


def test_the_runs_a_run_lets_publish_go_to_the_trainer_and_back_into_the_spec() -> None:
    run = parsed({"export": {"modelName": "team", "allowedPublishers": ["bob", "carol-2"]}})
    args = trainer_args(run)
    assert args[args.index(flags.ALLOWED_PUBLISHERS) + 1] == "bob,carol-2"
    assert effective_spec(run)["export"] == {"modelName": "team", "allowedPublishers": ["bob", "carol-2"]}
    assert parse_run(make_run(effective_spec(run), uid="u-1", generation=1)) == run
    for none in ({}, {"export": {"allowedPublishers": []}}):
        assert flags.ALLOWED_PUBLISHERS not in trainer_args(parsed(none))
        assert "allowedPublishers" not in effective_spec(parsed(none))["export"]


@pytest.mark.parametrize("publishers, words", [
    (["Bob"], "must be a run name"), (["bob/x"], "must be a run name"), (["b" * 53], "at most 52 characters"),
    ([f"r{i}" for i in range(MAX_ALLOWED_PUBLISHERS + 1)], "at most 16 items"), ("bob", "must be a list"),
    ([3], "must be a string"),
])  # fmt: skip
def test_allowed_publishers_are_few_run_names(publishers: Any, words: str) -> None:
    with pytest.raises(SpecError, match=words) as err:
        parsed({"export": {"allowedPublishers": publishers}})
    assert "spec.export.allowedPublishers" in str(err.value)


def _pod(index: int, exit_code: int, message: str = "") -> dict[str, Any]:
    cs = {"name": "tensorflow", "state": {"terminated": {"exitCode": exit_code, "message": message}}, "lastState": {}}
    labels = {"training.kubeflow.org/job-name": "mnist-cnn", "training.kubeflow.org/replica-type": "worker",
              "training.kubeflow.org/replica-index": str(index)}  # fmt: skip
    return {"metadata": {"name": f"mnist-cnn-worker-{index}", "labels": labels, "ownerReferences": controlled_by()},
            "status": {"containerStatuses": [cs]}}  # fmt: skip


def _failed_tfjob() -> dict[str, Any]:
    cond = {"type": "Failed", "status": "True", "reason": "TFJobFailed",
            "message": "TFJob ml/mnist-cnn has failed because 2 Worker replica(s) failed."}  # fmt: skip
    return {"metadata": {"name": "mnist-cnn", "uid": TFJOB_UID}, "status": {"conditions": [cond]}}


def test_a_model_name_owned_by_another_run_fails_the_run_with_the_workers_line() -> None:
    pods = [
        _pod(1, exits.MODEL_NAME_OWNED, f"dtr_trainer[worker-1]: error: {LINE}\n"),
        _pod(0, exits.MODEL_NAME_OWNED, f"dtr_trainer[worker-0]: error: {LINE}\n"),
    ]
    status = tfjob_status(parsed({"workers": 2}), _failed_tfjob(), pods, {}, "t")
    assert (status["phase"], status["reason"]) == ("Failed", "ModelNameOwned")
    assert status["message"] == f"{LINE} (worker mnist-cnn-worker-0, exit code {exits.MODEL_NAME_OWNED})"
    assert len(status["message"]) <= 400, "the line and the worker fit a status message whole"
    assert "ModelNameOwned" in WARNING_REASONS and any(r.name == "ModelNameOwned" for r in REASONS)


def test_the_owned_name_is_the_cause_when_a_peer_only_lost_the_refused_worker() -> None:
    """Worker 0 refused; worker 1 had gone on waiting for it and lost it (138): the run says why, not the peer."""
    pods = [
        _pod(0, exits.MODEL_NAME_OWNED, f"dtr_trainer[worker-0]: error: {LINE}\n"),
        _pod(1, exits.PEER_LOST, "dtr_trainer[worker-1]: error: lost a peer or a collective timed out\n"),
    ]
    status = tfjob_status(parsed({"workers": 2}), _failed_tfjob(), pods, {}, "t")
    assert (status["reason"], status["message"].split(" (worker ")[0]) == ("ModelNameOwned", LINE)


def test_a_restart_cannot_help_so_the_run_fails_at_once() -> None:
    assert restart_cannot_help(exits.MODEL_NAME_OWNED) and not exits.is_retryable(exits.MODEL_NAME_OWNED)
    assert exits.is_model_name_owned(exits.MODEL_NAME_OWNED) and not exits.is_model_name_owned(exits.CODE_CHANGED)
    assert len(
        {exits.USER_CODE, exits.DIVERGED, exits.CODE_CHANGED, exits.MODEL_NAME_OWNED, *exits.OBJECT_STORE_CODES}
    ) == 4 + len(exits.OBJECT_STORE_CODES), "each class its own code"
