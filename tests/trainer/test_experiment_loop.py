"""The experiment loop (docs/experiments.md) through the real CLI and two real MWMS workers: the run's own params reach
ctx.params on every worker, the eval split is evaluated each epoch (val_* in the epoch lines and the history), a
third split is the final evaluation, and an EarlyStopping of the user's own stops both workers at the same epoch,
the chief exporting the restored best weights and saying why it stopped. A callbacks(ctx) that returns what is not a
Keras callback fails with one line naming the file.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from dtr_contract.history import read_history
from dtr_contract.progress import parse_epoch_end_line
from dtr_trainer.errors import EXIT_USER_CODE

from devcluster.controlplane import free_ports
from support.trainer import Volume, kill_all, run_trainer, start_workers, validate_lineage

MODEL = '''
import numpy as np
import tensorflow as tf


def arrays(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(900, 4)).astype("float32")
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32")
    return x, y


def load_data(ctx):
    x, y = arrays(ctx.seed)
    return (x[:600], y[:600]), (x[600:750], y[600:750]), (x[750:], y[750:])


def build_model(ctx):
    try:
        ctx.params["width"] = 0
        print("ctx.params is writable")
    except TypeError:
        pass
    print("params seen", sorted(ctx.params.items()), "worker", ctx.worker_index)
    inputs = tf.keras.Input(shape=ctx.input_shape, name="features")
    x = tf.keras.layers.Dense(ctx.params["width"], activation="relu")(inputs)
    outputs = tf.keras.layers.Dense(2, activation="softmax", name="probabilities")(x)
    return tf.keras.Model(inputs, outputs)


def callbacks(ctx):
    # min_delta larger than any change: only the first epoch counts as an improvement.
    return [tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=ctx.params["patience"],
                                             min_delta=ctx.params["min_delta"],
                                             restore_best_weights=ctx.params["restore"])]
'''
PARAMS = {"width": 8, "patience": 2, "min_delta": 100.0, "restore": True, "note": "a b"}
EPOCHS, STOPPED_AT = 6, 3  # patience 2 after the best (first) epoch


def _eval_split(seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(900, 4)).astype("float32")
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32")
    return x[600:750], y[600:750]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    root = tmp_path_factory.mktemp("loop")
    volume = Volume(root / "mnt-dtr")
    code = root / "loop_model.py"
    code.write_text(MODEL)
    args = ["--code", str(code), "--epochs", str(EPOCHS), "--batch-size-per-worker", "25", "--learning-rate", "0.05",
            "--params", json.dumps(PARAMS), *volume.args("loop")]
    workers = start_workers(volume, free_ports(2), args)
    try:
        codes = [w.wait() for w in workers]
    finally:
        kill_all(workers)
    assert codes == [0, 0], "\n".join(w.log()[-3000:] for w in workers)
    return volume, workers


def _epoch_ends(log: str) -> list:
    return [end for end in (parse_epoch_end_line(line) for line in log.splitlines()) if end is not None]


def test_the_params_reach_ctx_params_on_every_worker_read_only(stopped):
    _, workers = stopped
    for worker in workers:
        log = worker.log()
        assert f"params seen {sorted(PARAMS.items())} worker {worker.index}" in log, log[-2000:]
        assert "ctx.params is writable" not in log


def test_both_workers_stop_at_the_same_epoch_with_val_figures_each_epoch(stopped):
    _, workers = stopped
    for worker in workers:
        ends = _epoch_ends(worker.log())
        assert [e.epoch for e in ends] == list(range(1, STOPPED_AT + 1)), worker.log()[-2000:]
        assert all({"val_loss", "val_accuracy", "loss", "accuracy"} <= dict(e.metrics).keys() for e in ends)
        assert f"stopped early at epoch {STOPPED_AT} of {EPOCHS}: EarlyStopping: val_loss" in worker.log()
    chief, other = (_epoch_ends(w.log()) for w in workers)
    assert [dict(e.metrics)["val_loss"] for e in chief] == [dict(e.metrics)["val_loss"] for e in other], \
        "the validation figures are all-reduced: both workers see the same"


def test_the_history_holds_the_val_figures_and_the_summary_says_why_it_stopped(stopped):
    volume, workers = stopped
    history = read_history((volume.root / "logs" / "run1" / "history.jsonl").read_text())
    assert [e.epoch for e in history] == [1, 2, 3] and all("val_loss" in e.metrics for e in history)
    (line,) = [ln for ln in workers[0].log().splitlines() if ln.startswith("{")]
    summary = json.loads(line)
    early = summary["stoppedEarly"]
    assert (early["epoch"], early["epochs"]) == (STOPPED_AT, EPOCHS)
    assert "EarlyStopping: val_loss did not improve for 2 epoch(s)" in early["reason"]
    assert "at epoch 1 (its weights restored)" in early["reason"]


def test_the_exported_model_has_the_restored_best_weights(stopped):
    import tensorflow as tf

    volume, _ = stopped
    history = read_history((volume.root / "logs" / "run1" / "history.jsonl").read_text())
    val_losses = [e.metrics["val_loss"] for e in history]
    assert abs(val_losses[0] - val_losses[-1]) > 0.01, ("the test needs epochs that differ", val_losses)
    x, y = _eval_split()
    serve = tf.saved_model.load(str(volume.root / "models" / "loop" / "1")).signatures["serving_default"]
    p = serve(features=tf.constant(x))["probabilities"].numpy()
    loss = float(np.mean(-np.log(np.clip(p[np.arange(len(y)), y], 1e-7, 1.0))))
    assert abs(loss - val_losses[0]) < 2e-3, (loss, val_losses)  # the first (best) epoch's, not the last's


def test_the_lineage_records_the_params_and_the_early_stop(stopped):
    volume, _ = stopped
    doc = validate_lineage(volume.root / "models" / "loop" / "1")
    assert doc["schemaVersion"] == 3 and doc["training"]["params"] == dict(sorted(PARAMS.items()))
    assert doc["training"]["validateEvery"] == 1
    assert doc["training"]["stoppedEarly"]["epoch"] == STOPPED_AT


BAD_CALLBACKS = '''
import numpy as np
import tensorflow as tf

def load_data(ctx):
    x = np.ones((32, 3), "float32")
    y = np.zeros(32, "int32")
    return (x, y), (x, y)

def build_model(ctx):
    return tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])

def callbacks(ctx):
    return [tf.keras.callbacks.TerminateOnNaN(), "early stopping please"]
'''


def test_a_callbacks_item_that_is_no_keras_callback_fails_naming_the_file(tmp_path: Path):
    volume = Volume(tmp_path / "mnt-dtr")
    code = tmp_path / "bad_model.py"
    code.write_text(textwrap.dedent(BAD_CALLBACKS))
    proc = run_trainer(["--code", str(code), "--epochs", "1", *volume.args("bad")], volume)
    assert proc.returncode == EXIT_USER_CODE, proc.stderr[-2000:]
    (error,) = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert "bad_model.py:13 in callbacks: its item 1 is a str, not a tf.keras.callbacks.Callback" in error, error
