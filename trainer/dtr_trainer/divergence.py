"""When a run has diverged: its training loss is no longer a finite number (pure; the Keras callback that acts on
it is progress.StopOnDivergence).

Only the loss is looked at: it is what the optimizer follows, so once it is NaN or infinite the weights are lost
and every later step stays so, while a metric of the run's own may be NaN for a batch without anything being
wrong. The loss in Keras' logs is the epoch's running mean, all-reduced across the workers, so every worker sees
the same value at the same step and stops there: none is left waiting in a collective for the others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

LOSS = "loss"  # Keras' name for the training loss in a callback's logs


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
