"""The labels on a run's worker pods, and how a label selector picks pods by them. Pure; imports no other module of
the operator.

Two writers label a worker pod, both known before anything exists: the operator (its pod template: spec.podLabels,
then RUN_LABEL and MANAGED_BY; builders.py) and the training-operator, whose labels win (v1.9.4
pkg/controller.v1/common/pod.go: GenLabels gives the operator name and the job name, then the replica type,
lower-case, and index, and job-role master on worker 0 of a TFJob without a Chief, as the operator's are). The labels
live here rather than in builders.py, which writes them, because spec.py reads them too (its rule that a run's
required pod anti-affinity cannot split workers that share a ReadWriteOnce volume) and builders.py imports spec.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .api import (
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    MANAGED_BY,
    OPERATOR_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    RUN_LABEL,
    TFJOB_CONTROLLER,
    WORKER,
)


def template_labels(run_name: str, pod_labels: Mapping[str, str]) -> dict[str, str]:
    """The labels of the run's worker pod template: the run's own pod labels, then the operator's."""
    return {**pod_labels, RUN_LABEL: run_name, **MANAGED_BY}


def worker_labels(run_name: str, job_name: str, pod_labels: Mapping[str, str], index: int) -> dict[str, str]:
    """The labels worker `index` of the run's TFJob `job_name` carries once the training-operator has made it."""
    made = {OPERATOR_NAME_LABEL: TFJOB_CONTROLLER, JOB_NAME_LABEL: job_name, REPLICA_TYPE_LABEL: WORKER,
            REPLICA_INDEX_LABEL: str(index)}  # fmt: skip
    if index == 0:
        made[JOB_ROLE_LABEL] = "master"
    return {**template_labels(run_name, pod_labels), **made}


def workers_selector(job_name: str) -> dict[str, Any]:
    """A label selector that picks every worker of the TFJob `job_name` and nothing else: the labels the
    training-operator gives each of them (worker_labels) but the index. The run's PodDisruptionBudget selects by it."""
    return {"matchLabels": {OPERATOR_NAME_LABEL: TFJOB_CONTROLLER, JOB_NAME_LABEL: job_name,
                            REPLICA_TYPE_LABEL: WORKER}}  # fmt: skip


def _meets(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One matchExpressions requirement (In, NotIn, Exists, DoesNotExist) against the labels; any other operator
    meets nothing (the API server refuses it in a pod's label selector)."""
    key, operator = requirement.get("key"), requirement.get("operator")
    values = requirement.get("values") or ()
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator in ("Exists", "DoesNotExist"):
        return (key in labels) == (operator == "Exists")
    return False


def selects(
    selector: Mapping[str, Any] | None, labels: Mapping[str, str], more: Iterable[Mapping[str, Any]] = ()
) -> bool:
    """Whether a label selector (matchLabels and matchExpressions, ANDed, with the requirements `more`) picks a pod
    with these labels, as the API's metav1.LabelSelector does: a null selector picks none, an empty one every pod."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels") or {}
    requirements = [*(selector.get("matchExpressions") or ()), *more]
    return all(labels.get(k) == v for k, v in match_labels.items()) and all(_meets(r, labels) for r in requirements)
