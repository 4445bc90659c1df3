"""A run that contradicts itself beyond what the schema states: kubectl apply accepts it, but it could never run all
its workers, so the parser refuses it (spec.parse_run) and the operator fails it InvalidSpec. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from . import labels
from .api import HOSTNAME_LABEL

if TYPE_CHECKING:
    from .spec import RunSpec

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
ONE_NODE = "ReadWriteOnce"


def required_anti_affinity(affinity: Any) -> Iterator[tuple[str, Any]]:
    """(path, term) of each required pod anti-affinity term."""
    part = affinity.get("podAntiAffinity") if isinstance(affinity, Mapping) else None
    terms = part.get(REQUIRED) if isinstance(part, Mapping) else None
    for i, term in enumerate(terms if isinstance(terms, list) else []):
        yield f"spec.affinity.podAntiAffinity.{REQUIRED}[{i}]", term


def never_runs(run: RunSpec) -> str | None:
    """Why the run could never run all its workers, or None. Its PVC, created ReadWriteOnce, mounts on one node only,
    while a required anti-affinity term over the nodes' hostname that picks its own workers keeps them on separate
    nodes: one worker stays Pending for good (and the others wait for it). A claim of the user's (claimName) is not
    judged: its access mode is not in the spec."""
    if run.workers < 2 or not run.creates_pvc or run.storage.access_mode != ONE_NODE:
        return None
    if any(_splits_workers(run, term) for _, term in required_anti_affinity(run.placement.affinity)):
        return (f"spec.affinity.podAntiAffinity: a required term puts each of the {run.workers} workers on its own "
                f"node ({HOSTNAME_LABEL}), but spec.storage.accessMode {ONE_NODE} mounts the run's volume on "
                "one node only: use accessMode ReadWriteMany with a class every node mounts, or a preferred term")
    return None


def _splits_workers(run: RunSpec, term: Any) -> bool:
    """Whether a required anti-affinity term keeps two of the run's workers off one node: it spreads over the
    hostname, covers the run's namespace, and some worker's term picks another worker (required anti-affinity is
    symmetric: either one's term keeps the pair apart)."""
    if not isinstance(term, Mapping) or term.get("topologyKey") != HOSTNAME_LABEL:
        return False
    if not _covers_namespace(term, run.namespace):
        return False
    pods = [labels.worker_labels(run.name, run.tfjob_name, run.placement.pod_labels, i) for i in range(run.workers)]
    return any(labels.selects(term.get("labelSelector"), other, _label_keys(term, pods[i]))
               for i in range(len(pods)) for j, other in enumerate(pods) if i != j)  # fmt: skip


def _covers_namespace(term: Mapping[str, Any], namespace: str) -> bool:
    """Whether the term's pods include those of the run's namespace: neither namespaces nor namespaceSelector set
    (the pod's own), the namespace listed, or an empty namespaceSelector (every namespace). A selector of namespace
    labels is not judged (the namespace's labels are not in the spec)."""
    listed, by_labels = term.get("namespaces") or [], term.get("namespaceSelector")
    if by_labels is None:
        return not listed or namespace in listed
    return namespace in listed or not (by_labels.get("matchLabels") or by_labels.get("matchExpressions"))


def _label_keys(term: Mapping[str, Any], pod: Mapping[str, str]) -> list[dict[str, Any]]:
    """matchLabelKeys and mismatchLabelKeys as requirements: the worker's value of each key joins the term's
    labelSelector (In, NotIn); a key the worker lacks is ignored, as the API server does."""
    keys = ((key, "In") for key in term.get("matchLabelKeys") or ())
    mismatched = ((key, "NotIn") for key in term.get("mismatchLabelKeys") or ())
    return [{"key": key, "operator": operator, "values": [pod[key]]}
            for key, operator in (*keys, *mismatched) if key in pod]  # fmt: skip
