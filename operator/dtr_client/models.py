"""A run's exported model on this machine: copied out of a local run's volume, and scored.

Scoring needs TensorFlow, which lives in the trainer's environment (Python 3.9), not in the client's: evaluate()
runs the trainer's scorer (trainer/dtr_trainer/score.py) in the trainer's Python, as `dtr run` runs the workers,
and returns what it prints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from dtr_contract import flags

SCORER = "dtr_trainer.score"
T = TypeVar("T")
SCORE_TIMEOUT = 600.0  # seconds: TensorFlow's start and one pass over a held-out split, on a loaded machine


class EvaluationFailed(RuntimeError):
    """The trainer's scorer could not score the model: its last lines say why."""


def empty_destination(dest: Path) -> None:
    """As `dtr model get`: DEST must not exist, or be an empty directory."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise FileExistsError(f"{dest} exists and is not an empty directory")


def copy_model(source: Path, dest: Path) -> Path:
    """The model directory copied to DEST, complete or not at all (fill_atomically)."""
    empty_destination(dest)
    fill_atomically(dest, lambda temporary: shutil.copytree(source, temporary, dirs_exist_ok=True))
    return dest


def fill_atomically(dest: Path, fill: Callable[[Path], T]) -> T:
    """DEST complete or not at all: `fill` writes a temporary directory beside it, renamed to DEST at the end (an
    empty DEST is replaced); on any error the temporary directory goes and DEST stays as it was."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{dest.name}.dtr-partial-", dir=dest.parent))
    try:
        result = fill(temporary)
        if dest.exists():
            dest.rmdir()
        temporary.rename(dest)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return result


def scorer_argv(python: str, model_dir: Path, dataset: str | None, seed: int | None,
                data_dir: str | Path | None) -> list[str]:  # fmt: skip
    argv = [python, "-m", SCORER, str(model_dir)]
    argv += [flags.DATASET, dataset] if dataset else []
    argv += [flags.SEED, str(seed)] if seed is not None else []
    argv += [flags.DATA_DIR, str(data_dir)] if data_dir else []
    return argv


def scored(stdout: str) -> dict[str, Any]:
    """The scorer's JSON line (the last line it printed)."""
    lines = stdout.strip().splitlines()
    if not lines:
        raise EvaluationFailed("the scorer printed nothing")
    return dict(json.loads(lines[-1]))


def evaluate(python: str, model_dir: str | Path, dataset: str | None = None, seed: int | None = None,
             data_dir: str | Path | None = None) -> dict[str, Any]:  # fmt: skip
    """The model's accuracy on the held-out split of its run (dataset and seed from its lineage.json unless
    given): {"accuracy", "examples", "dataset", "seed"}. EvaluationFailed with the scorer's error."""
    argv = scorer_argv(python, Path(model_dir), dataset, seed, data_dir)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SCORE_TIMEOUT, check=False,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})  # fmt: skip
    except FileNotFoundError:
        raise EvaluationFailed(f"no trainer Python at {python}: make setup-trainer, or set DTR_TRAINER_PYTHON "
                               "(docs/client.md)") from None  # fmt: skip
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise EvaluationFailed(f"scoring {model_dir} failed (exit {proc.returncode}):\n{tail}")
    return scored(proc.stdout)
