"""A trial's point from the trials before it (spec.algorithm: tpe): Optuna's Tree-structured Parzen Estimator, told
every finished trial's point and value (a trial stopped early as pruned, with its curve: TPE ranks it below every
trial that ended, by the last epoch it reached and its value there), asked for the next point. Pure in effect: an
in-memory study made for the one question and dropped (no storage, no thread), its sampler seeded by the sweep's
seed and the trial's index, so the same history gives the same point. The point is written into the sweep's status
before its run is made (observe.written), so a restart never asks again.

Optuna is imported here only, when a tpe sweep needs a point: it and SQLAlchemy cost the operator about 15 MB once
loaded (its peak RSS, measured by importing it after the handlers), which no other sweep pays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from .prune import MAXIMIZE, Curve
from .space import Dimension, Value

STARTUP_TRIALS = 4  # random points until this many trials have finished: TPE needs some history to model


class Outcome(NamedTuple):
    """A finished trial as a search learns from it: its point and value, or (stopped early) no value and its curve."""

    point: Mapping[str, Value]
    value: float | None
    curve: Curve = ()


def _distribution(dim: Dimension) -> Any:
    from optuna import distributions as d

    if dim.kind == "choice":
        return d.CategoricalDistribution(list(dim.choices))
    if dim.kind == "int":
        return d.IntDistribution(int(dim.low), int(dim.high), step=dim.step)
    return d.FloatDistribution(dim.low, dim.high, log=dim.kind == "logUniform")


def _seed(seed: int, index: int) -> int:
    return int.from_bytes(hashlib.sha256(f"tpe/{seed}/{index}".encode()).digest()[:4], "big")


def _told(outcome: Outcome, space: Mapping[str, Any]) -> Any:
    from optuna.trial import TrialState, create_trial

    if outcome.value is not None:
        return create_trial(params=dict(outcome.point), distributions=dict(space), value=outcome.value)
    return create_trial(params=dict(outcome.point), distributions=dict(space), state=TrialState.PRUNED,
                        intermediate_values=dict(outcome.curve))  # fmt: skip


def tpe_point(dims: Sequence[Dimension], seed: int, index: int, goal: str,
              finished: Sequence[Outcome]) -> dict[str, Value]:  # fmt: skip
    """The index-th trial's point, given the finished trials' outcomes."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = {dim.name: _distribution(dim) for dim in dims}
    sampler = optuna.samplers.TPESampler(seed=_seed(seed, index), n_startup_trials=STARTUP_TRIALS)
    study = optuna.create_study(direction="maximize" if goal == MAXIMIZE else "minimize", sampler=sampler)
    for outcome in finished:
        if set(outcome.point) == set(space):  # a point of another space (never: the spec is immutable) is left out
            study.add_trial(_told(outcome, space))
    return dict(study.ask(space).params)
