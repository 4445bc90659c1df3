"""Saves inside an epoch, so that a restart resumes inside the interrupted epoch, at the step after the save,
instead of at the epoch's start: --backup-on-sigterm (a worker told to stop, SIGTERM, saves with its peers before it
leaves) and --backup-every-steps N (every N steps, rounded up to an execution's end; for a loss without notice).

BackupAndRestore (epoch granularity) stays as it is; `StepBackup` extends it with saves mid-epoch, and
the step to resume at (`dtr_resume_step` in the same checkpoint; -1 at an epoch's end, and absent from a backup
written without the flag: both resume after the epoch, as before). The save is collective (every worker writes,
the chief's copy is kept), so every worker must make it at the same step. Every N steps needs no agreement:
all workers run the same executions, so all reach the same ends. On SIGTERM the agreement goes through the
key-value store of the coordination service that MultiWorkerMirroredStrategy starts (the mechanism TensorFlow's
own PreemptionCheckpointHandler uses):

1. SIGTERM sets a flag (dtr_trainer.sigterm, armed during fit's steps). At the end of the execution under way
   (a tf.function call of --steps-per-execution steps), the worker names the end of the NEXT execution as the
   save point (SAVE_AT; the first worker to name one wins), then waits until every worker has acknowledged it.
   Not this execution's end: a peer may be inside the next one already, waiting for this worker's collectives.
2. Each worker's watcher thread blocks on SAVE_AT; once it has it, it records it, then acknowledges (ACK_<i>).
3. Each worker, at the end of that execution, saves and leaves: the signalled worker 143, the others 138 (their
   peer is leaving: a restart of all). A save point would never be an epoch's last execution: a save there would
   resume after an epoch that never ended (no end line, no history entry); that execution ends the epoch and its
   usual backup instead, and a SIGTERM then stops the worker after the epoch's end line (sigterm.py).

TensorFlow 2.11's own way does not fit here: BackupAndRestore(save_before_preemption=True) turns itself off
unless the metadata server of Google Cloud answers (a request of up to 5 s), PreemptionCheckpointHandler then
refuses CPU hosts on Google Cloud, a non-chief worker restores from its own temporary directory rather than the
chief's, and the step saved is the first of the execution under way, not its last (BackupAndRestore's
save_freq=N has the same off-by-an-execution). docs/trainer.md#a-save-on-sigterm.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import NoReturn

import tensorflow as tf
from keras.distribute.worker_training_state import WorkerTrainingState
from keras.utils import mode_keys
from tensorflow.python.eager import context

from dtr_trainer.errors import EXIT_PEER_LOST
from dtr_trainer.sigterm import TERMINATION

SAVE_AT = "dtr/save-at"  # "<epoch>:<step>": the save point (0-based epoch, index of the execution's last step)
ACK = "dtr/save-at-ack-"  # + the worker's index: it knows the save point
CLOSED = "closed"  # SAVE_AT's value once fit is over: the watcher threads return
NO_STEP = -1  # dtr_resume_step of an epoch's end (the default of a backup without it)


def parse_point(value: str) -> tuple[int, int]:
    epoch, step = value.split(":")
    return int(epoch), int(step)


def next_save_point(
    epoch: int, last_step: int, steps_per_epoch: int, steps_per_execution: int
) -> tuple[int, int] | None:
    """The end of the execution after the one that ended at `last_step`, or None when that execution ends the
    epoch (Keras shortens an execution that would cross it): the epoch's own backup comes there."""
    end = last_step + steps_per_execution
    return None if end >= steps_per_epoch - 1 else (epoch, end)


class Agreement:
    """The save point every worker saves at, agreed through the coordination service (one worker: no peers)."""

    def __init__(self, workers: int, index: int):
        self.workers, self.index = workers, index
        self.point: tuple[int, int] | None = None
        self.proposed = False
        if workers > 1:
            threading.Thread(target=self._watch, name="dtr-save-at-watcher", daemon=True).start()

    def _watch(self) -> None:
        try:
            value = context.context().get_config_key_value(SAVE_AT)
            if value != CLOSED:
                self.point = parse_point(value)  # before the acknowledgement: the proposer goes on once all have it
                context.context().set_config_key_value(f"{ACK}{self.index}", "1")
        except tf.errors.OpError:
            pass  # the service went with its chief: this process is leaving

    def propose(self, point: tuple[int, int]) -> None:
        """Names `point` unless another worker named one first, then waits until every worker knows the one named."""
        self.proposed = True
        if self.workers == 1:
            self.point = point
            return
        try:
            context.context().set_config_key_value(SAVE_AT, f"{point[0]}:{point[1]}")
        except tf.errors.AlreadyExistsError:
            return  # another worker was told to stop first: its point comes through the watcher
        for i in range(self.workers):  # bounded by the SIGTERM's stop (sigterm.SAVE_WAIT_SECONDS)
            context.context().get_config_key_value(f"{ACK}{i}")

    def close(self) -> None:
        if self.workers > 1:
            with contextlib.suppress(tf.errors.OpError):  # another worker closed it (AlreadyExists), or no service
                context.context().set_config_key_value(SAVE_AT, CLOSED)


class _State(WorkerTrainingState):
    """BackupAndRestore's training state with the step to resume at inside the saved epoch."""

    def __init__(self, model: tf.keras.Model, backup_dir: str):
        super().__init__(model, backup_dir, "epoch", False)
        self.resume_step = tf.Variable(NO_STEP, dtype=tf.int64, name="dtr_resume_step")
        self.read_checkpoint_manager.checkpoint.dtr_resume_step = self.resume_step  # the write manager's too
        self.resumed_at = (0, 0)

    def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch, initial_epoch, mode):
        epoch, step = super().maybe_load_initial_counters_from_ckpt(steps_per_epoch, initial_epoch, mode)
        saved_step = int(self.resume_step.numpy())
        if mode == mode_keys.ModeKeys.TRAIN and 0 < saved_step < steps_per_epoch:
            epoch, step = int(self._ckpt_saved_epoch.numpy()), saved_step
        self.resumed_at = (epoch, step)
        return epoch, step


def crosses(previous_end: int, end: int, every: int) -> bool:
    """Whether the execution from previous_end + 1 to end (step indices in the epoch) ran the every-th step."""
    return (end + 1) // every > (previous_end + 1) // every


class StepBackup(tf.keras.callbacks.BackupAndRestore):
    """BackupAndRestore at each epoch's end, plus saves inside the epoch: on SIGTERM (`on_sigterm`, this module's
    docstring) and every `every_steps` steps (0: never), rounded up to an execution's end. Neither kind is made at
    the epoch's last execution: its end backup follows."""

    def __init__(
        self,
        backup_dir: str,
        steps_per_epoch: int,
        steps_per_execution: int,
        workers: int,
        index: int,
        log: Callable[[str], None],
        after_save: Callable[[], object] | None = None,
        on_sigterm: bool = True,
        every_steps: int = 0,
    ):
        super().__init__(backup_dir, save_freq="epoch", delete_checkpoint=False)
        self.steps, self.steps_per_execution = steps_per_epoch, steps_per_execution
        self.workers, self.index, self.log, self.after_save = workers, index, log, after_save
        self.on_sigterm, self.every_steps = on_sigterm, every_steps
        self.agreement: Agreement | None = None
        self._previous_end = -1  # the last execution's last step in this epoch

    def on_train_begin(self, logs=None):
        self._training_state = _State(self.model, self.backup_dir)
        self.model._training_state = self._training_state  # fit reads the epoch and step to resume at there
        self._training_state.restore()
        if self.on_sigterm:
            self.agreement = Agreement(self.workers, self.index)
            TERMINATION.arm(self.log)

    def resumed_step(self) -> int:
        """The step this process's first epoch starts at (0 unless resumed from a save inside an epoch)."""
        return self._training_state.resumed_at[1] if getattr(self, "_training_state", None) else 0

    def _implements_train_batch_hooks(self):
        return True

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        resumed_epoch, resumed_step = self._training_state.resumed_at
        self._previous_end = resumed_step - 1 if epoch == resumed_epoch else -1

    def on_train_batch_begin(self, batch, logs=None):
        pass  # BackupAndRestore's per-execution variable write: a save sets what it needs

    def on_train_batch_end(self, batch, logs=None):
        if self.agreement is not None:
            self._save_on_sigterm(batch)
        if self.every_steps and batch < self.steps - 1 and crosses(self._previous_end, batch, self.every_steps):
            self._save(batch)
        self._previous_end = batch

    def _save_on_sigterm(self, batch: int) -> None:
        agreement = self.agreement
        if agreement.point == (self._current_epoch, batch):
            self._save(batch)
            self._leave(batch)
        if TERMINATION.requested and not agreement.proposed:
            point = next_save_point(self._current_epoch, batch, self.steps, self.steps_per_execution)
            if point is not None:
                agreement.propose(point)

    def on_epoch_end(self, epoch, logs=None):
        self._training_state.resume_step.assign(NO_STEP)
        super().on_epoch_end(epoch, logs)

    def on_train_end(self, logs=None):
        if self.agreement is not None:
            TERMINATION.disarm()
            self.agreement.close()
        super().on_train_end(logs)

    def _save(self, batch: int) -> None:
        """Every worker, at the same step (collective): the state, and the step after `batch` to resume at."""
        state = self._training_state
        state.resume_step.assign(batch + 1)
        state.back_up(epoch=self._current_epoch)
        if self.after_save is not None:
            self.after_save()

    def _leave(self, batch: int) -> NoReturn:
        where = f"epoch {self._current_epoch + 1}, step {batch + 1}/{self.steps}"
        if TERMINATION.requested:
            TERMINATION.stop(
                f"terminated (SIGTERM): saved the training state at {where} with the other workers; "
                "stopping now, the restart resumes there"
            )
        TERMINATION.stop(
            f"a peer was told to stop (SIGTERM): saved the training state at {where} with it; "
            "stopping so that every worker restarts from there",
            EXIT_PEER_LOST,
        )
