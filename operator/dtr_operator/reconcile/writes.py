"""The writes to a run's TFJob, one helper each: every place that suspends, resumes or otherwise patches the
TFJob's runPolicy goes through here, so the rule that the operator marks its own suspensions has one home."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api import RELEASE_RUNNING_PODS, SUSPENDED_BY, SUSPENDED_BY_ANNOTATION
from ..kube_api import KubeApi
from ..spec import RunSpec


def suspend_tfjob(kube: KubeApi, run: RunSpec, suspend: bool) -> Mapping[str, Any]:
    """Set the TFJob's runPolicy.suspend, recording in the same write that the operator did it (a suspension
    with the mark is the operator's to undo; one without, by a queue manager or a person, stays theirs)."""
    mark = {SUSPENDED_BY_ANNOTATION: SUSPENDED_BY if suspend else None}
    return kube.patch_tfjob_run_policy(run.namespace, run.tfjob_name, annotations=mark, suspend=suspend)


def release_running_pods(kube: KubeApi, run: RunSpec) -> None:
    """Have the training-operator delete the failed TFJob's pods that still run (cleanPodPolicy Running)."""
    kube.patch_tfjob_run_policy(run.namespace, run.tfjob_name, cleanPodPolicy=RELEASE_RUNNING_PODS)


def restart_no_more(kube: KubeApi, run: RunSpec) -> None:
    """Have the training-operator fail the TFJob at the next restart of any worker (backoffLimit 0)."""
    kube.patch_tfjob_run_policy(run.namespace, run.tfjob_name, backoffLimit=0)
