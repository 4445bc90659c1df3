"""Early stopping of a sweep's trials: the median stopping rule on the objective each trial reports every epoch
(status.progress, as the sweep's status keeps it: an epoch the operator's poll did not see is missing, and a
trial's value at it is that of the nearest earlier epoch it reported). Pure.

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


Curve = tuple[tuple[int, float], ...]  # (epoch, value) in epoch order; a run's progress may skip epochs


def value_at(curve: Curve, epoch: int) -> float | None:
    """The value the curve had at `epoch`: that of the nearest reported epoch at or before it (None before any)."""
    found = None
    for at, value in curve:
        if at > epoch:
            break
        found = value
    return found


def median_stop(curve: Curve, finished: Sequence[Curve], goal: str, metric: str, rule: MedianRule) -> str | None:
    """Why the trial whose objective so far is `curve` stops now, or None. Its epoch is its last reported one; a
    finished trial counts at that epoch when it trained that far, with its value at the nearest epoch reported."""
    if not curve:
        return None
    epoch = curve[-1][0]
    if epoch <= rule.warmup_epochs:
        return None
    at_epoch = [v for c in finished if c and c[-1][0] >= epoch and (v := value_at(c, epoch)) is not None]
    if len(at_epoch) < rule.min_trials:
        return None
    median, reached = statistics.median(at_epoch), best([v for _, v in curve], goal)
    if not worse(reached, median, goal):
        return None
    return (f"its best {metric} by epoch {epoch}, {reached:.4g}, is worse than the median of {len(at_epoch)} "
            f"finished trials at epoch {epoch}, {median:.4g}")  # fmt: skip
