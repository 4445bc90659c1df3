"""What the chief sends to an MLflow tracking server (docs/tracking.md), pure: the REST calls as values, no I/O,
no clock of its own (the times are given). tracking.py sends them.

The MLflow REST API 2.0 (https://mlflow.org/docs/latest/rest-api.html), spoken with the standard library so that
the trainer image carries no mlflow package (it would bring pandas, SQLAlchemy, Flask... into the TF 2.11 image):

- the experiment: the run's model name (spec.export.modelName), found or created; a sweep's trials share their
  sweep's (named as the sweep), one MLflow run per trial, tagged with the sweep and the trial's index;
- one MLflow run per DistTrainingRun and exported version, found again by its tag KEY_TAG when the chief is
  restarted (runs/search), so a resumed run logs into the run it began;
- params: the training settings as the lineage file names them (lineage.document's `training`, flattened:
  `learningRate`, `batchSizePerWorker`, `code.sha256`, `params.<name>` for spec.training.params), those known
  before training at the start, all of them with the version;
- metrics: each epoch's figures as the history file has them (dtr_contract.history), at step = the epoch, and
  the history line's seconds and examples/s as `epoch.seconds` and `epoch.examplesPerSecond`; the final
  evaluation's as `final.<name>` with the version;
- the version: the registered model of the model name, version source the exported version's URI (the
  `pvc://<claim>/<path>` KServe takes, or the bucket's s3://), and the run FINISHED; a failed chief marks the run
  FAILED, one told to stop (SIGTERM) KILLED (a restarted one makes it RUNNING again).
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dtr_contract import history, layout, objectstore, summary

API = "/api/2.0/mlflow/"
KEY_TAG = "dtr.key"  # the DistTrainingRun and version an MLflow run belongs to (runs/search finds it again)
RUN_TAG, NAMESPACE_TAG, UID_TAG = "dtr.run", "dtr.namespace", "dtr.uid"
SWEEP_TAG, TRIAL_TAG = "dtr.sweep", "dtr.trial"  # a sweep's trial: the sweep's name and the trial's index
VERSION_TAG, PATH_TAG = f"dtr.{summary.MODEL_VERSION}", f"dtr.{summary.MODEL_PATH}"  # the summary's names
EPOCH_SECONDS, EPOCH_RATE = f"epoch.{history.SECONDS}", f"epoch.{history.RATE}"  # the history line's
FINAL = "final."  # the final evaluation's figures: final.loss, final.accuracy, ...
# MLflow's own limits (mlflow/utils/validation.py, 2.x): values longer are refused, so they are cut here.
MAX_PARAM_VALUE = 500  # 6000 since MLflow 2.9; 500 still fits older servers
MAX_TAG_VALUE = 5000
MAX_BATCH = 100  # params and tags per runs/log-batch call (metrics: 1000)
MAX_KEY = 250
_KEY = re.compile(r"[/\w.\- ]+")  # what MLflow takes as a param's or a metric's name (on every platform)


@dataclass(frozen=True)
class Call:
    """One REST call: GET with `query`, or POST with `body` as JSON."""

    method: str
    path: str  # after API: "runs/create"
    body: Mapping[str, Any] | None = None
    query: Mapping[str, str] = field(default_factory=dict)


def mlflow_key(name: str) -> bool:
    """Whether MLflow takes this as a param's or a metric's name (mlflow/utils/validation.py): a name it would refuse
    (a metric of the run's own named `f1@0.5`) is left out rather than failing the whole call."""
    return len(name) <= MAX_KEY and _KEY.fullmatch(name) is not None and posixpath.normpath(name) == name \
        and name != "." and not name.startswith(("..", "/"))  # fmt: skip


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


DATASET_URL = "datasetSource.url"  # the lineage's --dataset-url, whose query may hold a signature (a presigned URL)


def flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Params from a nested map: `a.b` for doc[a][b], every value as text (true/false for booleans); a null is
    left out (unknown is no param), as is an empty map. The dataset's URL goes without its query: the server's
    readers are not the run's, and its SHA-256 (datasetSource.sha256) pins the file all the same."""
    found: dict[str, str] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            found.update(flatten(value, f"{name}."))
        elif value is not None and mlflow_key(name):
            text = _text(value).split("?", 1)[0] if name == DATASET_URL else _text(value)
            found[name] = text[:MAX_PARAM_VALUE]
    return found


def run_page(uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page in the server's web UI (MLflow 2's route), for the chief's log line."""
    return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


@dataclass(frozen=True)
class Identity:
    """Who the MLflow run is for: the DistTrainingRun (None by hand) and the version its chief claimed."""

    model_name: str
    version: int
    export_dir: str
    run: str | None = None
    namespace: str | None = None
    uid: str | None = None
    sweep: str | None = None  # a sweep's trial: the sweep's name, its experiment
    trial: int | None = None

    @property
    def experiment(self) -> str:
        return self.sweep or self.model_name

    @property
    def key(self) -> str:
        """The same for every container of one run's chief, different for any other run or version; no quotes (it
        goes into a search filter)."""
        who = "/".join(p or "-" for p in (self.namespace, self.run, self.uid)) if self.run else self.export_dir
        return f"{who}#{self.version}".replace("'", "").replace('"', "")

    @property
    def run_name(self) -> str:
        return f"{self.run or self.model_name}-v{self.version}"

    def tags(self) -> list[dict[str, str]]:
        pairs = {KEY_TAG: self.key, "mlflow.runName": self.run_name, RUN_TAG: self.run, NAMESPACE_TAG: self.namespace,
                 UID_TAG: self.uid, VERSION_TAG: str(self.version), SWEEP_TAG: self.sweep,
                 TRIAL_TAG: None if self.trial is None else str(self.trial)}  # fmt: skip
        return [{"key": k, "value": v[:MAX_TAG_VALUE]} for k, v in pairs.items() if v]


def model_source(model_path: str, export_dir: str, claim: str | None) -> str:
    """The version's URI for the registry: a bucket's as it is; on the volume, `pvc://<claim>/<path>` (KServe's
    storageUri form, docs/models.md#kserve: MLflow refuses a local path as a source, and the path is the pods'
    only, not the server's); without a claim (a trainer started by hand), the path as a file:// URI, which MLflow
    refuses (the run stays logged, the version unregistered)."""
    if objectstore.is_s3_uri(model_path):
        return model_path
    inside = layout.in_volume(model_path, layout.mount_of(export_dir) or layout.MOUNT_PATH)
    if claim and inside is not None:
        return f"pvc://{claim}/{inside}"
    return "file://" + posixpath.normpath(model_path)


def claim_of(run: str | None, spec: Mapping[str, Any] | None) -> str | None:
    """The run's claim, as its effective spec (DTR_RUN_SPEC) says: storage.claimName, else the one the operator
    created (layout.created_claim); None without a run or with no volume."""
    if not run:
        return None
    storage = (spec or {}).get("storage") if isinstance(spec, Mapping) else None
    storage = storage if isinstance(storage, Mapping) else {}
    if storage.get("volume") is False:
        return None
    claim = storage.get("claimName")
    return claim if isinstance(claim, str) and claim else layout.created_claim(run)


# ---------------------------------------------------------------- the calls


def get_experiment(name: str) -> Call:
    return Call("GET", "experiments/get-by-name", query={"experiment_name": name})


def create_experiment(name: str) -> Call:
    return Call("POST", "experiments/create", {"name": name})


def search_run(experiment_id: str, key: str) -> Call:
    return Call("POST", "runs/search", {"experiment_ids": [experiment_id], "max_results": 1,
                                        "filter": f"tags.`{KEY_TAG}` = '{key}'"})


def create_run(experiment_id: str, who: Identity, now_ms: int) -> Call:
    return Call("POST", "runs/create", {"experiment_id": experiment_id, "run_name": who.run_name,
                                        "start_time": now_ms, "tags": who.tags()})


def update_run(run_id: str, status: str, now_ms: int | None = None) -> Call:
    body: dict[str, Any] = {"run_id": run_id, "status": status}
    if now_ms is not None:
        body["end_time"] = now_ms
    return Call("POST", "runs/update", body)


def log_params(run_id: str, params: Mapping[str, str]) -> list[Call]:
    items = [{"key": k, "value": v} for k, v in sorted(params.items())]
    return [Call("POST", "runs/log-batch", {"run_id": run_id, "params": items[i:i + MAX_BATCH]})
            for i in range(0, len(items), MAX_BATCH)]


def _metric(key: str, value: Any, step: int, now_ms: int) -> dict[str, Any] | None:
    """A metric, or None for what is not a finite number (JSON has no NaN; the history file writes null) or has a
    name MLflow refuses."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not mlflow_key(key):  # fmt: skip
        return None
    return {"key": key, "value": float(value), "timestamp": now_ms, "step": step}


def _metrics(run_id: str, figures: Iterable[tuple[str, Any]], step: int, now_ms: int) -> Call:
    found = [m for m in (_metric(k, v, step, now_ms) for k, v in figures) if m is not None]
    return Call("POST", "runs/log-batch", {"run_id": run_id, "metrics": found})


def log_epoch(run_id: str, epoch: int, metrics: Mapping[str, float], seconds: float | None,
              rate: float | None, now_ms: int) -> Call:
    """One epoch's figures, as its history line has them (Progress gives both the same values)."""
    figures = [*sorted(metrics.items()), (EPOCH_SECONDS, seconds), (EPOCH_RATE, rate)]
    return _metrics(run_id, figures, epoch, now_ms)


def log_final(run_id: str, evaluation: Mapping[str, float], epochs: int, now_ms: int) -> Call:
    return _metrics(run_id, [(FINAL + k, v) for k, v in sorted(evaluation.items())], epochs, now_ms)


def version_tags(run_id: str, version: int, model_path: str) -> Call:
    tags = [{"key": VERSION_TAG, "value": str(version)}, {"key": PATH_TAG, "value": model_path[:MAX_TAG_VALUE]}]
    return Call("POST", "runs/log-batch", {"run_id": run_id, "tags": tags})


def create_registered_model(name: str) -> Call:
    return Call("POST", "registered-models/create", {"name": name})


def create_model_version(name: str, source: str, run_id: str, who: Identity) -> Call:
    return Call("POST", "model-versions/create", {"name": name, "source": source, "run_id": run_id,
                                                  "tags": [t for t in who.tags() if t["key"] != "mlflow.runName"]})


# ---------------------------------------------------------------- the answers


def experiment_id(answer: Mapping[str, Any]) -> str | None:
    """From experiments/get-by-name's answer ({"experiment": {...}}) or experiments/create's."""
    found = answer.get("experiment", answer)
    value = found.get("experiment_id") if isinstance(found, Mapping) else None
    return str(value) if value else None


def run_id(answer: Mapping[str, Any]) -> str | None:
    """From runs/create's answer ({"run": {"info": ...}}) or the first of runs/search's ({"runs": [...]})."""
    runs = answer.get("runs")
    run = runs[0] if isinstance(runs, list) and runs else answer.get("run")
    info = run.get("info") if isinstance(run, Mapping) else None
    value = info.get("run_id") if isinstance(info, Mapping) else None
    return str(value) if value else None
