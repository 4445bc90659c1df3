"""The status of a DistTrainingRun, one field at a time: the one place a status field is declared. Pure data.

Each StatusField says what the API server's schema needs (type, format, bounds, list type and map keys, required),
what a reader needs (the description `kubectl explain` shows) and who writes it: `by` names the pure functions that
compute it (module.function), WRITERS the parts of the operator that call them. Derived from STATUS:

- crd.py generates the CRD's status schema; `make docs` writes it to crds/disttrainingrun.yaml and
  `python docs/gen.py --check` (a unit test) fails when the committed file differs;
- docs/gen.py renders docs/api.md's status table;
- tests/unit/operator/test_status_keys.py drives the writers over the unit tests' runs, TFJobs and pods, and fails on a
  key they write or read that is not declared here, on a field set by a writer its `by` does not name or never
  written; and on a status key that the readers (dtr_client.results, metrics.py, progress_schedule.py) read and
  that is not here.

How to add a field: docs/api.md#adding-a-status-field.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .reasons import CONDITION_TYPES, ISOLATION_CONDITION, STALLED_CONDITION


@dataclass(frozen=True)
class StatusField:
    """One field of the status: its schema, its words, and who writes it."""

    name: str
    type: str  # integer | number | string | boolean | object | array | map (an object of `items`, any keys)
    description: str = ""
    by: tuple[str, ...] = ()  # the writers (keys of WRITERS) of this field and those under it; () = its object's
    format: str | None = None  # date-time, int64
    minimum: int | None = None
    maximum: int | None = None
    required: bool = False  # an array item's field that every item has
    fields: tuple[StatusField, ...] = ()  # an object's properties
    items: StatusField | None = None  # an array's items, a map's values
    extra: Mapping[str, Any] = field(default_factory=dict)  # other schema keys: x-kubernetes-list-type, -map-keys

    def child(self, name: str) -> StatusField | None:
        return next((f for f in self.fields if f.name == name), None)


# Each writer computes a whole status from the previous one (as reconcile.context.Context.record calls it), or one
# field (code_status); each is called by these modules of operator/ (dtr_client/local/runner: `dtr run`).
WRITERS: dict[str, tuple[str, ...]] = {
    "status.compute.state_status": ("dtr_operator/reconcile/context", "dtr_operator/reconcile/stall"),
    "status.compute.unparsed_status": ("dtr_operator/reconcile/children",),
    "status.compute.tfjob_status": ("dtr_operator/reconcile/mirror", "dtr_client/local/runner"),
    "status.waiting.waiting_status": ("dtr_operator/reconcile/waiting",),
    "status.progress.running_progress": ("dtr_operator/reconcile/progress", "dtr_client/local/runner"),
    "status.code.code_status": ("dtr_operator/reconcile/decide", "dtr_client/local/runner"),
    "watchdog.with_epoch": ("dtr_operator/reconcile/progress",),
    "watchdog.flagged_status": ("dtr_operator/reconcile/stall",),
    "watchdog.cleared_status": ("dtr_operator/reconcile/stall",),
    "watchdog.reminded_status": ("dtr_operator/reconcile/stall",),
    "watchdog.restarted_status": ("dtr_operator/reconcile/stall",),
    "watchdog.settled": ("dtr_operator/reconcile/mirror",),
    "netpolicy.exposed_status": ("dtr_operator/reconcile/guard",),
    "disruption.resuming_status": ("dtr_operator/reconcile/mirror",),
    "disruption.waited_status": ("dtr_operator/reconcile/waiting",),
}
# A field's writers are those that set its value; one that only carries a key over from the previous status, or
# repeats its value, is not named (waiting_status repeats tfJob and pvc: a run's children keep their names).
# The writers of the state every status carries (status.compute._base, and unparsed_status's own):
_STATE = ("status.compute.state_status", "status.compute.unparsed_status", "status.compute.tfjob_status",
          "status.waiting.waiting_status")
_NAMES = ("status.compute.state_status", "status.compute.tfjob_status")
_FLAGGED = ("watchdog.flagged_status",)
_ATOMIC = {"x-kubernetes-list-type": "atomic"}


def _time(name: str, description: str, by: tuple[str, ...] = ()) -> StatusField:
    return StatusField(name, "string", description, by=by, format="date-time")


WATCHDOG = StatusField("watchdog", "object",
    "The stall watchdog's record (spec.watchdog; docs/api.md#stalled-runs): the epochs it has seen end and when, "
    "their mean time, and the restarts it made.", fields=(
    StatusField("lastEpoch", "integer", "The chief's last finished epoch the operator has seen.",
                by=("watchdog.with_epoch",)),
    _time("lastEpochTime", "When it ended: the container runtime's timestamp of the chief's epoch line (when the "
                           "operator read it, for a log without timestamps).", ("watchdog.with_epoch",)),
    StatusField("meanEpochSeconds", "number",
                "Mean epoch time in seconds, leaving out each start's first epoch (data load, tracing).",
                by=("watchdog.with_epoch",)),
    StatusField("timedEpochs", "integer", "How many epochs that mean is of.", by=("watchdog.with_epoch",)),
    _time("stalledSince", "When the last stall acted on began (its deadline passed).", _FLAGGED),
    StatusField("restarts", "integer", "Restarts of the workers for stalls (onStall Restart).", by=_FLAGGED),
    StatusField("restarting", "boolean", "The TFJob is suspended for such a restart and not resumed yet.",
                by=(*_FLAGGED, "watchdog.restarted_status")),
))  # fmt: skip

MODEL = StatusField("model", "object", "The exported model, once the run has succeeded.",
    by=("status.compute.tfjob_status",), fields=(
    StatusField("path", "string", "Path of the model directory inside the volume mount, or its s3:// URI."),
    StatusField("claim", "string", "The run's PVC: it holds the model unless path is an s3:// URI."),
    StatusField("version", "integer", "The model version (the last directory of path)."),
    StatusField("storageUri", "string",
                "pvc://<claim>/<directory of the model's versions>, or s3://<bucket>/<base> for "
                "spec.export.storageUri, as KServe's storageUri reads it (TF Serving serves the highest version "
                "there); docs/models.md."),
))  # fmt: skip

PROGRESS = StatusField("progress", "object",
    "Training progress from the chief's log, updated as epochs finish (docs/api.md#progress). Field names follow "
    "Kubeflow Trainer v2's trainerStatus where they mean the same.",
    # tfjob_status: a run that succeeded has every epoch done (status.final_progress).
    by=("status.progress.running_progress", "status.compute.tfjob_status"), fields=(
    StatusField("epoch", "integer", "The last finished epoch (1-based)."),
    StatusField("epochs", "integer", "Epochs in the run (spec.training.epochs)."),
    StatusField("epochsDone", "string", "epoch/epochs, for the PROGRESS column (e.g. 3/8)."),
    StatusField("progressPercentage", "integer", "Finished epochs as a percentage of all (rounded down).",
                minimum=0, maximum=100),
    StatusField("estimatedRemainingSeconds", "integer", "Estimated training time left, from the chief's mean epoch "
                "time.", minimum=0),
    StatusField("examplesPerSecond", "number", "Global training throughput during the last finished epoch."),
    StatusField("metrics", "array", "The last finished epoch's training metrics (not the final evaluation).",
                extra=_ATOMIC, items=StatusField("metric", "object", fields=(
        StatusField("name", "string", "Metric name, as Keras names it (loss, accuracy).", required=True),
        StatusField("value", "string", "Its value, as a decimal string.", required=True),
    ))),
    _time("lastUpdatedTime", "When the operator last read a finished epoch."),
))  # fmt: skip

CODE = StatusField("code", "object",
    "The run's code from spec.training.code.configMap as the operator read it before it created the TFJob: which "
    "ConfigMap and key, and the file's SHA-256 (as sha256sum prints it; lineage.json beside the model names the "
    "same). The TFJob passes it to every worker, which runs no file of another digest (reason CodeChanged).",
    by=("status.code.code_status",), fields=(
    StatusField("configMap", "string", "The ConfigMap."),
    StatusField("key", "string", "The key of the file in it."),
    StatusField("sha256", "string", "SHA-256 of the file's bytes, hex."),
))  # fmt: skip

CONDITIONS = StatusField("conditions", "array",
    f"Conditions (Kubernetes conventions); types {', '.join(CONDITION_TYPES)}, {STALLED_CONDITION} once the "
    "stall watchdog has found the run stalled (True) or training again after it (False), and "
    f"{ISOLATION_CONDITION} once another NetworkPolicy of the namespace was found admitting the workers' TensorFlow "
    "port from elsewhere (True) or none does any more (False).",
    # status: the five of CONDITION_TYPES; watchdog: Stalled; netpolicy: IsolationWeakened.
    by=(*_STATE, "watchdog.flagged_status", "watchdog.cleared_status", "watchdog.settled", "netpolicy.exposed_status",
        "disruption.resuming_status", "disruption.waited_status"),
    extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    items=StatusField("condition", "object", fields=(
    StatusField("type", "string", "Condition type.", required=True),
    StatusField("status", "string", "True, False or Unknown.", required=True),
    StatusField("reason", "string", "CamelCase reason for the last transition."),
    StatusField("message", "string", "Human-readable details."),
    _time("lastTransitionTime", "When status last changed."),
    StatusField("observedGeneration", "integer", "The metadata.generation the condition was set for.",
                format="int64"),
)))  # fmt: skip

STATUS = StatusField("status", "object", "Observed state, written by the operator.",
    # kopf may keep handler results and its own bookkeeping under status, which nothing here declares: the API
    # server must never prune them.
    extra={"x-kubernetes-preserve-unknown-fields": True}, fields=(
    StatusField("phase", "string", "Pending, Running, Suspended (spec.suspend), Succeeded or Failed.",
                # waiting_status explains a phase (Pending, Running), it never moves it.
                by=("status.compute.state_status", "status.compute.unparsed_status", "status.compute.tfjob_status",
                    "disruption.resuming_status", "disruption.waited_status")),
    StatusField("reason", "string",
                "CamelCase reason for the phase (e.g. WaitingForPVC, TFJobRunning, TrainingSucceeded, NameConflict, "
                "TFJobDeleted); docs/api.md lists them.", by=(*_STATE, "disruption.resuming_status",
                                                                  "disruption.waited_status")),
    StatusField("message", "string", "One human-readable line about the current state.",
                # watchdog: "Stalled: ..." while the Stalled condition holds.
                by=(*_STATE, "watchdog.flagged_status", "watchdog.cleared_status", "watchdog.reminded_status",
                    "disruption.resuming_status", "disruption.waited_status")),
    StatusField("observedGeneration", "integer", "The metadata.generation this status was computed for.",
                by=_STATE, format="int64"),
    StatusField("tfJob", "string", "Name of the TFJob the operator created.", by=_NAMES),
    StatusField("pvc", "string", "Name of the PVC the workers mount.", by=_NAMES),
    StatusField("workersReady", "string", "Workers running or succeeded, out of spec.workers (e.g. 2/2).",
                by=("status.compute.state_status", "status.compute.tfjob_status")),
    StatusField("workers", "object", "Worker pod counts from the TFJob.", by=("status.compute.tfjob_status",), fields=(
        StatusField("active", "integer", "Workers running."),
        StatusField("succeeded", "integer", "Workers that exited successfully."),
        StatusField("failed", "integer", "Workers that failed."),
    )),
    StatusField("workerRestarts", "integer",
                "Restarts of the workers' containers, all workers together (the kubelet's restartCount), counted "
                "from the pods when the run finishes.", by=("status.compute.tfjob_status",)),
    WATCHDOG,
    StatusField("resumes", "integer",
                "Times the operator started the run again after Kubernetes took workers away (spec.disruption).",
                by=("disruption.resuming_status",), minimum=0),
    StatusField("disruptions", "array",
                "Each resume after a disruption, oldest first (the newest 10): what was taken away and from which "
                "epoch the run went on.", by=("disruption.resuming_status",), extra=_ATOMIC,
                items=StatusField("disruption", "object", fields=(
        StatusField("attempt", "integer", "The attempt that started (2 for the first resume).", required=True),
        _time("at", "When the operator found the TFJob failed by the disruption."),
        StatusField("epoch", "integer", "The last finished epoch the operator had seen then (0: none)."),
        StatusField("message", "string", "The workers taken away: each one's node and why."),
        StatusField("nodes", "array", "The nodes of the workers taken away.", extra=_ATOMIC,
                    items=StatusField("node", "string")),
        StatusField("tfJobUID", "string", "The uid of the failed TFJob the run was resumed from."),
    ))),
    _time("startTime", "When the TFJob started running.", ("status.compute.tfjob_status",)),
    _time("completionTime", "When the TFJob finished (succeeded or failed).", ("status.compute.tfjob_status",)),
    MODEL,
    PROGRESS,
    StatusField("metrics", "map",
                "The chief worker's final figures, by name: every metric of the evaluation on the held-out split "
                "under its Keras name (loss; accuracy when the model reports it; a regression model's mae, ...), "
                "epochs (epochs trained) and examplesPerSecond (global training throughput).",
                by=("status.compute.tfjob_status",), items=StatusField("figure", "number")),
    StatusField("headline", "string",
                "The headline metric and its value, name=value (e.g. accuracy=0.9812, mae=0.1234): "
                "spec.training.metric, else accuracy when the model reports it, else loss (the METRIC column).",
                by=("status.compute.tfjob_status",)),
    CODE,
    CONDITIONS,
))  # fmt: skip


def walk(f: StatusField = STATUS, path: str = "") -> Iterator[tuple[str, StatusField]]:
    """(path, field) for every field under f, in the table's order: keys by ".", an array's items as "[]"
    (progress.metrics[].name); a map's values are not fields of their own."""
    for sub in f.fields:
        here = f"{path}.{sub.name}" if path else sub.name
        yield here, sub
        yield from walk(sub, here)
    if f.type == "array" and f.items is not None:
        yield from walk(f.items, f"{path}[]")


def _step(f: StatusField, key: str) -> StatusField | None:
    if f.type == "array":
        return f.items if key == "[]" else None
    if f.type == "map":
        return f.items
    return f.child(key)


def find(path: Sequence[str]) -> StatusField | None:
    """The field at a path of keys ("[]" for an array's items; any key of a map is its values' field), or None when
    the path is not declared. A sequence, not a dotted string: a metric's name may hold a dot."""
    f: StatusField | None = STATUS
    for key in path:
        if f is None:
            return None
        f = _step(f, key)
    return f


def keys(path: str) -> tuple[str, ...]:
    """A dotted path as walk() spells it, as keys for find(): "progress.metrics[].name" -> progress metrics [] name."""
    return tuple(re.findall(r"\[\]|[^.\[\]]+", path))


def writers(path: Sequence[str]) -> tuple[str, ...]:
    """Who writes the field at path: the `by` of the deepest field on the path that names any (its own, else its
    object's); for an object that names none (watchdog), those of the fields under it."""
    f: StatusField | None = STATUS
    found: tuple[str, ...] = ()
    for key in path:
        f = _step(f, key) if f is not None else None
        found = f.by if f is not None and f.by else found
    if found or f is None:
        return found
    return tuple(dict.fromkeys(name for _, sub in walk(f) for name in sub.by))


def _list_kind(f: StatusField) -> str:
    """An array's list type in words: atomic, or a map by its keys."""
    map_keys = f.extra.get("x-kubernetes-list-map-keys")
    return f"a map by {', '.join(map_keys)}" if map_keys else str(f.extra.get("x-kubernetes-list-type", ""))


def type_text(f: StatusField) -> str:
    """The field's type in words, with its format, bounds and list type: integer (int64), array of objects (a map
    by type), map of numbers."""
    if f.type == "array" and f.items is not None:
        kind = _list_kind(f)
        words = f"array of {f.items.type}s" + (f" ({kind})" if kind else "")
    elif f.type == "map" and f.items is not None:
        words = f"map of {f.items.type}s"
    else:
        words = f.type + (f" ({f.format})" if f.format else "")
    if f.minimum is not None:
        words += f", {f.minimum}..{f.maximum}" if f.maximum is not None else f", at least {f.minimum}"
    return words + (", required" if f.required else "")
