"""The operator-trainer contract checked from both sides, by behaviour (docs/architecture.md).

The names both sides use (flags, env variables, volume paths, the epoch line, the summary, exit codes)
are equal by construction: both import them from dtr_contract. What each side still decides alone is
checked here: every command line the operator's builder makes must parse in the trainer's own parser
to the values the run asked for (types, ranges, the float's repr), both sides name the same models,
datasets and defaults, and the run's identity the pod's env carries comes out of the trainer's reader.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from dtr_contract import flags
from dtr_trainer.data import BUILTIN_DATASETS
from dtr_trainer.lineage import RunIdentity
from dtr_trainer.main import build_parser
from dtr_trainer.models import MODELS

REPO = Path(__file__).resolve().parents[2]
OPERATOR_PYTHON = os.environ.get("DTR_OPERATOR_PYTHON") or str(REPO / ".venv" / "op" / "bin" / "python")


@pytest.fixture(scope="module")
def operator_side() -> dict:
    proc = subprocess.run([OPERATOR_PYTHON, str(Path(__file__).with_name("contract_operator_side.py"))],
                          capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert proc.returncode == 0, f"the operator's side did not run ({OPERATOR_PYTHON}):\n{proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def test_both_sides_name_the_same_models_and_datasets(operator_side: dict) -> None:
    assert operator_side["models"] == list(MODELS)
    assert operator_side["datasets"] == list(BUILTIN_DATASETS)


def _as_parsed(training: dict) -> dict:
    """The run's training values under the trainer's names: datasetSource is its two flags."""
    source = training.get("dataset_source") or {}
    rest = {key: value for key, value in training.items() if key != "dataset_source"}
    return {**rest, "dataset_url": source.get("url"), "dataset_sha256": source.get("sha256")}


def test_the_trainers_defaults_are_the_apis(operator_side: dict) -> None:
    parsed = vars(build_parser().parse_args([flags.EXPORT_DIR, "/x"]))
    defaults = _as_parsed(operator_side["defaults"])
    assert {key: parsed[key] for key in defaults} == defaults


def test_every_command_line_the_operator_builds_parses_to_the_runs_values(operator_side: dict) -> None:
    assert len(operator_side["cases"]) >= len(MODELS) * len(BUILTIN_DATASETS)
    for case in operator_side["cases"]:
        parsed = vars(build_parser().parse_args(case["argv"]))
        training = _as_parsed(case["training"])
        assert {key: parsed[key] for key in training} == training, case["argv"]
        assert (parsed["export_dir"], parsed["log_dir"]) == (case["export_dir"], case["logs_dir"]), case["argv"]


def test_a_code_file_goes_with_its_recorded_digest_and_a_module_with_none(operator_side: dict) -> None:
    file_case, module_case = operator_side["code_cases"]
    parsed = vars(build_parser().parse_args(file_case["argv"]))
    assert (parsed["code"], parsed["code_sha256"], parsed["code_module"]) == (file_case["file"], file_case["sha256"],
                                                                              None)  # fmt: skip
    parsed = vars(build_parser().parse_args(module_case["argv"]))
    assert (parsed["code"], parsed["code_sha256"], parsed["code_module"]) == (None, None, module_case["module"])


def test_the_runs_a_run_lets_publish_under_its_model_name_reach_the_trainer(operator_side: dict) -> None:
    assert [case["publishers"] for case in operator_side["export_cases"]][:2] == [[], ["b", "c-2"]]
    for case in operator_side["export_cases"]:
        parsed = vars(build_parser().parse_args(case["argv"]))
        assert (parsed["export_dir"], list(parsed["allowed_publishers"])) == (case["export_dir"], case["publishers"])


def test_the_trainer_reads_the_runs_identity_from_the_env_the_operator_sets(operator_side: dict) -> None:
    trial = RunIdentity.from_env(operator_side["trial_env"], warn=pytest.fail)
    assert (trial.name, trial.sweep, trial.trial) == ("lr-3", "lr", 3), "a sweep's trial: its MLflow experiment"
    for case in operator_side["cases"]:
        run = RunIdentity.from_env(case["env"], warn=pytest.fail)
        assert (run.sweep, run.trial) == (None, None)
        assert (run.name, run.uid, run.namespace, run.image) == ("contract", "contract-uid", "ns", case["image"])
        assert run.spec is not None and run.spec["training"]["model"] == case["training"]["model"]
        assert run.spec["training"]["dataset"] == case["training"]["dataset"]
