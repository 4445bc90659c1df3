"""What a sweep does next, from its spec and its trials as observed (the runs it owns): create trials, stop the weak
ones, or finish with the best. Pure: the reconciler observes, this decides, the shell acts, and a sweep's state is its
trials (runs the API keeps) and its status, never only the operator's memory.

A trial is the DistTrainingRun `<sweep>-<index>`; its index picks its point (space.py), so the same trials are drawn
after a restart. A stopped trial (pruned) ends suspended, with the reason on the sweep; a failed one counts against
spec.maxFailedTrials.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import space
from .model_based import Outcome
from .prune import MAXIMIZE, MINIMIZE, Curve, HalvingRule, MedianRule, best, halving_stop, median_stop, worse

GRID, RANDOM, TPE = "grid", "random", "tpe"
ALGORITHMS = (GRID, RANDOM, TPE)
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class SweepSpec:
    dims: tuple[space.Dimension, ...]
    metric: str
    goal: str  # MAXIMIZE | MINIMIZE
    trials: int
    parallel: int
    algorithm: str = RANDOM
    seed: int = 0
    max_failed: int = 0
    median: MedianRule | None = None  # None (and no halving): every trial runs to its end
    halving: HalvingRule | None = None


@dataclass(frozen=True)
class Trial:
    """A trial as observed: its run's phase, the objective at each epoch seen (status.progress), its final value
    (the run's status.metrics, evaluated on the held-out split after training), and whether this sweep stopped it."""

    index: int
    name: str
    phase: str  # the run's status.phase ("" before it has one)
    curve: Curve = ()
    stopped: bool = False
    final: float | None = None
    epochs: int | None = None  # the run's epochs in all (status.progress.epochs), once seen

    @property
    def last_epoch(self) -> bool:
        """Whether its last epoch is the one seen: it ends by itself now, and stopping it would save nothing."""
        return bool(self.curve) and self.epochs is not None and self.curve[-1][0] >= self.epochs

    @property
    def done(self) -> bool:
        return self.stopped or self.phase in TERMINAL

    @property
    def value(self) -> float | None:
        """The objective the trial ends with: its final figure, else the last epoch's."""
        if self.final is not None:
            return self.final
        return self.curve[-1][1] if self.curve else None


@dataclass(frozen=True)
class Decision:
    create: tuple[int, ...] = ()  # trial indexes to create now
    stop: tuple[tuple[str, str], ...] = ()  # (trial name, why)
    phase: str = "Running"  # Running | Succeeded | Failed
    message: str = ""
    best: Trial | None = None
    counts: Mapping[str, int] = field(default_factory=dict)


def parse_sweep(spec: Mapping[str, Any]) -> SweepSpec:
    """SweepSpec of a DistTrainingSweep's spec; space.SpaceError naming the field for what cannot run."""
    dims = space.parse_space(spec.get("space"))
    objective = spec.get("objective") or {}
    metric, goal = objective.get("metric"), objective.get("goal", MAXIMIZE)
    if not isinstance(metric, str) or not metric:
        raise space.SpaceError("spec.objective.metric: name the metric the trials report each epoch, e.g. val_accuracy")
    if goal not in (MAXIMIZE, MINIMIZE):
        raise space.SpaceError(f"spec.objective.goal: {MAXIMIZE} or {MINIMIZE}, not {goal!r}")
    algorithm = spec.get("algorithm", RANDOM)
    if algorithm not in ALGORITHMS:
        raise space.SpaceError(f"spec.algorithm: one of {', '.join(ALGORITHMS)}, not {algorithm!r}")
    trials = int(spec.get("trials", 1))
    if algorithm == GRID:
        trials = min(trials, space.grid_size(dims))  # refuses a continuous dimension, naming it
    median, halving = _early_stopping(spec.get("earlyStopping") or {})
    return SweepSpec(dims, metric, goal, trials, max(1, int(spec.get("parallelTrials", 1))), algorithm,
                     int(spec.get("seed", 0)), int(spec.get("maxFailedTrials", 0)), median, halving)  # fmt: skip


def _early_stopping(stopping: Mapping[str, Any]) -> tuple[MedianRule | None, HalvingRule | None]:
    if "median" in stopping and "halving" in stopping:
        raise space.SpaceError("spec.earlyStopping: median or halving, not both")
    median = halving = None
    if "median" in stopping:
        body = stopping["median"] or {}
        median = MedianRule(int(body.get("warmupEpochs", 1)), int(body.get("minTrials", 2)))
    if "halving" in stopping:
        body = stopping["halving"] or {}
        halving = HalvingRule(int(body.get("minEpochs", 1)), int(body.get("reductionFactor", 3)))
    return median, halving


def point(sweep: SweepSpec, index: int, finished: Sequence[Outcome] = ()) -> dict[str, space.Value]:
    """The index-th trial's point; tpe's from the finished trials' outcomes (model_based.py)."""
    if sweep.algorithm == GRID:
        return space.grid_point(sweep.dims, index)
    if sweep.algorithm == TPE:
        from .model_based import tpe_point

        return tpe_point(sweep.dims, sweep.seed, index, sweep.goal, finished)
    return space.random_point(sweep.dims, sweep.seed, index)


def best_trial(sweep: SweepSpec, trials: Sequence[Trial]) -> Trial | None:
    """The finished, not failed trial whose objective is best (the lowest index on a tie)."""
    scored = [t for t in trials if t.value is not None and t.phase == "Succeeded" and not t.stopped]
    chosen: Trial | None = None
    for trial in sorted(scored, key=lambda t: t.index):
        if chosen is None or worse(chosen.value, trial.value, sweep.goal):  # type: ignore[arg-type]
            chosen = trial
    return chosen


def _judged(trial: Trial) -> bool:
    """Whether the median rule looks at the trial: running, with a curve, not at its last epoch already."""
    return not trial.done and bool(trial.curve) and not trial.last_epoch


def _stops(sweep: SweepSpec, trials: Sequence[Trial]) -> tuple[tuple[str, str], ...]:
    out = []
    for trial in filter(_judged, trials):
        if why := _why_stop(sweep, trial, trials):
            out.append((trial.name, why))
    return tuple(out)


def _why_stop(sweep: SweepSpec, trial: Trial, trials: Sequence[Trial]) -> str | None:
    """The rule's reason to stop the trial now: the median of the finished trials' curves, or successive halving
    among every trial's but the failed ones."""
    if sweep.median is not None:
        finished = [t.curve for t in trials if t.phase == "Succeeded" and not t.stopped]
        return median_stop(trial.curve, finished, sweep.goal, sweep.metric, sweep.median)
    if sweep.halving is not None:
        others = [t.curve for t in trials if t.name != trial.name and t.phase != "Failed"]
        return halving_stop(trial.curve, others, sweep.goal, sweep.metric, sweep.halving)
    return None


def _counts(trials: Sequence[Trial], stop: Sequence[tuple[str, str]], running: int) -> dict[str, int]:
    stopped = [t for t in trials if t.stopped]
    return {"created": len(trials), "running": running, "stopped": len(stopped) + len(stop),
            "failed": sum(t.phase == "Failed" for t in trials if not t.stopped),
            "succeeded": sum(t.phase == "Succeeded" for t in trials if not t.stopped)}  # fmt: skip


def _to_create(sweep: SweepSpec, made: int, running: int) -> tuple[int, ...]:
    """The next indexes, as many as free slots and trials left allow."""
    room = max(0, min(sweep.parallel - running, sweep.trials - made))
    return tuple(range(made, made + room))


def _failed(sweep: SweepSpec, running: Sequence[Trial], counts: dict[str, int], leader: Trial | None) -> Decision:
    """More trials failed than spec.maxFailedTrials: the sweep fails, and stops the trials still running."""
    return Decision(stop=tuple((t.name, "the sweep failed") for t in running), phase="Failed", best=leader,
                    counts=counts, message=f"{counts['failed']} trials failed, more than spec.maxFailedTrials "
                                           f"({sweep.max_failed})")  # fmt: skip


def decide(sweep: SweepSpec, trials: Sequence[Trial]) -> Decision:
    """What to do now, given every trial the sweep has made."""
    stop = _stops(sweep, trials)
    stopping = {name for name, _ in stop}
    running = [t for t in trials if not t.done and t.name not in stopping]
    counts, leader = _counts(trials, stop, len(running)), best_trial(sweep, trials)
    if counts["failed"] > sweep.max_failed:
        return _failed(sweep, running, counts, leader)
    create = _to_create(sweep, len(trials), len(running))
    if create or running or stop:
        return Decision(create=create, stop=stop, best=leader, counts=counts,
                        message=f"{len(trials) + len(create)} of {sweep.trials} trials started")  # fmt: skip
    if leader is None:
        return Decision(phase="Failed", counts=counts, message=f"no trial reported {sweep.metric} to the end")
    return Decision(phase="Succeeded", best=leader, counts=counts,
                    message=f"best {sweep.metric} {leader.value:.4g}: trial {leader.name}")


__all__ = ["ALGORITHMS", "GRID", "MAXIMIZE", "MINIMIZE", "RANDOM", "TPE", "Decision", "SweepSpec", "Trial", "best",
           "best_trial", "decide", "parse_sweep", "point"]  # fmt: skip
