"""The ClusterRoles for run authors and viewers (deploy/users/), by impersonation against the real API server:
a user bound to Kubernetes' own `edit` in a namespace creates and manages runs there, one bound to `view` only
reads them, and neither can write a run's status (which would let them mark it finished)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from deploy_support import REPO

from support.cluster import Cluster
from support.runs import run_doc
from support.wait import wait_for

AUTHOR, VIEWER = "bob@example.com", "carol@example.com"
RUNS = "disttrainingruns.distml.dev"


def can(cluster: Cluster, user: str, verb: str, resource: str, namespace: str, subresource: str = "") -> bool:
    extra = [f"--subresource={subresource}"] if subresource else []
    proc = cluster.kubectl("auth", "can-i", verb, resource, "-n", namespace, f"--as={user}", *extra, check=False)
    return proc.stdout.strip() == "yes"


def bind(cluster: Cluster, namespace: str, role: str, user: str) -> None:
    cluster.kubectl("create", "rolebinding", f"{role}-{user.split('@')[0]}", f"--clusterrole={role}",
                    f"--user={user}", "-n", namespace)  # fmt: skip


@pytest.fixture
def teams(control_plane: Cluster, namespace: str) -> Iterator[str]:
    """AUTHOR bound to `edit`, VIEWER to `view` in `namespace`; the user roles installed only after the check
    that without them neither may touch runs (the aggregation is what grants it)."""
    bind(control_plane, namespace, "edit", AUTHOR)
    bind(control_plane, namespace, "view", VIEWER)
    wait_for(lambda: can(control_plane, AUTHOR, "create", "configmaps", namespace), "the bindings to take effect")
    assert not can(control_plane, AUTHOR, "create", RUNS, namespace), "edit grants runs without deploy/users"
    assert not can(control_plane, VIEWER, "get", RUNS, namespace), "view grants runs without deploy/users"
    users = str(REPO / "deploy" / "users")
    control_plane.kubectl("apply", "-k", users)
    try:
        yield namespace
    finally:
        control_plane.kubectl("delete", "-k", users, "--ignore-not-found", "--wait=false", check=False)


def test_edit_creates_and_manages_runs_view_only_reads_them_neither_writes_status(
    control_plane: Cluster, teams: str
) -> None:
    namespace = teams
    wait_for(lambda: can(control_plane, AUTHOR, "create", RUNS, namespace), "edit to aggregate dtr-run-author")
    wait_for(lambda: can(control_plane, VIEWER, "list", RUNS, namespace), "view to aggregate dtr-run-viewer")
    for verb in ("get", "list", "watch", "create", "patch", "update", "delete"):
        assert can(control_plane, AUTHOR, verb, RUNS, namespace), f"edit: {verb}"
    for verb in ("get", "list", "watch"):
        assert can(control_plane, VIEWER, verb, RUNS, namespace), f"view: {verb}"
    for verb in ("create", "patch", "update", "delete"):
        assert not can(control_plane, VIEWER, verb, RUNS, namespace), f"view: {verb}"
    for user in (AUTHOR, VIEWER):
        for verb in ("patch", "update"):
            assert not can(control_plane, user, verb, RUNS, namespace, "status"), f"{user}: {verb} status"
        assert not can(control_plane, user, "create", RUNS, "default"), f"{user}: outside the namespace"

    # For real: the author creates a run and suspends it; the viewer reads it and cannot change it.
    doc = run_doc("by-bob", namespace, {"workers": 1})
    control_plane.kubectl("create", "-f", "-", f"--as={AUTHOR}", input=json.dumps(doc))
    suspend = json.dumps({"spec": {"suspend": True}})
    control_plane.kubectl("patch", "dtr", "by-bob", "-n", namespace, "--type=merge", "-p", suspend, f"--as={AUTHOR}")
    read = control_plane.kubectl_json("get", "dtr", "by-bob", "-n", namespace, f"--as={VIEWER}")
    assert read["spec"]["suspend"] is True
    refused = control_plane.kubectl("patch", "dtr", "by-bob", "-n", namespace, "--type=merge", "-p", suspend,
                                    f"--as={VIEWER}", check=False)  # fmt: skip
    assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stderr
    status = json.dumps({"status": {"phase": "Succeeded"}})
    forged = control_plane.kubectl("patch", "dtr", "by-bob", "-n", namespace, "--subresource=status", "--type=merge",
                                   "-p", status, f"--as={AUTHOR}", check=False)  # fmt: skip
    assert forged.returncode != 0 and "forbidden" in forged.stderr, forged.stderr


def test_edit_has_what_dtr_tensorboard_needs_on_pods_and_view_does_not(control_plane: Cluster, teams: str) -> None:
    """dtr tensorboard (and dtr model get, data put) makes a pod and forwards a port to it (docs/models.md): `edit`
    grants that, not dtr-run-author, which grants runs only; `view` grants neither."""
    namespace = teams
    wait_for(lambda: can(control_plane, AUTHOR, "create", RUNS, namespace), "edit to aggregate dtr-run-author")
    for verb, resource, sub in (("create", "pods", ""), ("get", "pods", ""), ("delete", "pods", ""),
                                ("list", "pods", ""), ("create", "pods", "portforward"), ("get", "pods", "portforward"),
                                ("get", "persistentvolumeclaims", ""), ("list", "events", "")):  # fmt: skip
        assert can(control_plane, AUTHOR, verb, resource, namespace, sub), f"edit: {verb} {resource} {sub}"
    for verb in ("create", "get"):
        assert not can(control_plane, VIEWER, verb, "pods", namespace, "portforward"), f"view: {verb} portforward"
    rules = control_plane.kubectl_json("get", "clusterrole", "dtr-run-author")["rules"]
    assert {r for rule in rules for r in rule["resources"]} == {"disttrainingruns", "disttrainingsweeps"}
