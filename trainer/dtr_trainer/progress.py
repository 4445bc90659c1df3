"""Keras callbacks: one logs epoch boundaries and times the steady state, one stops a run whose loss diverged."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import IO, Callable

import tensorflow as tf
from dtr_contract.history import MAX_FILE, history_line
from dtr_contract.progress import HEARTBEAT_SECONDS, epoch_end_line

from dtr_trainer.divergence import diverged_message, non_finite_loss
from dtr_trainer.errors import DivergedError
from dtr_trainer.sigterm import TERMINATION


def max_rss_mb() -> float:
    """This process's peak resident memory (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def remaining_seconds(durations: Sequence[float], epochs_left: int) -> int | None:
    """Epochs left x the mean epoch time, leaving out the first epoch (tracing) once there are others."""
    steady = list(durations[1:]) or list(durations)
    if not steady:
        return None
    return max(0, round(sum(steady) / len(steady) * epochs_left))


class History:
    """Appends each finished epoch to the history file (dtr_contract.history), one flushed line per epoch. The
    file is a convenience, as the worker's log is: if it cannot be written, one warning and training goes on.

    Capped at history.MAX_FILE, what a reader takes of it (dtr_contract.disk): every attempt of a resumed run
    appends its epochs again, so a run restarted without end would grow it without end. A line that would cross
    the cap is not written, nor any after it (one warning); status.progress and the worker's log still have them."""

    def __init__(self, path: str, log: Callable[[str], None], cap: int = MAX_FILE):
        self.path, self.log, self.cap = path, log, cap

    def append(self, epoch: int, epochs: int, metrics: Mapping[str, float], seconds: float, rate: float) -> None:
        if not self.path:
            return
        line = history_line(epoch, epochs, metrics, seconds, rate,
                            datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")) + "\n"
        try:
            with open(self.path, "a") as f:
                if f.tell() + len(line.encode()) > self.cap:
                    self.log(f"warning: the history file {self.path} is at its cap of {self.cap} bytes "
                             f"(dtr_contract.disk): epoch {epoch} and later are not written to it")
                    self.path = ""
                    return
                f.write(line)
        except OSError as err:
            self.log(f"warning: cannot write the history file {self.path} ({err.strerror}); training goes on")
            self.path = ""


class Progress(tf.keras.callbacks.Callback):
    """Logs `epoch N/M begin`, `resumed from backup at epoch N/M` when BackupAndRestore skipped finished epochs,
    and the epoch-end line (dtr_contract.progress: the operator and `dtr run` read it; the fault tests read all
    three). With a History (the chief's), each epoch's figures also go to the history file.

    Its two halves sit either side of BackupAndRestore (epoch_callbacks puts them in order): this callback,
    before it, times the epoch and appends it to the history; `end_line`, after it, logs the epoch-end line. A
    worker killed between the backup and the line has done the epoch without logging it (it resumes after it);
    the history must not lose it, and an entry written before a backup that never happened is written again by
    the redone epoch, the one the reader keeps."""

    def __init__(self, epochs: int, examples_per_epoch: int, log: Callable[[str], None],
                 history: History | None = None):
        super().__init__()
        self.epochs, self.examples_per_epoch, self.log, self.history = epochs, examples_per_epoch, log, history
        self.first_epoch: int | None = None
        self.epoch_ends: list[float] = []
        self.cpu_ends: list[float] = []  # process CPU seconds (all threads) at each epoch end
        self.started = 0.0
        self.epoch_began = 0.0
        self.durations: list[float] = []  # wall seconds of each epoch this process ran
        self.ended_line = ""  # the last epoch's end line, until end_line logs it
        self.end_line = _EpochEndLine(self)  # the callback that logs it: after BackupAndRestore in the list
        # The step this process's first epoch starts at: step_backup.StepBackup's, after a save inside an epoch.
        self.resumed_step: Callable[[], int] = lambda: 0
        self.steps_per_epoch = 0  # with resumed_step: the first epoch's examples are the steps it ran
        self.first_step = 0

    def on_train_begin(self, logs=None):
        self.started = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        if self.first_epoch is None:
            self.first_epoch, self.first_step = epoch, self.resumed_step()
            if self.first_step > 0:
                self.log(f"resumed from backup at epoch {epoch + 1}/{self.epochs}, step {self.first_step + 1}/"
                         f"{self.steps_per_epoch}")
            elif epoch > 0:
                self.log(f"resumed from backup at epoch {epoch + 1}/{self.epochs}")
        self.log(f"epoch {epoch + 1}/{self.epochs} begin")
        self.epoch_began = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        TERMINATION.epoch_end_begins()  # a SIGTERM from now on waits for end_line (dtr_trainer.sigterm)
        ended = time.perf_counter()
        self.epoch_ends.append(ended)
        self.cpu_ends.append(time.process_time())
        self.durations.append(ended - self.epoch_began)
        rate = self.examples_this_epoch() / max(self.durations[-1], 1e-9)
        left = remaining_seconds(self.durations, self.epochs - (epoch + 1))
        metrics = {k: float(v) for k, v in (logs or {}).items()}
        self.ended_line = epoch_end_line(epoch + 1, self.epochs, metrics, rate, left)
        if self.history is not None:
            self.history.append(epoch + 1, self.epochs, metrics, self.durations[-1], rate)

    def examples_this_epoch(self) -> float:
        """The epoch's examples; the first epoch's after a resume inside it: those of the steps it ran."""
        if len(self.durations) == 1 and self.first_step > 0 and self.steps_per_epoch:
            return self.examples_per_epoch * (self.steps_per_epoch - self.first_step) / self.steps_per_epoch
        return self.examples_per_epoch

    def on_train_end(self, logs=None):
        # One machine-readable line for bench/trainer: wall and CPU seconds of the steady-state window.
        if len(self.epoch_ends) >= 2:
            epochs = len(self.epoch_ends) - 1
            wall = self.epoch_ends[-1] - self.epoch_ends[0]
            cpu = self.cpu_ends[-1] - self.cpu_ends[0]
            self.log(f"window epochs={epochs} examples={self.examples_per_epoch * epochs} "
                     f"wall_s={wall:.4f} cpu_s={cpu:.4f} max_rss_mb={max_rss_mb():.0f}")

    def examples_per_second(self) -> float:
        """Global examples/s; excludes this process's first epoch (tracing) when it can."""
        ends = self.epoch_ends
        if len(ends) >= 2:
            return self.examples_per_epoch * (len(ends) - 1) / (ends[-1] - ends[0])
        if ends:
            first = self.examples_this_epoch() if len(self.durations) == 1 else self.examples_per_epoch
            return first / max(ends[0] - self.started, 1e-9)
        return 0.0


class _EpochEndLine(tf.keras.callbacks.Callback):
    def __init__(self, progress: Progress):
        super().__init__()
        self.progress = progress

    def on_epoch_end(self, epoch, logs=None):
        line, self.progress.ended_line = self.progress.ended_line, ""
        if line:
            self.progress.log(line)
        TERMINATION.epoch_end_done()


class AfterBackup(tf.keras.callbacks.Callback):
    """Calls `then` at each epoch's end, after BackupAndRestore saved it (the chief's copy into a bucket)."""

    def __init__(self, then: Callable[[], object]):
        super().__init__()
        self.then = then

    def on_epoch_end(self, epoch, logs=None):
        self.then()


def epoch_callbacks(stop: StopOnDivergence, progress: Progress, backup_dir: str | None,
                    after_backup: Callable[[], object] | None = None,
                    backup_callback: tf.keras.callbacks.BackupAndRestore | None = None,
                    own: Sequence[tf.keras.callbacks.Callback] = ()) -> list[tf.keras.callbacks.Callback]:
    """fit's callbacks, in the order each epoch's end needs: the divergence check (a diverged epoch is neither
    backed up nor reported), Progress (timing, the history), the user's own (`own`: callbacks(ctx), before the
    backup, so that an EarlyStopping's restored weights are what it saves), BackupAndRestore (weights, optimizer and
    epoch after a restart; kept until the chief has exported; `backup_callback` when given: step_backup.StepBackup),
    `after_backup` (the backup's copy in a bucket), then the epoch-end line (a line means a backed-up epoch)."""
    if backup_callback is None and backup_dir:
        backup_callback = tf.keras.callbacks.BackupAndRestore(backup_dir, delete_checkpoint=False)
    backup = [] if backup_callback is None else [backup_callback]
    copy = [AfterBackup(after_backup)] if backup and after_backup is not None else []
    return [stop, progress, *own, *backup, *copy, progress.end_line]


def learning_rate_of(model: tf.keras.Model, default: float) -> float | None:
    """The optimizer's learning rate now (the run's code may set its own); `default` when it cannot be read as
    one number (a schedule), None without an optimizer."""
    rate = getattr(getattr(model, "optimizer", None), "learning_rate", None)
    if rate is None:
        return None
    try:
        return float(tf.keras.backend.get_value(rate))
    except (TypeError, ValueError):
        return default


class StopOnDivergence(tf.keras.callbacks.Callback):
    """Raises DivergedError at the first NaN or infinite loss (dtr_trainer.divergence), at the end of each
    execution and of each epoch. First in the callback list: its epoch-end check runs before BackupAndRestore
    saves the epoch and before Progress logs it, so neither a backup nor an epoch line holds the diverged loss."""

    def __init__(self, epochs: int, steps_per_epoch: int, learning_rate: float):
        super().__init__()
        self.epochs, self.steps, self.learning_rate = epochs, steps_per_epoch, learning_rate
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self._check(logs, batch + 1)  # Keras passes the index of the execution's last step

    def on_epoch_end(self, epoch, logs=None):
        self._check(logs, self.steps)

    def _check(self, logs, step: int) -> None:
        loss = non_finite_loss(logs)
        if loss is not None:
            rate = learning_rate_of(self.model, self.learning_rate)
            raise DivergedError(diverged_message(loss, self.epoch + 1, self.epochs, step, self.steps, rate))


# The heartbeat's child process: a line on the inherited stderr every `seconds` while its parent lives and is
# neither stopped (SIGSTOP, the freezer) nor stuck in the kernel (state D: a hung volume), as /proc/<pid>/stat says.
_BEAT = """\
import os, sys, time
line, seconds, parent = (sys.argv[1] + "\\n").encode(), float(sys.argv[2]), int(sys.argv[3])
def state():
    try:
        with open(f"/proc/{parent}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "R"
while True:
    time.sleep(seconds)
    if os.getppid() != parent:
        break
    if state() not in ("T", "t", "D"):
        os.write(2, line)
"""


class Heartbeat:
    """While in its `with` block (dtr_trainer.main.run: the peers' rendezvous to the export), `line` (the
    trainer's HEARTBEAT, dtr_contract.progress) goes to stderr every `seconds` from a child process: a worker held
    in a TensorFlow call (waiting on a peer, even holding the GIL) still beats; a stopped or hung one (state T or
    D, what a frozen worker is) does not. Stopped on the way out, an exception too: a failed worker's last log
    line stays its error (the operator quotes it); the child
    also ends by itself once its parent is gone."""

    def __init__(self, line: str, seconds: float = HEARTBEAT_SECONDS, stderr: IO[str] | None = None):
        self.argv = [sys.executable, "-c", _BEAT, line, str(seconds), str(os.getpid())]
        self.stderr = stderr
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Heartbeat:
        self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=self.stderr)  # fmt: skip
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
