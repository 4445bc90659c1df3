"""`dtr run FILE.py --param ...` end to end (docs/experiments.md): real TF worker processes, no cluster, offline. The
params reach the code's ctx.params, the eval split is validated each epoch (val_* in status.progress), and an
EarlyStopping the file's callbacks(ctx) returns stops both workers early: the run Succeeded, its status saying where
and why it stopped."""

from __future__ import annotations

from pathlib import Path

from support.local_run import dtr_run

MODEL = '''
import numpy as np
import tensorflow as tf


def load_data(ctx):
    rng = np.random.default_rng(ctx.seed)
    x = rng.uniform(-1, 1, size=(512, 2)).astype("float32")
    y = (3 * x[:, 0] - 2 * x[:, 1] + 0.5).astype("float32")
    return (x[:384], y[:384]), (x[384:], y[384:])


def build_model(ctx):
    print("units from params:", ctx.params["units"], "on worker", ctx.worker_index)
    inputs = tf.keras.Input(shape=ctx.input_shape, name="point")
    hidden = tf.keras.layers.Dense(ctx.params["units"])(inputs)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(1, name="y")(hidden))


def callbacks(ctx):
    # min_delta larger than any change: only the first epoch is an improvement, so it stops after `patience` more.
    return [tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=ctx.params["patience"], min_delta=100.0)]
'''


def test_dtr_run_with_params_validates_each_epoch_and_stops_early_on_both_workers(tmp_path: Path) -> None:
    model = tmp_path / "stopping_model.py"
    model.write_text(MODEL)
    code, out, status = dtr_run(tmp_path, str(model), "--name", "stopping", "--workers", "2", "--epochs", "5",
                                 "--batch-size-per-worker", "16", "--learning-rate", "0.05",
                                 "--param", "units=4", "--param", "patience=1")  # fmt: skip
    assert code == 0, out[-4000:]
    assert "units from params: 4 on worker 0" in out and "units from params: 4 on worker 1" in out
    assert "params patience=1 units=4" in out
    assert status["phase"] == "Succeeded" and status["reason"] == "TrainingSucceeded", status
    assert "; stopped early at epoch 2 of 5: EarlyStopping: val_loss did not improve for 1 epoch(s)" in \
        status["message"], status["message"]
    assert status["progress"]["epochsDone"] == "2/5"
    assert {"loss", "mae", "val_loss", "val_mae"} <= {m["name"] for m in status["progress"]["metrics"]}, status
    for worker in ("worker-0", "worker-1"):
        assert f"[{worker}] dtr_trainer[{worker}]: stopped early at epoch 2 of 5" in out, out[-4000:]
        assert f"dtr_trainer[{worker}]: epoch 3/5 begin" not in out
