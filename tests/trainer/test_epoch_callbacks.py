"""dtr_trainer.progress.epoch_callbacks in a real Keras fit with a real BackupAndRestore: a worker that dies after
an epoch's backup and before its end line has no line for that epoch, yet the history keeps it, and the restart
resumes after it; one that dies before the backup redoes the epoch, and the history keeps the redone one.
A SIGTERM (dtr_trainer.sigterm, the trainer's own handler, a real signal) between the two waits for the line."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from dtr_contract.history import MAX_FILE, read_history
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


# One process: fit as the trainer runs it, with the trainer's SIGTERM handler, and a callback that signals the
# process itself where argv[1] says (Python runs the handler right there) and may then hang.
SIGNALLED = """
import os, signal, sys, time
import numpy as np, tensorflow as tf
from dtr_trainer import main
from dtr_trainer.progress import Progress, StopOnDivergence, epoch_callbacks
from dtr_trainer.sigterm import TERMINATION

where, backup = sys.argv[1], sys.argv[2]
TERMINATION.install(main.before_exit_on_sigterm)

class Signal(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if where == "mid-epoch" and (self.epoch, batch) == (1, 1):
            os.kill(os.getpid(), signal.SIGTERM)
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
    def on_epoch_end(self, epoch, logs=None):
        if where != "mid-epoch" and epoch == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            if where == "after the backup, which then hangs":
                time.sleep(60)
            if where == "after the backup, which then fails":
                raise RuntimeError("the peers left")

x, y = np.zeros((32, 4), "float32"), np.zeros((32, 1), "float32")
model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
model.compile(optimizer="sgd", loss="mse")
progress = Progress(3, 32, main.log)
callbacks = epoch_callbacks(StopOnDivergence(3, 4, 0.01), progress, backup)
callbacks.insert(callbacks.index(progress.end_line), Signal())
try:
    model.fit(x, y, batch_size=8, epochs=3, callbacks=callbacks, verbose=0)
except Exception:
    TERMINATION.stop_if_requested()  # as main.report_error does before it reports one
    raise
print("trained on", file=sys.stderr)
"""


@pytest.mark.parametrize(("where", "stop_line", "epoch_2_ended"), [
    ("mid-epoch", "terminated (SIGTERM): stopping now;", False),
    ("after the backup", "terminated (SIGTERM) during the epoch's backup: stopping now that it is saved", True),
    ("after the backup, which then hangs", "terminated (SIGTERM): stopping now, 5 s into the epoch's backup", False),
    ("after the backup, which then fails", "terminated (SIGTERM) during the epoch's backup: stopping now (the", False),
])  # fmt: skip
def test_sigterm_during_an_epochs_backup_waits_for_its_end_line(tmp_path: Path, where: str, stop_line: str,
                                                                 epoch_2_ended: bool) -> None:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", SIGNALLED, where, str(tmp_path / "backup")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    took = time.monotonic() - started
    assert proc.returncode == 143, proc.stderr[-3000:]
    lines = [line.split("]: ", 1)[1] for line in proc.stderr.splitlines() if line.startswith("dtr_trainer[")]
    assert stop_line in lines[-1] and "trained on" not in proc.stderr, lines
    assert ends(lines) == ([1, 2] if epoch_2_ended else [1]), lines
    assert "epoch 3/3 begin" not in lines, lines
    assert took < 50, f"{took:.0f} s: the hang was not cut short"


def test_the_history_file_stops_at_its_cap_with_one_warning(tmp_path: Path) -> None:
    """What a reader takes (history.MAX_FILE) is also what the chief writes: a run restarted without end appends
    its epochs again each time, and would grow the file without end."""
    assert History(str(tmp_path / "h"), print).cap == MAX_FILE
    lines: list[str] = []
    history = History(str(tmp_path / "history.jsonl"), lines.append, cap=1000)
    for epoch in range(1, 21):
        history.append(epoch, 20, {"loss": 0.5}, 1.0, 10.0)
    text = (tmp_path / "history.jsonl").read_text()
    assert len(text.encode()) <= 1000 and text.endswith("\n")
    kept = [e.epoch for e in read_history(text)]
    assert kept == list(range(1, len(kept) + 1)) and 0 < len(kept) < 20
    (warning,) = lines
    assert f"epoch {len(kept) + 1} and later are not written" in warning and "1000 bytes" in warning
