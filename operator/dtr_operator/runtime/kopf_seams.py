"""The two places where the operator changes how kopf itself works, each pinned to kopf 1.45.2 and guarded by a
test (the table: docs/operator.md#where-the-operator-stands-in-for-kopf):

- the watch: what kopf keeps of each event of a run, a TFJob or a NetworkPolicy before it queues it (install,
  slimmed);
- the diff base: what kopf stores as a run's last handled state and compares events with (SuspendDiffBase).

The watch. kopf reads a kind's watch as fast as the API server sends it and queues each event's whole body until one
of its workers (handlers.WORKER_LIMIT at once) takes it. In a burst of 1000 runs of the largest spec that was most of
the operator's 336 MB: every run's body, its managedFields (the spec's shape again), and every TFJob's pod template.
The handlers read little of it: the run's create/resume handler reads the whole run from the API when it acts
(Reconciler.attempt_run), the watch of runs keeps kept.KEPT_SPEC and the status, and the TFJob handler reads the
TFJob's metadata, spec.runPolicy and status. So each event is cut to that as it arrives. kopf has no public seam for
this. Its queueing module calls `kopf._cogs.clients.watching.infinite_watch` by attribute; `install` wraps that
function once. tests/unit/operator/test_slim.py fails if the seam moves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import kopf
from kopf._cogs.clients import watching

from ..api import (
    GROUP,
    NETWORK_POLICY_GROUP,
    NETWORK_POLICY_PLURAL,
    PLURAL,
    SWEEP_LABEL,
    TFJOB_GROUP,
    TFJOB_PLURAL,
    TRIAL_LABEL,
)
from .kept import kept_spec

Slimmer = Callable[[Mapping[str, Any]], dict[str, Any]]

# ---- the watch ------------------------------------------------------------------------------------
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"  # the applied object again (96 KiB: admission.yaml)
KOPF_PREFIX = "kopf.zalando.org/"  # kopf's own annotations: its diff base and its handlers' progress
# What kopf and the handlers read of a run's metadata (the handlers read the whole run from the API when they act).
# Its labels, other annotations and ownerReferences are the tenant's: kept, a tenant's thousand runs of the largest
# metadata admission allows took the operator's peak from 135 to 235 MB (bench/operator/memory-metadata.json).
RUN_METADATA = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                "deletionGracePeriodSeconds", "finalizers")


def _metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    """All of it but managedFields and kubectl's last-applied-configuration, which neither kopf nor a handler reads
    (kopf reads its own annotations, labels, finalizers and the rest; all bounded: deploy/base/admission.yaml)."""
    meta = {key: value for key, value in (obj.get("metadata") or {}).items() if key != "managedFields"}
    if LAST_APPLIED in (meta.get("annotations") or {}):
        meta["annotations"] = {k: v for k, v in meta["annotations"].items() if k != LAST_APPLIED}
    return meta


def _cut(obj: Mapping[str, Any], spec: dict[str, Any], metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": _metadata(obj) if metadata is None else metadata, "spec": spec,
            "status": obj.get("status") or {}}  # fmt: skip


# A sweep's trial's labels: its event brings on the sweep's turn; they name its MLflow experiment (spec.parse_run).
TRIAL_LABELS = (SWEEP_LABEL, TRIAL_LABEL)


def _trial_labels(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (meta.get("labels") or {}).items() if k in TRIAL_LABELS}


def run_metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    """RUN_METADATA of a run's metadata, and kopf's own annotations. Pure."""
    meta = obj.get("metadata") or {}
    kept = {key: meta[key] for key in RUN_METADATA if key in meta}
    if trial := _trial_labels(meta):
        kept["labels"] = trial
    kopf_own = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(KOPF_PREFIX)}
    return {**kept, "annotations": kopf_own} if kopf_own else kept


def run_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A run as kopf keeps it: run_metadata, kept.kept_spec of its spec, its status. Pure."""
    return _cut(obj, kept_spec(obj.get("spec") or {}), run_metadata(obj))


def tfjob_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A TFJob as kopf keeps it: its metadata, spec.runPolicy and status, not its replicas' pod templates. Pure."""
    spec = obj.get("spec") or {}
    return _cut(obj, {"runPolicy": spec["runPolicy"]} if "runPolicy" in spec else {})


def policy_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A NetworkPolicy as kopf keeps it: its metadata and spec (which the handler compares with the run's), without
    managedFields. Pure."""
    return _cut(obj, dict(obj.get("spec") or {}))


SLIMMERS: dict[tuple[str, str], Slimmer] = {(GROUP, PLURAL): run_object, (TFJOB_GROUP, TFJOB_PLURAL): tfjob_object,
                                            (NETWORK_POLICY_GROUP, NETWORK_POLICY_PLURAL): policy_object}


def slimmed(event: Any, slimmer: Slimmer) -> Any:
    """A watch event with its object cut by `slimmer`; anything else (kopf's bookmarks, an ERROR's Status) as it is."""
    has_object = isinstance(event, dict) and isinstance(event.get("object"), Mapping)
    if has_object and event.get("type") not in ("ERROR", "BOOKMARK"):
        return {**event, "object": slimmer(event["object"])}
    return event


def install_slim_watch() -> None:
    """Wrap kopf's watch so that the events of runs, TFJobs and NetworkPolicies are slimmed as they arrive (once per
    process)."""
    original = watching.infinite_watch
    if getattr(original, "_dtr_slim", False):
        return

    async def infinite_watch(*, resource: Any, **kwargs: Any) -> AsyncIterator[Any]:
        slimmer = SLIMMERS.get((resource.group, resource.plural))
        async for event in original(resource=resource, **kwargs):
            yield event if slimmer is None else slimmed(event, slimmer)

    infinite_watch._dtr_slim = True  # type: ignore[attr-defined]
    watching.infinite_watch = infinite_watch


# ---- the diff base ---------------------------------------------------------------------------------

# The fields of a run whose changes kopf tells apart (ensure_children's on.update): the whole essence it keeps.
DIFF_FIELDS: tuple[tuple[str, ...], ...] = (("spec", "suspend"),)


def essence(body: Mapping[str, Any], fields: Iterable[tuple[str, ...] | str] = ()) -> dict[str, Any]:
    """What kopf compares between events and stores as last handled: DIFF_FIELDS and any field a handler names
    (`fields`: kopf's extra fields), those present, nothing else. Pure."""
    kept: dict[str, Any] = {}
    for path in {*DIFF_FIELDS, *(tuple(f.split(".")) if isinstance(f, str) else tuple(f) for f in fields)}:
        value: Any = body
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is not None:
            target = kept
            for key in path[:-1]:
                target = target.setdefault(key, {})
            target[path[-1]] = value
    return kept


class SuspendDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff base (the annotation kopf.zalando.org/last-handled-configuration) of DIFF_FIELDS alone, not of the
    whole spec, labels and annotations: kopf built it with a deep copy of every event's body and stored the spec
    again in the run (about 67 KB for the largest, then in every later event of it), to detect changes that only
    spec.suspend's handler acts on. What an operator before this one stored (the whole spec) is read as its
    DIFF_FIELDS too, so after an upgrade a run is resumed as before, not taken for an update."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> Any:
        return essence(body, extra_fields or ())

    def fetch(self, *, body: kopf.Body) -> Any:
        stored = super().fetch(body=body)
        return None if stored is None else essence(stored)


DIFF_BASE = SuspendDiffBase()


def handled_before(run: Mapping[str, Any]) -> bool:
    """Whether kopf has stored the run as handled: a create event of such a run is a stale one (kopf processed it
    after its consistency wait ran out, or after the run's worker left), and the first create did the work."""
    return DIFF_BASE.fetch(body=kopf.Body(dict(run))) is not None

