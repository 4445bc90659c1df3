"""The DistTrainingSweep's API as tables, in the run's vocabulary: its spec (schema.Field, as fields.py declares the
run's) and its status (status_fields.StatusField). sweep/crd.py renders both into crds/disttrainingsweep.yaml and
docs/gen.py the spec's rows of docs/experiments.md. Pure.

The template's spec is the run's spec table itself (fields.SPEC under another name: a run's one-rule-per-field
immutability is the run's, the sweep's whole spec is immutable), so a template a run would be refused for is
refused at `kubectl apply` of the sweep, naming the field under spec.template.spec.
"""

from __future__ import annotations

import dataclasses

from ..fields import SPEC
from ..schema import Field, Pattern, Rule
from ..status_fields import StatusField
from .decide import ALGORITHMS, RANDOM
from .prune import MAXIMIZE, MINIMIZE
from .space import KINDS, MAX_CHOICES, MAX_DIMENSIONS

MAX_TRIALS = 50  # each trial's curve lives in the sweep's status: bounded so that the status stays small
MAX_PARALLEL = 16
MAX_CURVE = 200  # objective values kept per trial (observe.MAX_POINTS)

# named=False: the API server puts the range's path (spec.space[lr].int) before these messages itself.
_MIN_MAX = Rule("self.min <= self.max", "min must be at most max", lambda r: r["min"] <= r["max"], named=False)


def _range(kind: str, number: str, description: str, *more: Field, rules: tuple[Rule, ...] = ()) -> Field:
    size = "int64" if number == "integer" else None
    bounds = (Field("min", number, "The range's low end.", format=size),
              Field("max", number, "The range's high end.", format=size))  # fmt: skip
    return Field(kind, "object", description, fields=(*bounds, *more), rules=(_MIN_MAX, *rules),
                 extra={"required": ["min", "max"]})  # fmt: skip


DIMENSION = Field("dimension", "object", f"Exactly one of {', '.join(KINDS)}.", fields=(
    Field("choice", "array", f"The values to choose from: numbers, strings or booleans (at most {MAX_CHOICES}).",
          items=Field("value", "scalar"), max_items=MAX_CHOICES, extra={"minItems": 1}),
    _range("int", "integer", "Integers from min to max, step apart.",
           Field("step", "integer", "The distance between two values.", default=1, format="int64", minimum=1)),
    _range("uniform", "number", "Any number from min to max, evenly."),
    _range("logUniform", "number", "Any number from min to max, evenly on a log scale (a learning rate).",
           rules=(Rule("self.min > 0.0", "min must be more than 0 for a log-uniform range", lambda r: r["min"] > 0,
                       named=False),)),
), extra={"minProperties": 1, "maxProperties": 1})  # fmt: skip

SWEEP_SPEC = Field("spec", "object", fields=(
    Field("template", "object", "The trials' DistTrainingRun: its spec, which each trial's point changes.",
          fields=(dataclasses.replace(SPEC, name="spec", description="A DistTrainingRun's spec (docs/api.md)."),),
          extra={"required": ["spec"]}),
    Field("space", "map", "The dimensions searched, by name: learningRate and batchSizePerWorker set spec.training's "
          f"fields, any other name a param (spec.training.params). At most {MAX_DIMENSIONS} dimensions.",
          items=DIMENSION, max_items=MAX_DIMENSIONS, extra={"minProperties": 1}),
    Field("objective", "object", "What the sweep judges the trials by.", fields=(
        Field("metric", "string", "A metric the trials report each epoch (val_accuracy, val_loss, ...).",
              max_length=64, pattern=Pattern("[A-Za-z_][A-Za-z0-9_]*", "must be a Keras metric name")),
        Field("goal", "string", "Whether higher or lower is better.", default=MAXIMIZE, enum=(MAXIMIZE, MINIMIZE)),
    ), extra={"required": ["metric"]}),
    Field("trials", "integer", "Trials in all ({bounds}; grid search: at most the grid's points).", default=8,
          format="int32", minimum=1, maximum=MAX_TRIALS),
    Field("parallelTrials", "integer", "Trials running at once ({bounds}).", default=2, format="int32", minimum=1,
          maximum=MAX_PARALLEL),
    Field("algorithm", "string", "random: points drawn from the space, from spec.seed and each trial's index; grid: "
          "every point of the choice and int dimensions, in order.", default=RANDOM, enum=ALGORITHMS),
    Field("seed", "integer", "The random points' seed: the same seed, the same trials.", default=0, format="int32",
          minimum=0, maximum=2**31 - 1),
    Field("maxFailedTrials", "integer", "Trials that may fail before the sweep fails ({bounds}).", default=0,
          format="int32", minimum=0, maximum=MAX_TRIALS),
    Field("earlyStopping", "object", "How weak trials are stopped early; none: every trial runs to its end.", fields=(
        Field("median", "object", "Stop a trial whose best objective by an epoch is worse than the median of the "
              "finished trials' at that epoch.", fields=(
            Field("warmupEpochs", "integer", "No trial is stopped at or before this epoch ({bounds}).", default=1,
                  format="int32", minimum=0, maximum=10000),
            Field("minTrials", "integer", "Finished trials that must have reached an epoch to judge there ({bounds}).",
                  default=2, format="int32", minimum=1, maximum=MAX_TRIALS),
        )),
        Field("halving", "object", "Successive halving (asynchronous): at epochs minEpochs, minEpochs x "
              "reductionFactor, ... a trial goes on only when its best objective by then is among the best 1 in "
              "reductionFactor of the trials that reached that epoch; not with median.", fields=(
            Field("minEpochs", "integer", "The first epoch a trial is judged at ({bounds}).", default=1,
                  format="int32", minimum=1, maximum=10000),
            Field("reductionFactor", "integer", "1 in this many trials goes on at each judged epoch ({bounds}).",
                  default=3, format="int32", minimum=2, maximum=10),
        )),
    ), rules=(Rule("!(has(self.median) && has(self.halving))", "median or halving, not both",
                   lambda v: not ("median" in v and "halving" in v)),)),
), rules=(Rule("self == oldSelf", "is immutable: create a new DistTrainingSweep", lambda _: True),),
   extra={"required": ["template", "space", "objective"]})  # fmt: skip

_ATOMIC = {"x-kubernetes-list-type": "atomic"}
_POINT = StatusField("point", "object", "The trial's point: the space's names and values.",
                     extra={"x-kubernetes-preserve-unknown-fields": True})  # fmt: skip
_COUNT = ("created", "running", "succeeded", "failed", "stopped")

SWEEP_STATUS = StatusField("status", "object", fields=(
    StatusField("phase", "string", "Running, Succeeded or Failed."),
    StatusField("reason", "string", "InvalidSweep: the operator cannot run the spec (the message names the field)."),
    StatusField("message", "string", "One line about the current state; a finished sweep's names its best trial."),
    StatusField("observedGeneration", "integer", "The generation of the spec the status is of."),
    StatusField("trialsDone", "string", "Trials finished (succeeded, failed or stopped) out of spec.trials (5/8)."),
    StatusField("counts", "object", "Trials by what became of them.",
                fields=tuple(StatusField(k, "integer") for k in _COUNT)),
    StatusField("best", "object", "The best trial so far.", fields=(
        StatusField("run", "string", "Its DistTrainingRun."),
        StatusField("trial", "integer", "Its index."),
        StatusField("value", "number", "Its objective: the final evaluation's for a val_ metric, else the last "
                    "epoch's."),
        _POINT,
        StatusField("model", "string", "Its exported model (the run's status.model.path)."),
    )),
    StatusField("trials", "array", "Every trial made: the sweep's memory (nothing of it lives only in the "
                "operator's).", extra={**_ATOMIC, "maxItems": MAX_TRIALS}, items=StatusField("trial", "object", fields=(
        StatusField("index", "integer", "Its index: its point's seed.", required=True),
        StatusField("run", "string", "Its DistTrainingRun, <sweep>-<index>.", required=True),
        StatusField("phase", "string", "Its run's phase as last seen; Stopped: stopped early (its run deleted)."),
        _POINT,
        StatusField("curve", "array", f"[epoch, value] of the objective at each epoch seen (at most {MAX_CURVE}).",
                    extra={**_ATOMIC, "maxItems": MAX_CURVE},
                    items=StatusField("point", "array", items=StatusField("number", "number"))),
        StatusField("final", "number", "The objective the run ended with (its status.metrics)."),
        StatusField("epochs", "integer", "The run's epochs in all: a trial at its last one is not stopped."),
        StatusField("reason", "string", "Why it was stopped, or failed."),
    ))),
    StatusField("startTime", "string", "When the operator first took the sweep.", format="date-time"),
    StatusField("completionTime", "string", "When it ended.", format="date-time"),
))  # fmt: skip
