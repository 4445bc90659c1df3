"""Who ran this training (from the pod's env) and the lineage file written beside each exported model.

Pure apart from reading the environment it is given: no TensorFlow import. The operator sets the
variables of dtr_contract.env (operator/dtr_operator/builders.py, `trainer_env`); a trainer started by hand
has none of them, and the lineage says null for each, never fails. The schema is
docs/lineage.schema.json (docs/models.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from dtr_contract import env, summary

# 2: training.code (the run's own code and its SHA-256), training.model/dataset may be null,
# metrics.metric + metrics.evaluation (every figure of the evaluation by name; accuracy only when reported),
# and training.datasetSource (a --dataset-url's URL and SHA-256).
# 3: training.params (spec.training.params), training.validateEvery and training.stoppedEarly (docs/experiments.md).
SCHEMA_VERSION = 3
# In the version directory, beside saved_model.pb: TensorFlow's SavedModel loader (and so TF Serving,
# KServe's TensorFlow runtime, tf.saved_model.load) reads only saved_model.pb, variables/, assets/ and
# fingerprint.pb and ignores other files, as it ignores Keras' keras_metadata.pb (docs/models.md).
LINEAGE_PATH = "lineage.json"


@dataclass(frozen=True)
class RunIdentity:
    """The DistTrainingRun this process trains for; None where the environment does not say."""

    name: str | None = None
    uid: str | None = None
    namespace: str | None = None
    spec: dict | None = None
    image: str | None = None
    sweep: str | None = None  # a sweep's trial: the sweep's name and the trial's index
    trial: int | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str], warn: Callable[[str], None] | None = None) -> RunIdentity:
        def text(key: str) -> str | None:
            return environ.get(key) or None  # unset or empty: unknown

        trial = text(env.RUN_TRIAL)
        return cls(name=text(env.RUN_NAME), uid=text(env.RUN_UID), namespace=text(env.RUN_NAMESPACE),
                   spec=_spec(text(env.RUN_SPEC), warn), image=text(env.TRAINER_IMAGE), sweep=text(env.RUN_SWEEP),
                   trial=int(trial) if trial and trial.isdigit() else None)  # fmt: skip

    def describe(self) -> str:
        """`ns/name (uid u)` for log lines; `unknown run` when started by hand."""
        if not self.name:
            return "unknown run"
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{where} (uid {self.uid})" if self.uid else where

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "uid": self.uid, "namespace": self.namespace}


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _spec(raw: str | None, warn: Callable[[str], None] | None) -> dict | None:
    if raw is None:
        return None
    try:
        spec = json.loads(raw, parse_constant=_no_constant)
    except ValueError:
        spec = None
    if not isinstance(spec, dict):
        if warn:
            warn(f"warning: ${env.RUN_SPEC} is not a JSON object; the lineage records spec: null")
        return None
    return spec


def utc_now() -> str:
    """RFC 3339, UTC, whole seconds: 2026-11-30T17:25:31Z."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Training:
    """What the trainer actually did (its parsed command line and the derived figures)."""

    model: str | None  # the built-in model; None when the run's code defines it
    dataset: str | None  # --dataset as given; None when the run's code did not get one
    code: dict | None  # user.Origin.lineage(): file or module and its SHA-256; None for the built-ins
    seed: int
    epochs: int
    batch_size_per_worker: int
    global_batch: int
    steps_per_epoch: int
    learning_rate: float
    workers: int
    dataset_url: str | None = None  # --dataset-url: then dataset is the file's path in the data cache
    dataset_sha256: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)  # --params: the run's own hyperparameters
    validate_every: int = 1  # --validate-every
    stopped_early: Mapping[str, Any] | None = None  # the summary's stoppedEarly: a callback ended it before the last


@dataclass(frozen=True)
class Figures:
    """The run's final figures, as in the chief's summary (dtr_contract.summary)."""

    evaluation: Mapping[str, float]  # every figure of the held-out evaluation, by Keras' names
    metric: str  # the headline among them
    examples_per_second: float

    def as_json(self) -> dict[str, Any]:
        figures = {name: _finite(value, 6) for name, value in sorted(self.evaluation.items())}
        top = {key: figures[key] for key in (summary.LOSS, summary.ACCURACY) if key in figures}
        return {**top, "examplesPerSecond": _finite(self.examples_per_second, 1), summary.METRIC: self.metric,
                "evaluation": figures}


def document(run: RunIdentity, training: Training, figures: Figures, model_name: str,
             model_version: int, tensorflow_version: str, created_at: str) -> dict[str, Any]:
    """The lineage of one exported version (docs/lineage.schema.json)."""
    return {
        "schemaVersion": SCHEMA_VERSION,
        "modelName": model_name,
        "modelVersion": int(model_version),
        "createdAt": created_at,
        "run": run.as_json(),
        "spec": run.spec,
        "training": {
            "model": training.model,
            "dataset": training.dataset,
            "code": training.code,
            "seed": int(training.seed),
            "epochs": int(training.epochs),
            "batchSizePerWorker": int(training.batch_size_per_worker),
            "globalBatchSize": int(training.global_batch),
            "stepsPerEpoch": int(training.steps_per_epoch),
            "learningRate": float(training.learning_rate),
            "workers": int(training.workers),
            "datasetSource": _dataset_source(training),
            "params": dict(sorted(training.params.items())),
            "validateEvery": int(training.validate_every),
            "stoppedEarly": dict(training.stopped_early) if training.stopped_early else None,
        },
        "metrics": figures.as_json(),
        "tensorflowVersion": tensorflow_version,
        "trainerImage": run.image,
    }


def _dataset_source(training: Training) -> dict[str, str] | None:
    """Where the dataset came from when it was downloaded, and the digest it was checked against."""
    if training.dataset_url is None:
        return None
    return {"url": training.dataset_url, "sha256": str(training.dataset_sha256)}


def _finite(value: float, digits: int) -> float | None:
    """JSON has no NaN or infinity (a diverged run's loss): null instead."""
    value = float(value)
    return round(value, digits) if math.isfinite(value) else None


def render(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"
