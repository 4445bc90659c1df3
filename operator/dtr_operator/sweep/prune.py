"""Early stopping of a sweep's trials: the median stopping rule, or successive halving, on the objective each trial
reports every epoch (status.progress, as the sweep's status keeps it: an epoch the operator's poll did not see is
missing, and a trial's value at it is that of the nearest earlier epoch it reported). Pure.

A running trial is stopped at epoch e when the best value it reached by e is worse than the median of the values the
finished trials had at epoch e (as Optuna's MedianPruner and Vizier's median automated stopping do), once at least
`min_trials` finished trials reached e and e is past `warmup_epochs`. Finished trials only: a running peer's curve
moves, and a rule on it would stop a different trial after each restart of the operator.

Or successive halving, asynchronous (ASHA: Li et al. 2020; Optuna's SuccessiveHalvingPruner): rungs at epochs
m, m*f, m*f^2, ... (`min_epochs` m, `reduction_factor` f); a trial at rung r goes on only when its best value by r is
among the best max(1, n // f) of the n trials that reached r, running, finished or stopped alike. A value at a rung
no longer moves once a trial is past it, so the decision is one of the curves observed, whatever the operator
restarts; a later trial is judged against every one that reached the rung, earlier or not.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MAXIMIZE, MINIMIZE = "maximize", "minimize"


@dataclass(frozen=True)
class HalvingRule:
    min_epochs: int = 1  # the first rung
    reduction_factor: int = 3  # each rung keeps the best 1 in this many of the trials that reached it


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


def best_by(curve: Curve, epoch: int, goal: str) -> float | None:
    """The best value the curve reached at or before `epoch` (None before any)."""
    values = [value for at, value in curve if at <= epoch]
    return best(values, goal) if values else None


def rung_of(epoch: int, rule: HalvingRule) -> int | None:
    """The last rung at or before `epoch` (an epoch count), None before the first."""
    if epoch < rule.min_epochs:
        return None
    rung = rule.min_epochs
    while rung * rule.reduction_factor <= epoch:
        rung *= rule.reduction_factor
    return rung


def halving_stop(curve: Curve, others: Sequence[Curve], goal: str, metric: str, rule: HalvingRule) -> str | None:
    """Why the trial whose objective so far is `curve` stops now, or None: at its last rung, its best value is not
    among the best max(1, n // reduction_factor) of the n trials (it and `others`) that reached that rung."""
    rung = rung_of(curve[-1][0], rule) if curve else None
    mine = best_by(curve, rung, goal) if rung is not None else None
    if rung is None or mine is None:
        return None
    reached = [v for c in others if c and c[-1][0] >= rung and (v := best_by(c, rung, goal)) is not None]
    kept = max(1, (len(reached) + 1) // rule.reduction_factor)
    ranked = sorted([mine, *reached], reverse=goal == MAXIMIZE)
    if not worse(mine, ranked[kept - 1], goal):
        return None
    return (f"its best {metric} by epoch {rung}, {mine:.4g}, is not among the best {kept} of the {len(reached) + 1} "
            f"trials that reached epoch {rung} (successive halving: 1 in {rule.reduction_factor} goes on)")
