"""Your own model on your own data (docs/own-model.md), through the real CLI and real MWMS workers.

The two examples under examples/own-model/ train on two workers each: the tabular classifier as a file
(--code; the harness compiles it), the CSV sequence regression as a module on the Python path
(--code-module, as in an image built FROM the trainer's; it compiles itself, and the harness's tuning,
lazy metrics included, runs on it); each exports a model that loads and beats the trivial baseline on
held-out data. A built-in model trains on a .npz of another image shape and class count through the same
contract. Broken variants of the wine example fail fast, each with exit 8 and one line naming the file
and line, on stderr and in the termination message.
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from dtr_trainer.errors import EXIT_USER_CODE

from devcluster.controlplane import free_ports
from support.trainer import (
    Volume,
    kill_all,
    start_workers,
    tf_config,
    trainer_env,
    validate_lineage,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "own-model"
WINE, SERIES = EXAMPLES / "wine" / "wine_model.py", EXAMPLES / "series" / "series_model.py"
WINE_ARGS = ["--dataset", "wine.npz", "--epochs", "10", "--batch-size-per-worker", "16", "--learning-rate", "0.01"]
SERIES_ARGS = ["--code-module", "series_model", "--dataset", "series", "--epochs", "4", "--batch-size-per-worker",
               "32", "--metric", "mae"]
# Seconds a broken file's workers get to exit: a hang (a worker waiting on a peer that died) fails the test.
ERROR_TIMEOUT = 180


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_data(example: str, data_dir: Path) -> None:
    runpy.run_path(str(EXAMPLES / example / "make_data.py"))["main"](str(data_dir))


def train_two_workers(volume: Volume, args: list[str], model_name: str, env_extra: dict | None = None) -> list:
    workers = start_workers(volume, free_ports(2), [*args, *volume.args(model_name)], env_extra=env_extra)
    try:
        codes = [w.wait() for w in workers]
    finally:
        kill_all(workers)
    assert codes == [0, 0], "\n".join(w.log()[-3000:] for w in workers)
    return workers


def summary_of(workers: list) -> dict:
    (line,) = workers[0].stdout_lines()
    assert workers[1].stdout_lines() == []
    return json.loads(line)


# ---------------------------------------------------------------- the tabular classifier, as a file


@pytest.fixture(scope="module")
def wine(tmp_path_factory):
    volume = Volume(tmp_path_factory.mktemp("wine") / "mnt-dtr")
    make_data("wine", volume.root / "data")
    workers = train_two_workers(volume, ["--code", str(WINE), *WINE_ARGS], "wine")
    return volume, workers


def test_the_wine_classifier_reports_its_accuracy_as_the_headline(wine):
    volume, workers = wine
    summary = summary_of(workers)
    assert summary["metric"] == "accuracy" and set(summary["metrics"]) == {"loss", "accuracy"}
    assert summary["accuracy"] == summary["metrics"]["accuracy"] and summary["loss"] == summary["metrics"]["loss"]
    assert summary["modelPath"] == str(volume.root / "models" / "wine" / "1")
    assert json.loads(workers[0].termination_path.read_text()) == summary


def test_the_exported_wine_model_beats_the_majority_class_on_held_out_wines(wine):
    import tensorflow as tf

    volume, _ = wine
    with np.load(volume.root / "data" / "wine.npz") as f:
        x_test, y_test = f["x_test"], f["y_test"]
    serve = tf.saved_model.load(str(volume.root / "models" / "wine" / "1")).signatures["serving_default"]
    probabilities = serve(features=tf.constant(x_test))["probabilities"].numpy()
    assert probabilities.shape == (len(y_test), 3)
    accuracy = float(np.mean(probabilities.argmax(axis=1) == y_test))
    majority = float(np.bincount(y_test).max() / len(y_test))
    assert accuracy >= 0.85 > majority + 0.3, (accuracy, majority)


def test_the_wine_lineage_names_the_file_and_its_hash(wine):
    volume, workers = wine
    doc = validate_lineage(volume.root / "models" / "wine" / "1")
    assert doc["training"]["code"] == {"file": "wine_model.py", "module": None, "sha256": sha256(WINE)}
    assert doc["training"]["model"] is None and doc["training"]["dataset"] == "wine.npz"
    assert doc["training"]["workers"] == 2 and doc["training"]["globalBatchSize"] == 32
    summary = summary_of(workers)
    assert doc["metrics"]["metric"] == "accuracy" and doc["metrics"]["evaluation"] == summary["metrics"]


# ---------------------------------------------------------------- the sequence regression, as a module


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    volume = Volume(tmp_path_factory.mktemp("series") / "mnt-dtr")
    make_data("series", volume.root / "data")
    path = os.pathsep.join([str(SERIES.parent), os.environ.get("PYTHONPATH", "")])
    workers = train_two_workers(volume, SERIES_ARGS, "series", env_extra={"PYTHONPATH": path})
    return volume, workers


def held_out_windows(data_dir: Path, window: int = 24, stride: int = 2) -> tuple:
    """The examples series_model.load_data makes of the eval files, computed with NumPy."""
    xs, ys = [], []
    for path in sorted((data_dir / "series" / "eval").glob("*.csv")):
        values = np.loadtxt(path, delimiter=",", skiprows=1)[:, 1]
        for start in range(0, len(values) - window, stride):
            xs.append(values[start:start + window])
            ys.append(values[start + window])
    return np.asarray(xs, np.float32)[..., np.newaxis], np.asarray(ys, np.float32)


def test_the_regression_reports_its_own_metrics_and_no_accuracy(series):
    _, workers = series
    summary = summary_of(workers)
    assert "accuracy" not in summary
    assert summary["metric"] == "mae" and set(summary["metrics"]) == {"loss", "mae", "rmse"}
    assert abs(summary["metrics"]["rmse"] ** 2 - summary["loss"]) < 1e-3  # its own compile: loss mse, metric rmse
    for worker in workers:
        assert "model compiled by build_model; it reports loss, mae, rmse; metrics read once per execution" in \
            worker.log()


def test_the_exported_regression_beats_the_mean_on_held_out_series(series):
    import tensorflow as tf

    volume, workers = series
    x, y = held_out_windows(volume.root / "data")
    model = tf.keras.models.load_model(str(volume.root / "models" / "series" / "1"))
    mse = float(np.mean((model.predict(x, verbose=0)[:, 0] - y) ** 2))
    baseline = float(np.var(y))  # the mean predictor's squared error
    assert mse < 0.3 * baseline, (mse, baseline)
    # the harness evaluated every held-out window, on both workers together
    assert abs(summary_of(workers)["loss"] - mse) < 0.02 * baseline


def test_the_regression_lineage_names_the_module_and_its_hash(series):
    volume, _ = series
    doc = validate_lineage(volume.root / "models" / "series" / "1")
    assert doc["training"]["code"] == {"file": "series_model.py", "module": "series_model", "sha256": sha256(SERIES)}
    assert doc["metrics"]["metric"] == "mae" and "accuracy" not in doc["metrics"]


# ---------------------------------------------------------------- a built-in on other images


def test_a_built_in_model_sizes_itself_from_a_npz_of_other_images(volume):
    """20x20 RGB images of 3 classes (each class its own colour): the registry's cnn on the same contract."""
    import tensorflow as tf

    rng = np.random.RandomState(0)
    y = rng.randint(0, 3, 96)
    x = (np.eye(3)[y][:, None, None, :] * 200 + rng.randint(0, 55, (96, 20, 20, 3))).astype(np.uint8)
    np.savez(volume.root / "data" / "rgb.npz", x_train=x[:64], y_train=y[:64], x_test=x[64:], y_test=y[64:])
    args = ["--model", "cnn", "--dataset", "rgb.npz", "--epochs", "3", "--batch-size-per-worker", "16",
            "--termination-message-path", ""]
    result = subprocess.run([sys.executable, "-m", "dtr_trainer", *args, *volume.args("rgb")], capture_output=True,
                            text=True, env=trainer_env(volume, None), timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["metric"] == "accuracy" and summary["accuracy"] > 0.6  # 3 classes: chance is 1/3
    serve = tf.saved_model.load(summary["modelPath"]).signatures["serving_default"]
    assert serve.structured_input_signature[1]["images"].shape.as_list() == [None, 20, 20, 3]
    assert serve.structured_outputs["probabilities"].shape.as_list() == [None, 3]
    assert validate_lineage(Path(summary["modelPath"]))["training"]["code"] is None


# ---------------------------------------------------------------- broken variants fail fast, naming the line


def line_of(text: str, needle: str) -> int:
    (number,) = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    return number


@dataclass(frozen=True)
class Broken:
    """An example with one mistake, and what its error line must say."""

    example: Path
    old: str  # replaced in the example's source...
    new: str  # ...by this
    words: str  # in the error line
    marker: str | None  # the error line names the line holding this (None: the file alone)
    extra: tuple = ()  # more arguments
    workers: int = 1


BROKEN = {
    "syntax error": Broken(WINE, "def load_data(ctx):", "def load_data(ctx)", "SyntaxError", "def load_data(ctx)"),
    "exception in load_data": Broken(WINE, "", "", "FileNotFoundError", "with np.load", ("--dataset", "gone.npz")),
    "TensorFlow op at import": Broken(WINE, "\n\ndef _arrays", "\nSCALE = tf.constant(1.0)\n\n\ndef _arrays",
                                      "runs a TensorFlow operation when imported", "SCALE = tf.constant"),
    "shape mismatch": Broken(SERIES, "Input(shape=ctx.input_shape", "Input(shape=(32, 1)",
                             "expected shape=(None, 32, 1), found shape=(16, 24, 1)", "def build_model"),
    "class-count mismatch": Broken(WINE, "Dense(ctx.num_classes,", "Dense(2,",
                                   "2 output units but the labels are classes 0..2", "def build_model", workers=2),
}
EXAMPLE_ARGS = {WINE: WINE_ARGS, SERIES: ["--dataset", "series", "--epochs", "1", "--batch-size-per-worker", "16"]}


@pytest.fixture(scope="module")
def broken_runs(tmp_path_factory):
    """Every broken variant at once (each its own volume), timed from start to exit."""
    started = {}
    for name, broken in BROKEN.items():
        volume = Volume(tmp_path_factory.mktemp(name.replace(" ", "-")) / "mnt-dtr")
        make_data(broken.example.parent.name, volume.root / "data")
        source = broken.example.read_text()
        assert broken.old in source, broken.old
        code = volume.root.parent / broken.example.name
        code.write_text(source.replace(broken.old, broken.new))
        args = ["--code", str(code), *EXAMPLE_ARGS[broken.example], *broken.extra, *volume.args("broken")]
        started[name] = (volume, code, time.monotonic(), start_workers(volume, free_ports(broken.workers), args))
    runs = {}
    for name, (volume, code, began, workers) in started.items():
        try:
            codes = [w.wait(timeout=ERROR_TIMEOUT) for w in workers]
        finally:
            kill_all(workers)
        runs[name] = (volume, code, time.monotonic() - began, codes, workers)
    return runs


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_file_fails_fast_naming_its_line(broken_runs, name):
    volume, code, seconds, codes, workers = broken_runs[name]
    broken = BROKEN[name]
    print(f"{name}: all workers exited {seconds:.0f} s after start")
    assert codes == [EXIT_USER_CODE] * broken.workers, [w.log()[-2000:] for w in workers]
    where = f"{code.name}:{line_of(code.read_text(), broken.marker)}" if broken.marker else f"{code.name}: "
    for worker in workers:
        log = worker.log()
        assert "Traceback" not in log, log[-3000:]
        (error,) = [line for line in log.splitlines() if "error:" in line]
        assert error.startswith(f"dtr_trainer[worker-{worker.index}]: error: {where}"), error
        assert broken.words in error, error
        assert worker.termination_path.read_text() == error + "\n"
        assert worker.stdout_lines() == []
    assert not (volume.root / "models" / "broken" / "1").exists()


def test_a_module_that_is_not_there_fails_naming_it(volume):
    result = subprocess.run([sys.executable, "-m", "dtr_trainer", "--code-module", "no_such_model",
                             "--termination-message-path", "", *volume.args()], capture_output=True, text=True,
                            env=trainer_env(volume, tf_config([1], 0)), timeout=120, check=False)
    assert result.returncode == EXIT_USER_CODE, result.stderr[-2000:]
    assert "error: --code-module no_such_model: no such module on the trainer's Python path" in result.stderr
