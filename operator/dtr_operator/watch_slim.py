"""What kopf's watch keeps of each event of a run or a TFJob before it queues it (docs/performance.md#operator-memory).

kopf reads a kind's watch as fast as the API server sends it and queues each event's whole body until one of its
workers (handlers.WORKER_LIMIT at once) takes it. In a burst of 1000 runs of the largest spec that was most of the
operator's 336 MB: every run's body, its managedFields (the spec's shape again), and every TFJob's pod template.
The handlers read little of it: the run's create/resume handler reads the whole run from the API when it acts
(reconcile.Reconciler.attempt_run), the watch of runs keeps reconcile.KEPT_SPEC and the status, and the TFJob
handler reads the TFJob's metadata, spec.runPolicy and status. So each event is cut to that as it arrives.

kopf has no public seam for this. Its queueing module calls `kopf._cogs.clients.watching.infinite_watch` by
attribute; `install` wraps that function once. kopf is pinned (operator/requirements.txt), and
tests/unit/test_slim.py fails if the seam moves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from kopf._cogs.clients import watching

from .api import GROUP, PLURAL, TFJOB_GROUP, TFJOB_PLURAL
from .reconcile import KEPT_SPEC

Slimmer = Callable[[Mapping[str, Any]], dict[str, Any]]


def _metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    """All of it but managedFields, which no handler reads (kopf reads annotations, labels, finalizers and the rest)."""
    return {key: value for key, value in (obj.get("metadata") or {}).items() if key != "managedFields"}


def _cut(obj: Mapping[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": _metadata(obj), "spec": spec,
            "status": obj.get("status") or {}}  # fmt: skip


def run_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A run as kopf keeps it: its metadata, reconcile.KEPT_SPEC of its spec, its status. Pure."""
    spec = obj.get("spec") or {}
    return _cut(obj, {key: spec[key] for key in KEPT_SPEC if key in spec})


def tfjob_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A TFJob as kopf keeps it: its metadata, spec.runPolicy and status, not its replicas' pod templates. Pure."""
    spec = obj.get("spec") or {}
    return _cut(obj, {"runPolicy": spec["runPolicy"]} if "runPolicy" in spec else {})


SLIMMERS: dict[tuple[str, str], Slimmer] = {(GROUP, PLURAL): run_object, (TFJOB_GROUP, TFJOB_PLURAL): tfjob_object}


def slimmed(event: Any, slimmer: Slimmer) -> Any:
    """A watch event with its object cut by `slimmer`; anything else (kopf's bookmarks, an ERROR's Status) as it is."""
    has_object = isinstance(event, dict) and isinstance(event.get("object"), Mapping)
    if has_object and event.get("type") not in ("ERROR", "BOOKMARK"):
        return {**event, "object": slimmer(event["object"])}
    return event


def install() -> None:
    """Wrap kopf's watch so that the events of runs and TFJobs are slimmed as they arrive (once per process)."""
    original = watching.infinite_watch
    if getattr(original, "_dtr_slim", False):
        return

    async def infinite_watch(*, resource: Any, **kwargs: Any) -> AsyncIterator[Any]:
        slimmer = SLIMMERS.get((resource.group, resource.plural))
        async for event in original(resource=resource, **kwargs):
            yield event if slimmer is None else slimmed(event, slimmer)

    infinite_watch._dtr_slim = True  # type: ignore[attr-defined]
    watching.infinite_watch = infinite_watch
