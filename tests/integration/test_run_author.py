"""What a run lets its author do: as a user who may only create DistTrainingRuns in one namespace
(impersonated), against the real API server, with the operator (default settings) running.

The operator creates pods with its own rights; so whatever a run can make it do is what that user can
do. These tests pin it down: only allowed trainer images run, the pods hold no ServiceAccount token, a
claimName cannot reach another namespace's volume nor a claim of its own not labelled for runs, and what the
operator's policy refuses (pod annotations for add-ons, control-plane tolerations, system priority classes,
cross-namespace affinity) fails the run before anything is created (docs/operator.md)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from dtr_operator.policy import REQUIRED
from operator_support import (
    get,
    items,
    status,
    wait_status,
    worker_pods,
)

from support.cluster import Cluster
from support.operator import IMAGE, Operator
from support.wait import wait_for

USER = "alice@example.com"


@pytest.fixture
def author(control_plane: Cluster, namespace: str) -> Iterator[str]:
    """A user with `create` (and `get`, to read what she made) on disttrainingruns in `namespace` only."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "run-author", "namespace": namespace},
            "rules": [{"apiGroups": ["distml.dev"], "resources": ["disttrainingruns"], "verbs": ["create", "get"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "run-author", "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "run-author"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]}  # fmt: skip
    control_plane.create(role)
    control_plane.create(binding)
    yield USER


def create_as(cluster: Cluster, user: str, namespace: str, name: str, spec: dict[str, Any]) -> None:
    doc = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "metadata": {"name": name}, "spec": spec}
    cluster.kubectl("create", "-n", namespace, "-f", "-", f"--as={user}", input=json.dumps(doc))


def can(cluster: Cluster, user: str, verb: str, resource: str, namespace: str) -> bool:
    proc = cluster.kubectl("auth", "can-i", verb, resource, "-n", namespace, f"--as={user}", check=False)
    return proc.stdout.strip() == "yes"


def test_the_author_may_create_runs_and_nothing_else(control_plane: Cluster, namespace: str, author: str) -> None:
    assert can(control_plane, author, "create", "disttrainingruns.distml.dev", namespace)
    for verb, resource in (("create", "pods"), ("create", "tfjobs.kubeflow.org"), ("get", "secrets"),
                           ("create", "persistentvolumeclaims"),
                           ("update", "disttrainingruns.distml.dev")):  # fmt: skip
        assert not can(control_plane, author, verb, resource, namespace), (verb, resource)
    assert not can(control_plane, author, "create", "disttrainingruns.distml.dev", "default")


def test_an_image_outside_the_allow_list_is_refused_and_nothing_runs(
    control_plane: Cluster, namespace: str, author: str, operator: Operator
) -> None:
    create_as(control_plane, author, namespace, "own-image", {"workers": 1, "image": "busybox:1.36"})
    st = wait_status(control_plane, namespace, "own-image", "refused", phase="Failed", reason="ImageNotAllowed")
    assert "spec.image busybox:1.36 is not allowed by the operator's --allowed-images" in st["message"], st
    assert get(control_plane, namespace, "tfjob", "own-image") is None
    assert not items(control_plane, namespace, "pods", "distml.dev/run=own-image")


def test_the_authors_pods_run_the_default_image_without_a_service_account_token(
    control_plane: Cluster, namespace: str, author: str, operator: Operator
) -> None:
    create_as(control_plane, author, namespace, "plain", {"workers": 2})
    for pod in worker_pods(control_plane, namespace, "plain", 2):
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert [c["image"] for c in spec["containers"]] == [IMAGE]
        projected = [v for v in spec.get("volumes", []) if "projected" in v]
        assert not projected, f"a token volume was mounted: {projected}"
        assert not [m for c in spec["containers"] for m in c.get("volumeMounts", [])
                    if "serviceaccount" in m["mountPath"]]


def test_a_claim_name_cannot_reach_another_namespaces_volume(
    control_plane: Cluster, namespace: str, author: str, operator: Operator
) -> None:
    other = f"t-other-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", other)
    try:
        control_plane.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                              "metadata": {"name": "team-secrets", "namespace": other},
                              "spec": {"accessModes": ["ReadWriteOnce"],
                                       "resources": {"requests": {"storage": "1Gi"}}}})  # fmt: skip
        create_as(control_plane, author, namespace, "reach", {"workers": 1, "storage": {"claimName": "team-secrets"}})
        st = wait_status(control_plane, namespace, "reach", "waiting", phase="Pending", reason="WaitingForPVC")
        assert f"waiting for PVC team-secrets in namespace {namespace}" in st["message"], st
        # The operator looked only in the run's namespace: nothing was made, here or there.
        assert get(control_plane, namespace, "tfjob", "reach") is None
        assert not items(control_plane, other, "pods", "distml.dev/run=reach")
        assert not items(control_plane, other, "tfjobs", "distml.dev/run=reach")
        wait_for(lambda: status(control_plane, namespace, "reach").get("reason") == "WaitingForPVC", "still waiting")
    finally:
        control_plane.kubectl("delete", "namespace", other, "--wait=false", check=False)


# What the operator's default policy refuses, one run each (security review H3, M1, L6): (name, spec, reason).
REFUSED = (
    ("istio-proxy", {"podAnnotations": {"sidecar.istio.io/proxyImage": "evil.example/x:1"}}, "PodAnnotationNotAllowed"),
    ("istio-inject", {"podLabels": {"sidecar.istio.io/inject": "true"}}, "PodLabelNotAllowed"),
    ("everywhere", {"tolerations": [{"operator": "Exists"}],
                    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}, "TolerationNotAllowed"),
    ("preempt", {"priorityClassName": "system-node-critical"}, "PriorityClassNotAllowed"),
    ("fence", {"affinity": {"podAntiAffinity": {REQUIRED: [{
        "topologyKey": "kubernetes.io/hostname", "namespaceSelector": {},
        "labelSelector": {"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "Exists"}]}}]}}},
     "AffinityNotAllowed"),
    ("aim", {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}, "NodeSelectorNotAllowed"),
    ("zone-fence", {"affinity": {"podAntiAffinity": {REQUIRED: [{
        "topologyKey": "topology.kubernetes.io/zone",
        "labelSelector": {"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "Exists"}]}}]}}},
     "AffinityNotAllowed"),
    ("huge", {"storage": {"size": "100Ti"}}, "StorageTooLarge"),
    ("premium", {"storage": {"storageClassName": "premium-rwo"}}, "StorageClassNotAllowed"),
)  # fmt: skip


def test_what_the_policy_refuses_fails_the_run_naming_field_and_flag_and_nothing_is_created(
    control_plane: Cluster, namespace: str, author: str, operator: Operator
) -> None:
    for name, spec, _ in REFUSED:
        create_as(control_plane, author, namespace, name, {"workers": 1, **spec})
    for name, spec, reason in REFUSED:
        st = wait_status(control_plane, namespace, name, "refused", phase="Failed", reason=reason)
        assert f"spec.{next(iter(spec))}" in st["message"] and "operator's" in st["message"], st
        assert get(control_plane, namespace, "tfjob", name) is None
        assert get(control_plane, namespace, "pvc", f"{name}-data") is None


def test_a_claim_not_labelled_for_runs_is_refused_and_left_untouched(
    control_plane: Cluster, namespace: str, author: str, operator: Operator
) -> None:
    control_plane.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                          "metadata": {"name": "team-db", "namespace": namespace, "labels": {"app": "postgres"}},
                          "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    before = get(control_plane, namespace, "pvc", "team-db")
    create_as(control_plane, author, namespace, "borrow", {"workers": 1, "storage": {"claimName": "team-db"},
                                                           "export": {"modelName": "prod-classifier"}})  # fmt: skip
    st = wait_status(control_plane, namespace, "borrow", "refused", phase="Failed", reason="ClaimNotAllowed")
    assert "spec.storage.claimName team-db" in st["message"] and "--claims (DTR_CLAIMS)" in st["message"], st
    assert get(control_plane, namespace, "tfjob", "borrow") is None
    after = get(control_plane, namespace, "pvc", "team-db")
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert not after["metadata"].get("ownerReferences")
