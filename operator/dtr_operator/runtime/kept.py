"""What the operator keeps of a run in memory (the index of runs, the Running runs) and what kopf's watch keeps of
each event of a run (kopf_seams.py): the fields the TFJob events, the progress poll and the status writes read.

The placement fields, labels, annotations and managedFields, the bulk of a large run, only make the TFJob, and that
reads the run's whole body from the API (docs/performance.md#operator-memory).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# What a run kept in memory holds: metadata for the status write's guard and for events; the spec for the status.
KEPT_METADATA = ("name", "namespace", "uid", "resourceVersion", "generation", "deletionTimestamp")
# objectStore and export with training: an s3:// URI parses only beside its store, and a store only beside a URI.
# disruption: the mirror decides a failed TFJob's resume from the run it keeps, and the TFJob's event that finishes a
# run lets go of its PodDisruptionBudget (Context.let_go).
KEPT_SPEC = ("workers", "suspend", "queueName", "training", "storage", "resources", "watchdog", "disruption",
             "objectStore", "export")
# Of export, where the versions go (the status's model); allowedPublishers only makes the TFJob (up to 16 run names).
LEFT_OF_EXPORT = ("allowedPublishers",)
# Of training, what only makes the TFJob (the trainer's --params), never the status: a TFJob made again is made from
# the run read anew (reconcile/children.py), not from this copy.
LEFT_OF_TRAINING = ("params",)


def kept_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """KEPT_SPEC of a run's spec, without what of export and training only makes the TFJob (not copied)."""
    kept = {k: spec[k] for k in KEPT_SPEC if k in spec}
    for part, left in (("export", LEFT_OF_EXPORT), ("training", LEFT_OF_TRAINING)):
        if isinstance(kept.get(part), Mapping):
            kept[part] = {k: v for k, v in kept[part].items() if k not in left}
    return kept


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the run to keep in memory: KEPT_METADATA, KEPT_SPEC and the status."""
    found, spec = body.get("metadata") or {}, body.get("spec") or {}
    kept = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {k: found[k] for k in KEPT_METADATA if k in found},
        "spec": kept_spec(spec),
        "status": body.get("status") or {},
    }
    return copy.deepcopy(kept)

