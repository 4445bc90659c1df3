"""dtr_trainer.progress.epoch_callbacks in a real Keras fit with a real BackupAndRestore: a worker that dies after
an epoch's backup and before its end line has no line for that epoch, yet the history keeps it, and the restart
resumes after it; one that dies before the backup redoes the epoch, and the history keeps the redone one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from dtr_contract.history import read_history
from dtr_trainer.progress import History, Progress, StopOnDivergence, epoch_callbacks

EPOCHS, STEPS, BATCH = 3, 4, 8


class Died(Exception):
    """The stand-in for a SIGKILL: fit stops where it is, no callback after this one runs."""


class DieAtEpochEnd(tf.keras.callbacks.Callback):
    def __init__(self, epoch: int):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.epoch:
            raise Died


def fit(tmp_path: Path, lines: list[str], die: tuple[int, str] | None = None) -> None:
    """One worker's fit (a fresh process's model) on the shared backup and history; `die` = (epoch, where):
    killed at that epoch's end just before the backup or just before the end line."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(STEPS * BATCH, 4)).astype("float32"), rng.normal(size=(STEPS * BATCH, 1))
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
    model.compile(optimizer="sgd", loss="mse")
    progress = Progress(EPOCHS, STEPS * BATCH, lines.append, History(str(tmp_path / "history.jsonl"), lines.append))
    callbacks = epoch_callbacks(StopOnDivergence(EPOCHS, STEPS, 0.01), progress, str(tmp_path / "backup"))
    backup = next(c for c in callbacks if isinstance(c, tf.keras.callbacks.BackupAndRestore))
    assert callbacks.index(progress) < callbacks.index(backup) < callbacks.index(progress.end_line)
    if die is not None:
        epoch, where = die
        callbacks.insert(callbacks.index(backup if where == "before the backup" else progress.end_line),
                         DieAtEpochEnd(epoch))
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, callbacks=callbacks, verbose=0)


def ends(lines: list[str]) -> list[int]:
    return [int(line.split()[1].split("/")[0]) for line in lines if line.startswith("epoch ") and " end " in line]


@pytest.mark.parametrize(("where", "resumed_at"), [("before the end line", 3), ("before the backup", 2)])
def test_a_worker_killed_at_an_epochs_end_loses_no_epoch_from_the_history(tmp_path: Path, where: str,
                                                                          resumed_at: int) -> None:
    first: list[str] = []
    with pytest.raises(Died):
        fit(tmp_path, first, (2, where))
    assert ends(first) == [1], first
    second: list[str] = []
    fit(tmp_path, second)
    assert f"resumed from backup at epoch {resumed_at}/{EPOCHS}" in second, second
    assert ends(second) == list(range(resumed_at, EPOCHS + 1)), second
    history = read_history((tmp_path / "history.jsonl").read_text())
    assert [e.epoch for e in history] == list(range(1, EPOCHS + 1)), history
