"""A sweep's search space (spec.space of a DistTrainingSweep): its dimensions read from the spec, refused with the field
named, and the point of each trial. Pure: a trial's point is a function of the sweep's seed and the trial's index
alone, so an operator that restarts draws the same trials again (nothing of a sweep lives only in memory).

    space:
      learningRate: {logUniform: {min: 0.0001, max: 0.1}}
      batchSizePerWorker: {choice: [16, 32, 64]}
      width: {int: {min: 16, max: 128, step: 16}}      # any other name: spec.training.params.width
      dropout: {uniform: {min: 0.0, max: 0.5}}

Grid search takes the dimensions it can enumerate (choice, int) and refuses the others (which points of a
uniform range would a grid take?).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Names that set a field of the run's spec.training; every other name is one of spec.training.params.
TRAINING_FIELDS = ("learningRate", "batchSizePerWorker")
KINDS = ("choice", "int", "uniform", "logUniform")
MAX_DIMENSIONS = 16
MAX_CHOICES = 64
MAX_GRID_POINTS = 10_000  # a grid larger than this is refused: no sweep runs that many trials

Value = bool | int | float | str


class SpaceError(ValueError):
    """A space the sweep cannot search: the message names the field (spec.space.<name>...)."""


@dataclass(frozen=True)
class Dimension:
    name: str
    kind: str  # one of KINDS
    choices: tuple[Value, ...] = ()
    low: float = 0.0
    high: float = 0.0
    step: int = 1

    def enumerable(self) -> bool:
        return self.kind in ("choice", "int")

    def points(self) -> tuple[Value, ...]:
        """Every value of a choice or int dimension, in order (grid search)."""
        if self.kind == "choice":
            return self.choices
        if self.kind == "int":
            return tuple(range(int(self.low), int(self.high) + 1, self.step))
        raise SpaceError(f"spec.space.{self.name}: a {self.kind} range has no grid points; use choice or int")

    def draw(self, rng: random.Random) -> Value:
        if self.kind == "choice":
            return self.choices[rng.randrange(len(self.choices))]
        if self.kind == "int":
            return rng.choice(self.points())
        if self.kind == "uniform":
            return rng.uniform(self.low, self.high)
        return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))  # logUniform


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpaceError(f"{where}: must be a finite number, not {value!r}")
    return float(value)


def _bounds(where: str, kind: str, body: Any) -> tuple[float, float]:
    if not isinstance(body, Mapping) or "min" not in body or "max" not in body:
        raise SpaceError(f"{where}: must be a map with min and max")
    allowed = {"min", "max", "step"} if kind == "int" else {"min", "max"}
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise SpaceError(f"{where}: unknown field {unknown[0]!r} ({', '.join(sorted(allowed))})")
    low, high = _number(f"{where}.min", body["min"]), _number(f"{where}.max", body["max"])
    if low > high:
        raise SpaceError(f"{where}: min {body['min']} is more than max {body['max']}")
    if kind == "logUniform" and low <= 0:
        raise SpaceError(f"{where}.min: must be more than 0 for a log-uniform range, not {body['min']}")
    return low, high


def _range(name: str, kind: str, body: Any) -> Dimension:
    where = f"spec.space.{name}.{kind}"
    low, high = _bounds(where, kind, body)
    if kind != "int":
        return Dimension(name, kind, low=low, high=high)
    step = body.get("step", 1)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (body["min"], body["max"], step)) or step < 1:
        raise SpaceError(f"{where}: min, max and step must be integers, step at least 1")
    return Dimension(name, kind, low=low, high=high, step=step)


def _choice(name: str, body: Any) -> Dimension:
    where = f"spec.space.{name}.choice"
    if not isinstance(body, Sequence) or isinstance(body, str) or not body:
        raise SpaceError(f"{where}: must be a non-empty list of values")
    if len(body) > MAX_CHOICES:
        raise SpaceError(f"{where}: at most {MAX_CHOICES} values, not {len(body)}")
    for value in body:
        if not isinstance(value, (bool, int, float, str)):
            raise SpaceError(f"{where}: values are numbers, strings or booleans, not {value!r}")
    return Dimension(name, "choice", choices=tuple(body))


def _dimension(name: str, body: Any) -> Dimension:
    if not isinstance(body, Mapping) or len(body) != 1:
        raise SpaceError(f"spec.space.{name}: must be exactly one of {', '.join(KINDS)}")
    ((kind, value),) = body.items()
    if kind not in KINDS:
        raise SpaceError(f"spec.space.{name}: unknown distribution {kind!r} (one of {', '.join(KINDS)})")
    return _choice(name, value) if kind == "choice" else _range(name, kind, value)


def _positive_ints(dim: Dimension) -> bool:
    values = dim.points() if dim.enumerable() else ()
    return bool(values) and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)


def parse_space(space: Any) -> tuple[Dimension, ...]:
    """The dimensions of spec.space, by name; SpaceError naming the field for anything a sweep cannot search."""
    if not isinstance(space, Mapping) or not space:
        raise SpaceError("spec.space: must name at least one dimension (learningRate, batchSizePerWorker or a param)")
    if len(space) > MAX_DIMENSIONS:
        raise SpaceError(f"spec.space: at most {MAX_DIMENSIONS} dimensions, not {len(space)}")
    dims = tuple(_dimension(name, body) for name, body in sorted(space.items()))
    if any(d.name == "batchSizePerWorker" and not _positive_ints(d) for d in dims):
        raise SpaceError("spec.space.batchSizePerWorker: must be a choice or int of positive integers")
    return dims


def grid_size(dims: Sequence[Dimension]) -> int:
    size = 1
    for dim in dims:
        size *= len(dim.points())
    return size


def grid_point(dims: Sequence[Dimension], index: int) -> dict[str, Value]:
    """The index-th point of the grid (the last dimension varies fastest); IndexError past its end."""
    if grid_size(dims) > MAX_GRID_POINTS:
        raise SpaceError(f"spec.space: a grid of {grid_size(dims)} points; at most {MAX_GRID_POINTS}")
    point = next(itertools.islice(itertools.product(*(d.points() for d in dims)), index, None), None)
    if point is None:
        raise IndexError(index)
    return dict(zip((d.name for d in dims), point, strict=True))


def random_point(dims: Sequence[Dimension], seed: int, index: int) -> dict[str, Value]:
    """The index-th random point: drawn from a generator seeded by (seed, index), the same after any restart."""
    digest = hashlib.sha256(f"{seed}/{index}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    return {dim.name: dim.draw(rng) for dim in dims}


def apply_point(training: Mapping[str, Any], point: Mapping[str, Value]) -> dict[str, Any]:
    """A trial's spec.training: the template's, with the point's training fields set and the rest in params."""
    out = dict(training)
    params = dict(out.get("params") or {})
    for name, value in point.items():
        if name in TRAINING_FIELDS:
            out[name] = value
        else:
            params[name] = value
    if params:
        out["params"] = params
    return out
