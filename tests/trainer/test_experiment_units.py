"""The experiment loop's parts in the trainer (dtr_trainer.experiment, userdata's third split), on the trainer's
Python with TensorFlow but no workers; and one real trainer validating every other epoch."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from dtr_contract.progress import parse_epoch_end_line
from dtr_trainer import experiment, userdata
from dtr_trainer.main import parse_args

from support.trainer import Volume, run_trainer

LOG_DIR = "/mnt/dtr/logs/run"
Callback = tf.keras.callbacks.Callback


@pytest.mark.parametrize(("callback", "words"), [
    (tf.keras.callbacks.EarlyStopping(), None),
    (tf.keras.callbacks.TerminateOnNaN(), None),
    (tf.keras.callbacks.ModelCheckpoint(f"{LOG_DIR}/best.h5"), None),
    (tf.keras.callbacks.CSVLogger(f"{LOG_DIR}/sub/epochs.csv"), None),
    (tf.keras.callbacks.TensorBoard(f"{LOG_DIR}/tb"), None),
    ("early", "is a str, not a tf.keras.callbacks.Callback"),
    (tf.keras.callbacks.EarlyStopping, "is a type, not a tf.keras.callbacks.Callback"),
    (tf.keras.callbacks.BackupAndRestore("/tmp/b"), "the harness keeps the run's backup itself"),
    (tf.keras.callbacks.ModelCheckpoint("/tmp/best.h5"), "writing to /tmp/best.h5: a callback may write files only "
                                                         f"under ctx.log_dir ({LOG_DIR})"),
    (tf.keras.callbacks.CSVLogger(f"{LOG_DIR}/../other/e.csv"), "a callback may write files only under ctx.log_dir"),
    (tf.keras.callbacks.TensorBoard("/mnt/dtr/logs/runner"), "a callback may write files only under ctx.log_dir"),
])  # fmt: skip
def test_what_a_callback_may_be_and_where_it_may_write(callback, words) -> None:
    why = experiment.callback_problem(callback, LOG_DIR, Callback)
    assert (why is None) if words is None else (words in why), why


def test_without_a_log_dir_no_file_writing_callback_is_admitted() -> None:
    why = experiment.callback_problem(tf.keras.callbacks.CSVLogger("e.csv"), None, Callback)
    assert "nowhere (this run has no ctx.log_dir)" in why


def test_the_reason_names_early_stoppings_monitor_patience_and_best_epoch() -> None:
    stopping = tf.keras.callbacks.EarlyStopping(monitor="val_auc", patience=3, restore_best_weights=True)
    stopping.best, stopping.best_epoch = 0.875, 4
    assert experiment.stop_reason(stopping) == ("EarlyStopping: val_auc did not improve for 3 epoch(s); best 0.8750 "
                                                "at epoch 5 (its weights restored)")
    assert experiment.stop_reason(tf.keras.callbacks.TerminateOnNaN()) == "TerminateOnNaN set model.stop_training"


def test_a_stop_is_early_only_before_the_last_epoch() -> None:
    said: list[str] = []
    assert experiment.stopped_early(experiment.Stop(), 5, said.append) is None
    assert experiment.stopped_early(experiment.Stop(5, "EarlyStopping", "r"), 5, said.append) is None
    assert experiment.stopped_early(experiment.Stop(3, "EarlyStopping", "r"), 5, said.append) == \
        {"epoch": 3, "epochs": 5, "reason": "r"}
    assert said == ["stopped early at epoch 3 of 5: r"]


class _Model:
    def __init__(self):
        self.set = []

    def set_weights(self, weights):
        self.set.append(weights)


def _stopping(best_epoch: int, stopped_epoch: int = 0, restore: bool = True):
    stopping = tf.keras.callbacks.EarlyStopping(restore_best_weights=restore)
    stopping.best, stopping.best_epoch, stopping.stopped_epoch = 0.5, best_epoch, stopped_epoch
    stopping.best_weights = "W"
    return stopping


@pytest.mark.parametrize(("callback", "stop", "restored"), [
    (_stopping(best_epoch=1), experiment.Stop(), True),  # trained to the end, best at epoch 2 of 5
    (_stopping(best_epoch=4), experiment.Stop(), False),  # the best was the last: nothing to put back
    (_stopping(best_epoch=1, restore=False), experiment.Stop(), False),  # not asked for
    (_stopping(best_epoch=1, stopped_epoch=3), experiment.Stop(4, "EarlyStopping", "r"), False),  # restored itself
    (_stopping(best_epoch=1), experiment.Stop(4, "TerminateOnNaN", "r"), True),  # another callback stopped it
])  # fmt: skip
def test_the_best_weights_asked_for_are_put_back_unless_early_stopping_did(callback, stop, restored) -> None:
    model, said = _Model(), []
    experiment.restore_best([tf.keras.callbacks.TerminateOnNaN(), callback], stop, 5, model, said.append)
    assert model.set == (["W"] if restored else []) and len(said) == int(restored), said


def test_validation_is_asked_of_fit_every_n_epochs_or_not_at_all() -> None:
    assert experiment.fit_validation("eval", 2) == {"validation_data": "eval", "validation_freq": 2}
    assert experiment.fit_validation("eval", 0) == {}


def test_the_flags_parse_and_refuse_what_the_operator_never_sends() -> None:
    args = parse_args(["--export-dir", "/m", "--params", '{"width": 64}', "--validate-every", "0"])
    assert args.params == {"width": 64} and args.validate_every == 0
    assert parse_args(["--export-dir", "/m"]).params == {} and parse_args(["--export-dir", "/m"]).validate_every == 1
    parser = argparse.ArgumentParser()
    experiment.add_arguments(parser)
    for bad in (["--params", "[1]"], ["--params", '{"1w": 2}'], ["--validate-every", "-1"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


def test_a_third_split_is_the_final_one_and_counts_its_classes() -> None:
    x, y = np.ones((8, 3), np.float32), np.arange(8) % 3
    data = userdata.describe(((x, y), (x[:4], y[:4]), (x[:2], np.array([0, 5]))))
    assert data.test is not None and data.final is data.test and data.num_classes == 6
    two = userdata.describe(((x, y), (x[:4], y[:4])))
    assert two.test is None and two.final is two.eval
    with pytest.raises(userdata.Invalid, match="train labels are class labels of shape \\[\\] but test labels"):
        userdata.describe(((x, y), (x, y), (x, y.astype(np.float32))))


def test_a_run_validated_every_other_epoch_has_val_figures_on_those_epochs_only(tmp_path: Path) -> None:
    volume = Volume(tmp_path / "mnt-dtr")
    args = ["--dataset", "digits", "--epochs", "4", "--steps-per-epoch", "4", "--batch-size-per-worker", "16",
            "--validate-every", "2", *volume.args()]
    proc = run_trainer(args, volume)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ends = [e for e in map(parse_epoch_end_line, proc.stderr.splitlines()) if e is not None]
    assert [(e.epoch, "val_loss" in dict(e.metrics)) for e in ends] == [(1, False), (2, True), (3, False), (4, True)]


RESTORING = '''
import numpy as np
import tensorflow as tf


def load_data(ctx):
    rng = np.random.default_rng(ctx.seed)
    x = rng.normal(size=(600, 4)).astype("float32")
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32")
    return (x[:450], y[:450]), (x[450:], y[450:])


def build_model(ctx):
    inputs = tf.keras.Input(shape=ctx.input_shape, name="features")
    hidden = tf.keras.layers.Dense(8, activation="relu")(inputs)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(2, activation="softmax", name="probabilities")(hidden))


def callbacks(ctx):
    # Never stops (patience beyond the epochs); only the first epoch is an improvement (min_delta).
    return [tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=100, min_delta=100.0,
                                             restore_best_weights=True)]
'''


def test_a_run_that_reaches_its_last_epoch_exports_the_best_weights_asked_for(tmp_path: Path) -> None:
    from dtr_contract.history import read_history

    volume = Volume(tmp_path / "mnt-dtr")
    code = tmp_path / "restoring_model.py"
    code.write_text(RESTORING)
    proc = run_trainer(["--code", str(code), "--epochs", "3", "--batch-size-per-worker", "30", "--learning-rate",
                        "0.05", *volume.args("restoring")], volume)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "restored the best weights, of epoch 1 (val_loss " in proc.stderr and "stopped early" not in proc.stderr
    history = read_history((volume.root / "logs" / "run1" / "history.jsonl").read_text())
    first, last = history[0].metrics["val_loss"], history[-1].metrics["val_loss"]
    assert len(history) == 3 and abs(first - last) > 0.01, (first, last)
    rng = np.random.default_rng(42)
    x = rng.normal(size=(600, 4)).astype("float32")
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32")
    serve = tf.saved_model.load(str(volume.root / "models" / "restoring" / "1")).signatures["serving_default"]
    p = serve(features=tf.constant(x[450:]))["probabilities"].numpy()
    loss = float(np.mean(-np.log(np.clip(p[np.arange(150), y[450:]], 1e-7, 1.0))))
    assert abs(loss - first) < 2e-3, (loss, first, last)  # the first (best) epoch's weights, not the last's
