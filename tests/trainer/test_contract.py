"""The operator-trainer contract checked from both sides (docs/architecture.md, the trainer command line).

Each fact has one home: the operator's API (spec.py, builders.py) and the trainer's command line
(main.py, models.py, data.py). This test fails when they disagree: every command line the operator's
builder makes must parse in the trainer's parser to the values the run asked for, and both sides name
the same models, datasets and defaults. And the pod's env must carry every variable the trainer reads
(dtr_trainer.lineage.ENV_VARS).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from dtr_trainer.data import BUILTIN_DATASETS
from dtr_trainer.lineage import ENV_VARS, RunIdentity
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


def test_the_trainers_defaults_are_the_apis(operator_side: dict) -> None:
    parsed = vars(build_parser().parse_args(["--export-dir", "/x"]))
    assert {key: parsed[key] for key in operator_side["defaults"]} == operator_side["defaults"]


def test_every_command_line_the_operator_builds_parses_to_the_runs_values(operator_side: dict) -> None:
    mount = operator_side["mount"]
    assert len(operator_side["cases"]) >= len(MODELS) * len(BUILTIN_DATASETS)
    for case in operator_side["cases"]:
        parsed = vars(build_parser().parse_args(case["argv"]))
        assert {key: parsed[key] for key in case["training"]} == case["training"], case["argv"]
        assert parsed["export_dir"] == case["export_dir"]
        assert parsed["data_dir"] == f"{mount}/data"
        for key in ("backup_dir", "tensorboard_dir", "log_dir"):
            assert parsed[key].startswith(f"{mount}/"), (key, parsed[key])
        assert parsed["log_dir"] == case["logs_dir"]


def test_the_operator_sets_every_variable_the_trainer_reads(operator_side: dict) -> None:
    for case in operator_side["cases"]:
        missing = [name for name in ENV_VARS if name not in case["env"]]
        assert not missing, f"builders._container does not set {missing}, which the trainer reads"
        run = RunIdentity.from_env(case["env"], warn=pytest.fail)
        assert (run.name, run.uid, run.namespace, run.image) == ("contract", "contract-uid", "ns", case["image"])
        assert run.spec is not None and run.spec["training"]["model"] == case["training"]["model"]
        assert run.spec["training"]["dataset"] == case["training"]["dataset"]
