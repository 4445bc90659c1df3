"""The operator's PriorityClass as deploy/base ships it (docs/operator.md#the-operators-priority): its Deployment names
it, its value ranks the operator above every pod without a class and below the cluster's own components, and it is
no default. Read from the files (kustomize only lists them; tests/integration/test_deploy.py renders both install
modes and installs them on a real API server)."""

from __future__ import annotations

from typing import Any

import yaml
from dtr_operator import policy

from support.repo import REPO

BASE = REPO / "deploy" / "base"
SYSTEM_CLUSTER_CRITICAL = 2_000_000_000  # Kubernetes' own; a user-defined class may be at most 1000000000
HIGHEST_USER_DEFINED = 1_000_000_000


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((BASE / name).read_text())


def test_the_base_ships_the_class_and_the_deployment_names_it() -> None:
    assert "priorityclass.yaml" in load("kustomization.yaml")["resources"]
    shipped = load("priorityclass.yaml")
    assert shipped["kind"] == "PriorityClass" and shipped["apiVersion"] == "scheduling.k8s.io/v1"
    pod = load("deployment.yaml")["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == shipped["metadata"]["name"] == policy.OPERATOR_PRIORITY_CLASS


def test_its_value_is_above_unclassed_pods_and_far_below_the_system_classes() -> None:
    shipped = load("priorityclass.yaml")
    assert 0 < shipped["value"] <= HIGHEST_USER_DEFINED // 100  # room above it for a cluster's own urgent classes
    assert shipped["value"] < SYSTEM_CLUSTER_CRITICAL
    assert shipped["globalDefault"] is False  # only the operator's pod takes it
    assert shipped["preemptionPolicy"] == "PreemptLowerPriority"  # the reason is in the file and docs/operator.md
    assert "docs/operator.md" in shipped["description"]
