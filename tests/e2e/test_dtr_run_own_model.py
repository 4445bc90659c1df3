"""`dtr run` with your own model file (docs/own-model.md), end to end: real TF worker processes, the file mounted
where the cluster mounts its ConfigMap, data read from a directory on the run's volume, no cluster, offline.

    dtr run my_model.py --workers 2 ...        the run `dtr submit my_model.py` would send
    dtr run run.yaml --code my_model.py         a run file naming the file as its code
"""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path

import yaml
from dtr_contract import exits

from support.local_run import dtr_run
from support.runs import saved_models

REPO = Path(__file__).resolve().parents[2]

# A regression the repository does not ship: y = 3 x0 - 2 x1 + 0.5 from a CSV in a directory on the volume;
# uncompiled, so the harness picks mean squared error and reports mae beside it.
MODEL = '''"""A linear regression on points/*.csv (columns x0,x1,y), read from the run's data directory."""

import glob
import os

import numpy as np
import tensorflow as tf


def _table(ctx):
    files = sorted(glob.glob(os.path.join(ctx.data_dir, ctx.dataset, "*.csv")))
    return np.concatenate([np.loadtxt(f, delimiter=",", skiprows=1, dtype=np.float32, ndmin=2) for f in files])


def load_data(ctx):
    table = _table(ctx)
    x, y = table[:, :2], table[:, 2]
    return (x[:384], y[:384]), (x[384:], y[384:])


def build_model(ctx):
    inputs = tf.keras.Input(shape=ctx.input_shape, name="point")
    outputs = tf.keras.layers.Dense(1, name="y")(inputs)
    return tf.keras.Model(inputs, outputs)
'''


def _points(volume: Path) -> None:
    """512 rows of x0,x1,y in <volume>/data/points/points.csv (the test's own Python has no NumPy)."""
    rng = random.Random(0)
    rows = ["x0,x1,y"]
    for _ in range(512):
        x0, x1 = rng.uniform(-1, 1), rng.uniform(-1, 1)
        rows.append(f"{x0:.6f},{x1:.6f},{3 * x0 - 2 * x1 + 0.5:.6f}")
    directory = volume / "data" / "points"
    directory.mkdir(parents=True)
    (directory / "points.csv").write_text("\n".join(rows) + "\n")


def test_dtr_run_trains_a_model_file_on_a_directory_with_two_workers(tmp_path: Path) -> None:
    model = tmp_path / "points_model.py"
    model.write_text(MODEL)
    volume = tmp_path / ".dtr" / "volumes" / "points-data"
    _points(tmp_path / "mine")  # mine/data/points/points.csv, put on the volume by --data
    code, out, status = dtr_run(tmp_path, str(model), "--name", "points", "--workers", "2", "--epochs", "4",
                                 "--data", "mine/data/points", "--dataset", "points", "--batch-size-per-worker", "16",
                                 "--learning-rate", "0.05", "--metric", "mae")  # fmt: skip
    assert code == 0, out[-4000:]
    assert f"[dtr] data mine/data/points -> {volume}/data/points" in out, out[:2000]
    assert (volume / "data" / "points" / "points.csv").read_text() == (tmp_path / "mine" / "data" / "points" /
                                                                       "points.csv").read_text()  # fmt: skip
    assert "[worker-0] " in out and "[worker-1] " in out and "[dtr] epoch 4/4 done" in out
    sha = hashlib.sha256(MODEL.encode()).hexdigest()
    assert status["phase"] == "Succeeded" and status["reason"] == "TrainingSucceeded", status
    assert status.get("workerRestarts", 0) == 0, out[-4000:]
    assert status["code"] == {"configMap": "points-code", "key": "points_model.py", "sha256": sha}
    assert "accuracy" not in status["metrics"] and {"loss", "mae"} <= set(status["metrics"]), status["metrics"]
    name, _, value = status["headline"].partition("=")
    assert name == "mae" and float(value) == round(status["metrics"]["mae"], 4), status
    assert status["metrics"]["mae"] < 1.0, "it learned something"
    assert status["message"].startswith("mae ") and status["model"]["path"] == "/mnt/dtr/models/points/1"
    assert f"[dtr] code points_model.py (sha256 {sha})" in out
    # The file the workers ran is the copy in the ConfigMap's stand-in, read-only, as the kubelet mounts it.
    placed = tmp_path / ".dtr" / "runs" / "points" / "code" / "points_model.py"
    assert placed.read_text() == MODEL and placed.stat().st_mode & 0o777 == 0o444
    (version,) = saved_models(volume)
    assert version == volume / "models" / "points" / "1"
    assert sha in (version / "lineage.json").read_text(), "the model's lineage names its code's hash"


def test_dtr_run_of_a_run_file_whose_code_raises_ends_user_code_error_with_the_line(tmp_path: Path) -> None:
    broken = MODEL.replace("    table = _table(ctx)\n", "    table = _table(ctx)\n    raise KeyError('x0')\n")
    line = broken.splitlines().index("    raise KeyError('x0')") + 1
    model = tmp_path / "points_model.py"
    model.write_text(broken)
    _points(tmp_path / ".dtr" / "volumes" / "broken-data")
    run = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "metadata": {"name": "broken"},
           "spec": {"workers": 1, "restartPolicy": "Never",
                    "training": {"dataset": "points", "epochs": 2, "batchSizePerWorker": 16}}}  # fmt: skip
    run_file = tmp_path / "broken.yaml"
    run_file.write_text(yaml.safe_dump(run))
    code, out, status = dtr_run(tmp_path, str(run_file), "--code", str(model), timeout=300)
    assert code == 1, out[-4000:]
    assert (status["phase"], status["reason"]) == ("Failed", "UserCodeError"), status
    assert status["message"].startswith(f"points_model.py:{line} in load_data: KeyError: "), status["message"]
    assert f"exit code {exits.USER_CODE})" in status["message"], status["message"]
    assert "Traceback" not in status["message"]


def test_dtr_run_of_a_model_whose_loss_diverges_ends_diverged_naming_the_epoch_without_a_restart(
    tmp_path: Path,
) -> None:
    """The default restartPolicy OnFailure: a restart would diverge again, so `dtr run` makes none; the next
    run at a lower learning rate starts fresh."""
    model = tmp_path / "diverging_model.py"
    model.write_text((REPO / "tests" / "support" / "diverging_model.py").read_text())
    code, out, status = dtr_run(tmp_path, str(model), "--name", "diverging", "--workers", "1", "--epochs", "3",
                                 "--learning-rate", "10", timeout=300)  # fmt: skip
    assert code == 1, out[-4000:]
    assert (status["phase"], status["reason"]) == ("Failed", "Diverged"), status
    assert status["message"].startswith("training diverged: the loss became "), status["message"]
    assert re.search(r" in epoch [1-3]/3 \(by step \d+/\d+, learning rate 10\); ", status["message"]), status["message"]
    assert f"exit code {exits.DIVERGED})" in status["message"], status["message"]
    assert status.get("workerRestarts", 0) == 0 and "restarting" not in out, out[-4000:]
    assert saved_models(tmp_path / ".dtr" / "volumes" / "diverging-data") == []
    # What the message asks for, the same file at a lower learning rate: a new run, fresh, not stopped by the
    # diverged run's backup (docs/local.md#a-fresh-run-is-fresh).
    code, out, status = dtr_run(tmp_path, str(model), "--name", "diverging", "--workers", "1", "--epochs", "3",
                                 "--learning-rate", "0.01", timeout=300)  # fmt: skip
    assert code == 0 and status["phase"] == "Succeeded", out[-4000:]
    assert "starts fresh" in out and "training.learning_rate 10.0 -> 0.01" in out, out[-4000:]
    assert "diverged before" not in out
