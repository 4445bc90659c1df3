"""Early stopping of a sweep's trials: the median stopping rule on the objective each trial reports every epoch
(its status.progress history). Pure.

A running trial is stopped at epoch e when the best value it reached by e is worse than the median of the values the
finished trials had at epoch e (as Optuna's MedianPruner and Vizier's median automated stopping do), once at least
`min_trials` finished trials reached e and e is past `warmup_epochs`. Finished trials only: a running peer's curve
moves, and a rule on it would stop a different trial after each restart of the operator.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MAXIMIZE, MINIMIZE = "maximize", "minimize"


@dataclass(frozen=True)
class MedianRule:
    warmup_epochs: int = 1  # no trial is stopped at or before this epoch
    min_trials: int = 2  # finished trials that reached the epoch, at least


def best(curve: Sequence[float], goal: str) -> float:
    return max(curve) if goal == MAXIMIZE else min(curve)


def worse(value: float, than: float, goal: str) -> bool:
    return value < than if goal == MAXIMIZE else value > than


def median_stop(curve: Sequence[float], finished: Sequence[Sequence[float]], goal: str, metric: str,
                rule: MedianRule) -> str | None:  # fmt: skip
    """Why the trial whose objective so far is `curve` (one value an epoch, from epoch 1) stops now, or None."""
    epoch = len(curve)
    if epoch <= rule.warmup_epochs:
        return None
    at_epoch = [c[epoch - 1] for c in finished if len(c) >= epoch]
    if len(at_epoch) < rule.min_trials:
        return None
    median, reached = statistics.median(at_epoch), best(curve, goal)
    if not worse(reached, median, goal):
        return None
    return (f"its best {metric} by epoch {epoch}, {reached:.4g}, is worse than the median of {len(at_epoch)} "
            f"finished trials at epoch {epoch}, {median:.4g}")  # fmt: skip
