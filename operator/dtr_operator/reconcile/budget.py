"""A run's PodDisruptionBudget (spec.disruption.protect; builders.build_pdb): made before its TFJob, as its
NetworkPolicy is, so that a drain or another eviction of its workers waits (the Eviction API answers 429) while the
run trains; and let go once the run has finished (release), so that it never holds a node back.

Let go, not deleted: its minAvailable set to 0, which allows every eviction. The operator's RBAC has no delete on
budgets (a run's children go with it, by owner references), and `kubectl get pdb` still shows the run's budget, with
every disruption allowed, until the run is deleted. Most of a finished run's workers would not hold a drain anyway
(the Eviction API ignores budgets for pods that have Succeeded or Failed), but a failed run's workers may still run
until the operator releases them (mirror.py), and a budget that allows nothing says so to every tool that reads it.

Not held as the NetworkPolicy is (guard.py): a budget someone deleted or changed is left as it is. A cluster admin who
deletes it means a drain to go on (docs/clusters.md#when-kubernetes-takes-a-worker-away).
"""

from __future__ import annotations

from ..api import PDB_API_VERSION, PDB_KIND
from ..builders import build_pdb, is_owned_by, owned_by
from ..kube import AlreadyExists, ApiError
from ..kube_api import KubeApi
from ..labels import workers_selector
from ..spec import RunSpec
from .decide import Record, budget_taken

JSON_PATCH = "application/json-patch+json"
ATTEMPTS = 3  # a create that clashed with a budget that was gone when read: look again, then leave it to the backoff


def make(kube: KubeApi, run: RunSpec) -> Record | None:
    """Create the run's budget when it protects its workers. None when it is there (made now, or the run's own made
    earlier), else the Record that stops the run: its name taken by another's (NameConflict), or by an earlier run's
    that the garbage collector is about to remove (WaitingForCleanup). ApiError when the API refuses."""
    manifest = build_pdb(run)
    if manifest is None:
        return None
    for _ in range(ATTEMPTS):
        try:
            kube.create(owned_by(manifest, run))
            return None
        except AlreadyExists:
            found = kube.get(PDB_API_VERSION, PDB_KIND, run.namespace, run.name)
        if found is not None:
            return budget_taken(run, found)
    raise ApiError(409, "Conflict", f"PodDisruptionBudget {run.namespace}/{run.name} kept changing; will retry")


def released_spec(run: RunSpec) -> dict[str, object]:
    """A finished run's budget: the same workers, none of which it keeps from an eviction."""
    return {"minAvailable": 0, "selector": workers_selector(run.tfjob_name)}


def release(kube: KubeApi, run: RunSpec) -> bool:
    """Let a finished run's budget allow every eviction. Whether it wrote: nothing when the run does not protect its
    workers, or its budget is gone, not its own, or let go already. ApiError when the API refuses (a Conflict: the
    budget changed since it was read)."""
    if not run.disruption.protect:
        return False
    found = kube.get(PDB_API_VERSION, PDB_KIND, run.namespace, run.name)
    if found is None or not is_owned_by(found, run.uid):
        return False
    if released_spec(run).items() <= (found.get("spec") or {}).items():
        return False
    version = (found.get("metadata") or {}).get("resourceVersion")  # a write meanwhile: 409, and nothing written
    patch = [{"op": "replace", "path": "/metadata/resourceVersion", "value": version},
             {"op": "replace", "path": "/spec", "value": released_spec(run)}]  # fmt: skip
    kube.patch(PDB_API_VERSION, PDB_KIND, run.namespace, run.name, patch, content_type=JSON_PATCH)
    return True
