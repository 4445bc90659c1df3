"""The experiment loop's part of a training (docs/experiments.md): the run's own hyperparameters (--params, read as
ctx.params), the eval split evaluated during fit every N epochs (--validate-every: the val_* figures of each
epoch's line, the history and status.progress), the callbacks of the user's own (`callbacks(ctx)` in their file),
checked before fit, and, when one of them stops the training early, which one, at which epoch and why (the
summary's stoppedEarly; the run's status says it).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtr_contract import flags
from dtr_contract import params as run_params

from dtr_trainer import userdata
from dtr_trainer.argtypes import non_negative_int
from dtr_trainer.errors import UserCodeError
from dtr_trainer.user import GUIDE, Code, Context, call, fail

DEFAULT_VALIDATE_EVERY = 1  # spec.training.validateEvery's default: every epoch
# Keras' callbacks that write files, and the attribute that says where: under ctx.log_dir only.
FILE_ATTRIBUTES = {"ModelCheckpoint": "filepath", "CSVLogger": "filename", "TensorBoard": "log_dir"}


def _params(text: str) -> dict[str, run_params.Value]:
    try:
        return run_params.from_flag(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(flags.PARAMS, type=_params, default={}, metavar="JSON",
                   help="the run's own hyperparameters, a JSON object of names to numbers, strings and booleans: "
                        "ctx.params in your code (docs/experiments.md)")
    p.add_argument(flags.VALIDATE_EVERY, type=non_negative_int, default=DEFAULT_VALIDATE_EVERY, metavar="N",
                   help="evaluate the eval split every N epochs during training (val_* figures); 0: only once, "
                        f"after the last epoch [{DEFAULT_VALIDATE_EVERY}]")


def fit_validation(validation_data: Any, every: int) -> dict[str, Any]:
    """fit's validation arguments: the eval pipeline every N epochs, or none."""
    return {"validation_data": validation_data, "validation_freq": every} if every > 0 else {}


# ---------------------------------------------------------------- callbacks of the user's own


def _inside(path: str, directory: str | None) -> bool:
    if not directory:
        return False
    root = os.path.realpath(directory)
    return os.path.realpath(path) == root or os.path.realpath(path).startswith(root + os.sep)


def callback_problem(callback: Any, log_dir: str | None, keras_callback: type) -> str | None:
    """Why the harness refuses one of callbacks(ctx)'s items, or None (pure but for the paths' realpath)."""
    kind = type(callback).__name__
    if not isinstance(callback, keras_callback):
        return f"is a {kind}, not a tf.keras.callbacks.Callback"
    if kind == "BackupAndRestore":
        return "is a BackupAndRestore: the harness keeps the run's backup itself (resume after a restart)"
    attribute = FILE_ATTRIBUTES.get(kind)
    path = getattr(callback, attribute, None) if attribute else None
    if isinstance(path, (str, os.PathLike)) and not _inside(os.fspath(path), log_dir):
        where = f"under ctx.log_dir ({log_dir})" if log_dir else "nowhere (this run has no ctx.log_dir)"
        return f"is a {kind} writing to {os.fspath(path)}: a callback may write files only {where}"
    return None


def user_callbacks(code: Code, ctx: Context) -> list:
    """callbacks(ctx)'s Keras callbacks, checked; none when the code defines no callbacks."""
    import tensorflow as tf

    if code.callbacks is None:
        return []
    given = call(code, code.callbacks, ctx)
    if given is None:
        return []
    if isinstance(given, tf.keras.callbacks.Callback):
        given = [given]
    if not isinstance(given, (list, tuple)):
        raise fail(code.callbacks, f"returned a {type(given).__name__}: return a list of tf.keras.callbacks."
                                   f"Callback ({GUIDE}#callbacks)")
    for i, callback in enumerate(given):
        if (why := callback_problem(callback, ctx.log_dir, tf.keras.callbacks.Callback)) is not None:
            raise fail(code.callbacks, f"its item {i} {why} ({GUIDE}#callbacks)", UserCodeError)
    return list(given)


@dataclass
class Stop:
    """The epoch a callback stopped the training at, which one, and why."""

    epoch: int = 0  # 1-based; 0: none stopped it
    by: str = ""
    reason: str = ""


def stop_reason(callback: Any) -> str:
    """Why a callback stopped the training, in words: EarlyStopping's monitor and patience, else its name."""
    if type(callback).__name__ == "EarlyStopping" and hasattr(callback, "best_epoch"):
        best = getattr(callback, "best", None)
        restored = " (its weights restored)" if getattr(callback, "restore_best_weights", False) else ""
        figure = f" {best:.4f}" if isinstance(best, float) else ""
        return (f"EarlyStopping: {callback.monitor} did not improve for {callback.patience} epoch(s); best"
                f"{figure} at epoch {callback.best_epoch + 1}{restored}")
    return f"{type(callback).__name__} set model.stop_training"


def watched(callbacks: Sequence[Any], stop: Stop) -> list:
    """The user's callbacks, each followed by a watch that notes the first to stop the training (model.stop_training),
    which is how Keras' fit learns it should end after this epoch."""
    import tensorflow as tf

    class Watch(tf.keras.callbacks.Callback):
        def __init__(self, after: Any):
            super().__init__()
            self.after = after

        def on_epoch_end(self, epoch, logs=None):
            if getattr(self.model, "stop_training", False) and not stop.epoch:
                stop.epoch, stop.by, stop.reason = epoch + 1, type(self.after).__name__, stop_reason(self.after)

    return [item for callback in callbacks for item in (callback, Watch(callback))]


def stopped_early(stop: Stop, epochs: int, log: Callable[[str], None]) -> dict[str, Any] | None:
    """The summary's stoppedEarly (dtr_contract.summary), logged; None: trained to the last epoch."""
    if not stop.epoch or stop.epoch >= epochs:
        return None
    log(f"stopped early at epoch {stop.epoch} of {epochs}: {stop.reason}")
    return {"epoch": stop.epoch, "epochs": epochs, "reason": stop.reason}


def restore_best(callbacks: Sequence[Any], stop: Stop, epochs: int, model: Any, log: Callable[[str], None]) -> None:
    """The best weights of an EarlyStopping that asks for them (restore_best_weights) put back when it did not stop
    the training itself, which is the only time TensorFlow 2.11's restores them (the run reached its last epoch, or
    another callback stopped it), so that the model exported is the best one either way. Every worker alike: their
    EarlyStoppings saw the same all-reduced figures."""
    last = stop.epoch or epochs  # the last epoch trained, 1-based
    for callback in callbacks:
        best = getattr(callback, "best_weights", None)
        if type(callback).__name__ != "EarlyStopping" or not callback.restore_best_weights or best is None:
            continue
        if callback.stopped_epoch == 0 and callback.best_epoch + 1 < last:
            model.set_weights(best)
            log(f"restored the best weights, of epoch {callback.best_epoch + 1} ({callback.monitor} "
                f"{float(callback.best):.4f}), before the export: EarlyStopping(restore_best_weights=True)")
        return


def sizes(loaded: userdata.Data) -> str:
    """`600 train / 150 eval / 150 test examples` for the log ('unknown' for a Dataset of unknown size)."""
    test = f" / {loaded.test.size or 'unknown'} test" if loaded.test else ""
    return f"{loaded.train_size} train / {loaded.eval.size or 'unknown'} eval{test} examples"


def shown(params: Mapping[str, Any]) -> str:
    return run_params.shown(params) if params else "none"
