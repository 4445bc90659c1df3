"""When a run has diverged: its training loss is no longer a finite number (the Keras callback that acts on it is
progress.StopOnDivergence), and the record of it in the run's backup directory.

Only the loss is looked at: it is what the optimizer follows, so once it is NaN or infinite the weights are lost
and every later step stays so, while a metric of the run's own may be NaN for a batch without anything being
wrong. The loss in Keras' logs is the epoch's running mean, all-reduced across the workers, so every worker sees
the same value at the same step and stops there: none is left waiting in a collective for the others.

The backup keeps the last finished epoch (the check runs before BackupAndRestore saves one), but training on from
it would diverge again: a worker restarted anyway (restartPolicy OnFailure, until the operator has the TFJob fail)
finds the record beside the backup and stops at once with the same line instead of training.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from dtr_trainer.errors import DivergedError

LOSS = "loss"  # Keras' name for the training loss in a callback's logs
RECORD = "diverged"  # in --backup-dir (per run and uid, dtr_contract.layout.backup_dir): the line the run failed with


def non_finite_loss(logs: Mapping[str, object] | None) -> float | None:
    """The loss when it is NaN or infinite, else None (also when the logs carry no number under `loss`)."""
    value = (logs or {}).get(LOSS)
    try:
        loss = float(value)  # type: ignore[arg-type]  # a NumPy scalar or a float, as Keras gives it
    except (TypeError, ValueError):
        return None
    return None if math.isfinite(loss) else loss


def diverged_message(loss: float, epoch: int, epochs: int, step: int, steps: int, learning_rate: float | None) -> str:
    """The one line the run fails with. `step` is the last step of the execution whose logs showed it (the loss is
    read once per --steps-per-execution steps), so the loss went bad at that step or a little before."""
    rate = f", learning rate {learning_rate:g}" if learning_rate is not None else ""
    return (f"training diverged: the loss became {loss} in epoch {epoch}/{epochs} (by step {step}/{steps}{rate}); "
            "lower the learning rate, or look for NaN or infinite values in the data")


def record(backup_dir: str | None, line: str) -> None:
    """Keep the line beside the backup (each worker writes the same text; atomically, so a reader sees one whole)."""
    if not backup_dir:
        return
    path = Path(backup_dir) / RECORD
    partial = path.with_name(f".{RECORD}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(line + "\n")
        os.replace(partial, path)
    except OSError:
        pass  # the run fails all the same; a restart then trains and diverges again before it stops


def recorded(backup_dir: str | None) -> str | None:
    """The line an earlier container of this run failed with when its loss diverged, else None."""
    if not backup_dir:
        return None
    try:
        return (Path(backup_dir) / RECORD).read_text().strip() or None
    except OSError:
        return None


def restarted_message(line: str) -> str:
    return f"{line} (diverged before this restart: it does not train on from its backup)"


def stop_if_recorded(backup_dir: str | None) -> None:
    """A container restarted after the run's loss diverged stops with the same line."""
    if line := recorded(backup_dir):
        raise DivergedError(restarted_message(line))
