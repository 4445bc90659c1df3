"""One operator per team (deploy/team/, docs/clusters.md#one-operator-per-team): a second operator beside
deploy/namespaced/, with its own namespace, ServiceAccount, RBAC and admission policy, watching its team's namespace
only. Rendered, the two installs share no object; installed for real on the API server, each operator (the dev
environment's `dtr operator` with its Deployment's flags and only its ServiceAccount's token) expands the runs of its
own namespace and leaves the other's alone, and the team's admission policy holds the team's account.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from deploy_support import (
    NAMESPACED_MODE,
    REPO,
    as_yaml,
    http_ok,
    only,
    operator_flags,
    rbac_objects,
    render,
    settle_quota,
)

from devcluster.controlplane import free_port, stop_child
from support.cluster import Cluster
from support.wait import wait_for

TEAM = REPO / "deploy" / "team"
TEAM_NAME = "ml-team"  # deploy/team/team.yaml
RUNS, OPERATOR_NS = TEAM_NAME, f"dtr-{TEAM_NAME}"
FIRST_RUNS, FIRST_NS = "dtr-runs", "dtr-system"  # deploy/namespaced/
SHARED = {"CustomResourceDefinition", "PriorityClass"}  # what deploy/namespaced/ brings for every operator


def key(doc: dict[str, Any]) -> tuple[str, str, str]:
    return doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]


# ---------------------------------------------------------------- rendered (no cluster needed)


def test_the_team_overlay_shares_no_object_with_the_first_install() -> None:
    team, first = render(TEAM), render(NAMESPACED_MODE.kustomization)
    assert {key(d) for d in team}.isdisjoint({key(d) for d in first}), "an object both installs would own"
    assert not [d for d in team if d["kind"] in SHARED or d["kind"] == "ConfigMap"], "shared or local-config objects"
    assert not [d for d in team if d["metadata"]["name"] in ("dtr-run-author", "dtr-run-viewer")]
    assert sorted(d["metadata"]["name"] for d in team if d["kind"] == "Namespace") == [OPERATOR_NS, RUNS]
    # Everything it grants, it grants to the team operator's own account; the first install's account is unnamed.
    for binding in [d for d in team if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "dtr-operator", "namespace": OPERATOR_NS}]
        assert only(team, binding["roleRef"]["kind"], binding["roleRef"]["name"])
    assert only(team, "Role")["metadata"]["namespace"] == RUNS
    assert only(team, "Role")["rules"] == only(first, "Role")["rules"], "the same verbs, in the team's namespace"
    deployment = only(team, "Deployment", "dtr-operator")
    assert deployment["metadata"]["namespace"] == OPERATOR_NS
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert [a for a in container["args"] if a.startswith("--namespace")] == [f"--namespace={RUNS}"]
    (policy,) = [d for d in team if d["kind"] == "ValidatingAdmissionPolicy"]
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == \
        f"request.userInfo.username == 'system:serviceaccount:{OPERATOR_NS}:dtr-operator'"  # fmt: skip
    assert only(team, "ValidatingAdmissionPolicyBinding")["spec"]["policyName"] == policy["metadata"]["name"]
    # Apart from names, the team's policy is the first's.
    first_policy = only(first, "ValidatingAdmissionPolicy", "dtr-operator.distml.dev-shapes")
    assert policy["spec"]["validations"] == first_policy["spec"]["validations"]


def test_the_documented_copy_for_another_team_renders_that_teams_names(tmp_path: Path) -> None:
    """docs/clusters.md's commands for another team (all but kubectl's), run in a copy of deploy/ and crds/."""
    text = (REPO / "docs" / "clusters.md").read_text()
    section = text[text.index("### One operator per team"):]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block, "docs/clusters.md#one-operator-per-team has no sh block"
    commands = [c for c in block.group(1).splitlines() if not c.startswith("kubectl ")]
    assert commands and all(c.startswith(("cp ", "sed ")) for c in commands), commands
    for part in ("deploy", "crds"):
        shutil.copytree(REPO / part, tmp_path / part)
    proc = subprocess.run(["bash", "-euc", "\n".join(commands)], cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=30)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (copy,) = re.findall(r"kubectl apply -k (deploy/team-\w+)/", block.group(1))
    docs = render(tmp_path / copy)
    name = copy.removeprefix("deploy/team-")
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Namespace") == [f"dtr-{name}", name]
    assert {key(d) for d in docs}.isdisjoint({key(d) for d in render(TEAM)}), "the copy shares an object with ml-team"


# ---------------------------------------------------------------- on the API server


@contextmanager
def installed(cluster: Cluster, kustomization: Path) -> Iterator[list[dict[str, Any]]]:
    docs = render(kustomization)
    cluster.kubectl("apply", "-k", str(kustomization), timeout=120)
    for quota in [d for d in docs if d["kind"] == "ResourceQuota"]:
        settle_quota(cluster, quota)
    try:
        yield docs
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=as_yaml(rbac_objects(docs)))


@contextmanager
def operator(cluster: Cluster, docs: list[dict[str, Any]], where: Path) -> Iterator[tuple[Cluster, Path]]:
    """`dtr operator` with the Deployment's flags and env, as its ServiceAccount only. Yields (its view, its log)."""
    namespace = only(docs, "Deployment", "dtr-operator")["metadata"]["namespace"]
    where.mkdir()
    token = cluster.kubectl("create", "token", "dtr-operator", "-n", namespace, "--duration=30m").stdout.strip()
    as_operator = cluster.as_token(token, where)
    ports = free_port(), free_port()
    args, deployment_env = operator_flags(docs, *ports)
    env = {**os.environ, **deployment_env, "KUBECONFIG": str(as_operator.kubeconfig)}
    log_path = where / "operator.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen([str(REPO / ".venv" / "op" / "bin" / "dtr"), "operator", *args], env=env,
                                stdout=log, stderr=subprocess.STDOUT, cwd=where)  # fmt: skip
    try:
        wait_for(lambda: http_ok(f"http://127.0.0.1:{ports[0]}/healthz") or proc.poll() is not None,
                 f"the operator in {namespace} to be healthy", timeout=60)  # fmt: skip
        assert proc.poll() is None, f"the operator in {namespace} exited:\n{log_path.read_text()[-4000:]}"
        yield as_operator, log_path
    finally:
        stop_child(proc)


def run_doc(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"workers": 2, "training": {"dataset": "digits", "epochs": 2}}}  # fmt: skip


def test_two_operators_each_serve_their_own_namespace_and_leave_the_others_runs_alone(
    control_plane: Cluster, tmp_path: Path
) -> None:
    k = control_plane.kubectl
    with ExitStack() as stack:
        first_docs = stack.enter_context(installed(control_plane, NAMESPACED_MODE.kustomization))
        team_docs = stack.enter_context(installed(control_plane, TEAM))
        first, first_log = stack.enter_context(operator(control_plane, first_docs, tmp_path / "first"))
        team, team_log = stack.enter_context(operator(control_plane, team_docs, tmp_path / "team"))
        suffix = uuid.uuid4().hex[:6]
        mine, theirs = f"first-{suffix}", f"team-{suffix}"
        control_plane.create(run_doc(mine, FIRST_RUNS))
        control_plane.create(run_doc(theirs, RUNS))

        def expanded(name: str, namespace: str) -> dict[str, Any] | None:
            run = control_plane.kubectl_json("get", "dtr", name, "-n", namespace)
            job = k("get", "tfjob", name, "-n", namespace, "--ignore-not-found", "-o", "name").stdout.strip()
            return run if job and (run.get("status") or {}).get("tfJob") == name else None

        wait_for(lambda: expanded(mine, FIRST_RUNS), f"the first operator to expand {mine}", timeout=90)
        wait_for(lambda: expanded(theirs, RUNS), f"the team operator to expand {theirs}", timeout=90)
        # Each saw its own run only: the other's name is nowhere in its log.
        first_text, team_text = first_log.read_text(), team_log.read_text()
        assert mine in first_text and theirs not in first_text, first_text[-3000:]
        assert theirs in team_text and mine not in team_text, team_text[-3000:]
        assert "Traceback" not in first_text + team_text
        # ... and could not have touched it: neither account may read the other's runs.
        for view, other in ((first, RUNS), (team, FIRST_RUNS)):
            refused = view.kubectl("get", "dtr", "-n", other, check=False)
            assert refused.returncode != 0 and "Forbidden" in refused.stderr, refused.stdout + refused.stderr

        # The team's admission policy holds the team's account: an allow-all NetworkPolicy of its own is refused.
        policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                  "metadata": {"name": f"open-{suffix}", "namespace": RUNS},
                  "spec": {"podSelector": {}, "ingress": [{}], "policyTypes": ["Ingress"]}}  # fmt: skip
        refused = team.create(policy, check=False)
        assert refused.returncode != 0 and "deploy/base/operator-admission.yaml" in refused.stderr, refused.stderr
        assert "dtr-operator.distml.dev-shapes-ml-team" in refused.stderr, refused.stderr

        # `dtr namespaces` finds both operators and says who watches what.
        env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
        said = subprocess.run([str(REPO / ".venv" / "op" / "bin" / "dtr"), "namespaces", "-n", RUNS], env=env,
                              capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
        assert said.returncode == 0, said.stdout + said.stderr
        assert f"namespace {RUNS}: watched by {OPERATOR_NS}/dtr-operator\n" in said.stdout, said.stdout
        assert f"{FIRST_NS}/dtr-operator (ready 0/1) watches namespace(s) {FIRST_RUNS}" in said.stdout, said.stdout
        for name, namespace in ((mine, FIRST_RUNS), (theirs, RUNS)):
            k("delete", "dtr", name, "-n", namespace, "--wait=false", check=False)



def uninstall(cluster: Cluster, kustomization: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "deploy" / "uninstall.sh")], capture_output=True, text=True,
                          check=False, timeout=400, stdin=subprocess.DEVNULL,
                          env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "DTR_DEPLOY": str(kustomization),
                               **env})  # fmt: skip


def test_uninstall_says_what_goes_and_what_stays_and_a_teams_leaves_its_runs_and_namespace(
    control_plane: Cluster,
) -> None:
    """deploy/uninstall.sh (docs/clusters.md#uninstall): for the shared install, the plan alone (its CRDs would
    take every run of this shared control plane): the CRDs and every run with them, the runs' namespace and a run's
    retained volume kept; for a team's operator, done: its objects gone, its runs' namespace, its run and the CRD
    kept, and nothing of the first install touched."""
    k = control_plane.kubectl
    suffix = uuid.uuid4().hex[:6]
    with installed(control_plane, NAMESPACED_MODE.kustomization):
        control_plane.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                              "metadata": {"name": f"kept-{suffix}", "namespace": FIRST_RUNS,
                                           "labels": {"app.kubernetes.io/managed-by": "dtr-operator"}},
                              "spec": {"accessModes": ["ReadWriteOnce"],
                                       "resources": {"requests": {"storage": "1Mi"}}}})  # fmt: skip
        plan = uninstall(control_plane, NAMESPACED_MODE.kustomization)
        assert plan.returncode == 0, plan.stdout + plan.stderr
        said = " ".join(plan.stdout.split())
        assert "CustomResourceDefinition/disttrainingruns.distml.dev" in said and "DistTrainingRuns and" in said
        assert f"{FIRST_RUNS}/kept-{suffix}" in said and f"Namespace {FIRST_RUNS} (runs' namespaces" in said, said
        assert "nothing changed: run it again with DTR_UNINSTALL=yes" in said
        assert control_plane.kubectl_json("get", "crd", "disttrainingruns.distml.dev"), "the plan changed nothing"
        k("delete", "pvc", f"kept-{suffix}", "-n", FIRST_RUNS, "--wait=false")

        team_docs = render(TEAM)
        k("apply", "-k", str(TEAM), timeout=120)
        control_plane.create(run_doc(f"stays-{suffix}", RUNS))
        done = uninstall(control_plane, TEAM, DTR_UNINSTALL="yes")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "the CRDs stay (this install did not bring them)" in done.stdout, done.stdout
        for doc in team_docs:
            kind, meta = doc["kind"], doc["metadata"]
            where = ["-n", meta["namespace"]] if meta.get("namespace") else []
            left = k("get", kind, meta["name"], *where, "--ignore-not-found", "-o", "name", check=False).stdout.strip()
            if kind == "Namespace" and meta["name"] == RUNS:
                assert left, "the runs' namespace stays"
            elif kind == "Namespace":
                assert not left or "Terminating" in k("get", "namespace", meta["name"], "-o",
                                                      "jsonpath={.status.phase}").stdout, meta["name"]  # fmt: skip
            else:
                assert not left or meta.get("namespace") == OPERATOR_NS, (kind, meta["name"])
        assert control_plane.kubectl_json("get", "dtr", f"stays-{suffix}", "-n", RUNS), "the team's run stays"
        assert control_plane.kubectl_json("get", "deployment", "dtr-operator", "-n", FIRST_NS), "the first's stays"
        k("delete", "dtr", f"stays-{suffix}", "-n", RUNS, "--wait=false")
