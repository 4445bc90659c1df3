"""deploy/ against the real local control plane: the manifests pass the API server's own checks,
and the operator's ServiceAccount can do exactly what docs/architecture.md lists and nothing else.

Both install modes are exercised: deploy/ (all namespaces, ClusterRole) and deploy/namespaced/
(a Role in `dtr-runs`). They share the ServiceAccount dtr-operator in dtr-system, so a mode is
installed for real, checked, and its RBAC removed again before the other mode is installed
(the CRD and the namespaces stay: other tests of the session use the CRD).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from deploy_support import (
    MODES,
    NAMESPACED_MODE,
    REPO,
    SA_NAME,
    SA_NAMESPACE,
    SA_USER,
    SERVED_NAMESPACE,
    Mode,
    as_yaml,
    can_i,
    installed_mode,
    only,
    operator_completes_a_run,
    operator_container,
    operator_flags,
    render,
    service_account_cluster,
)

from devcluster.controlplane import free_port
from devcluster.node import image_names
from support.cluster import Cluster

Triple = tuple[str, str, str]  # (api group, resource[/subresource], verb)


# ---------------------------------------------------------------- pure helpers


def rule_triples(rules: list[dict[str, Any]]) -> set[Triple]:
    """RBAC PolicyRules (Role/ClusterRole `rules`, or a rules review's resourceRules) as triples."""
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def architecture_triples(markdown: str) -> set[Triple]:
    """The permission list of docs/architecture.md ("What the operator needs from the API").

    Bullets look like: - `distml.dev` `disttrainingruns`: get, list; `disttrainingruns/status`: get
    The first backticked token is a group (`policy` too, which has no dot), and so is a later one with a dot (or
    `""`, the core group); any other is a resource in the group named last. Parenthesised remarks are ignored.
    """
    section = re.search(r"^## What the operator needs from the API.*?\n(.*?)(?=^## |\Z)", markdown,
                        re.MULTILINE | re.DOTALL)
    assert section, "docs/architecture.md has no section 'What the operator needs from the API'"
    triples: set[Triple] = set()
    for line in section.group(1).splitlines():
        if not line.startswith("- "):
            continue
        group = None
        for part in re.sub(r"\([^)]*\)", "", line[2:]).split(";"):
            names, _, verbs_text = part.partition(":")
            resources: list[tuple[str, str]] = []
            for token in re.findall(r"`([^`]*)`", names):
                if group is None or token == '""' or "." in token:
                    group = "" if token == '""' else token
                else:
                    resources.append((group, token))
            verbs = [v.strip() for v in verbs_text.split(",") if v.strip()]
            assert resources and verbs, f"cannot read this permission bullet: {line}"
            triples |= {(g, r, v) for g, r in resources for v in verbs}
    return triples


NAMESPACES = ("", "namespaces")
USER_ROLES = ("dtr-run-author", "dtr-run-viewer")  # deploy/users/: for people, bound by an admin (test_user_roles.py)
CLUSTER_SCOPED = {("apiextensions.k8s.io", "customresourcedefinitions"), NAMESPACES}


def without_namespaces(triples: set[Triple]) -> set[Triple]:
    """kopf lists and watches namespaces only when it serves named ones, never cluster-wide; both modes get a run's
    namespace (whether it enforces Pod Security)."""
    return {t for t in triples if t[:2] != NAMESPACES or t[2] == "get"}


def cluster_scoped(triples: set[Triple]) -> set[Triple]:
    return {t for t in triples if t[:2] in CLUSTER_SCOPED}


# ---------------------------------------------------------------- the manifests, rendered (no cluster needed)


def documented() -> set[Triple]:
    return architecture_triples((REPO / "docs" / "architecture.md").read_text())


def test_architecture_doc_lists_the_permissions_the_clusterrole_grants() -> None:
    wanted = documented()
    assert {t[:2] for t in wanted} >= CLUSTER_SCOPED, "the doc names the cluster-scoped reads"
    granted = rule_triples(only(render(REPO / "deploy"), "ClusterRole", "dtr-operator")["rules"])
    expected = without_namespaces(wanted)
    assert granted == expected, f"only granted: {granted - expected}; only in the doc: {expected - granted}"
    # And the doc's own list is least privilege in the ways that matter most.
    assert not {t for t in wanted if "*" in t}, "wildcards"
    assert not {t for t in wanted if t[1] == "secrets"}, "secrets"
    # update only of the runs' finalizers: OwnerReferencesPermissionEnforcement asks it of whoever sets
    # blockOwnerDeletion on an owner reference to a run (the TFJob's and the PVC's).
    # delete only of TFJobs (a run's failed one, made again when Kubernetes took its workers away: spec.disruption)
    # and of runs (a sweep's trial it stopped early: reconcile/sweeps.py); never a collection.
    assert {t for t in wanted if t[2] in ("delete", "deletecollection", "escalate", "bind")} == \
        {("kubeflow.org", "tfjobs", "delete"), ("distml.dev", "disttrainingruns", "delete")}  # fmt: skip
    assert {t for t in wanted if t[2] == "update"} == {("distml.dev", "disttrainingruns/finalizers", "update"),
                                                       ("distml.dev", "disttrainingsweeps/finalizers", "update")}
    # Children: created, read; of the TFJob only runPolicy patched (suspend; a failed one's cleanPodPolicy).
    assert {t[2] for t in wanted if t[1] == "tfjobs"} == {"get", "list", "watch", "create", "patch", "delete"}
    # PVCs: the one a run names is read, its own created; never listed or watched (security review M2).
    assert {t[2] for t in wanted if t[1] == "persistentvolumeclaims"} == {"get", "create"}
    assert {t[2] for t in wanted if t[1] == "disttrainingruns/status"} == {"patch"}


def test_namespaced_mode_splits_the_list_into_a_role_and_cluster_wide_reads() -> None:
    wanted = documented()
    docs = render(REPO / "deploy" / "namespaced")
    role = only(docs, "Role", "dtr-operator")
    assert role["metadata"]["namespace"] == SERVED_NAMESPACE
    assert rule_triples(role["rules"]) == wanted - cluster_scoped(wanted)
    discovery = only(docs, "ClusterRole", "dtr-operator-discovery")
    assert rule_triples(discovery["rules"]) == cluster_scoped(wanted)
    assert {t[2] for t in cluster_scoped(wanted)} <= {"get", "list", "watch"}, "cluster-wide reads only"
    operator_roles = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] not in USER_ROLES]
    assert len(operator_roles) == 1, "namespaced mode has one, read-only, ClusterRole for the operator"
    binding = only(docs, "RoleBinding", "dtr-operator")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": SA_NAMESPACE}]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_crds_come_first_and_the_deployment_is_hardened(mode: Mode) -> None:
    docs = render(mode.kustomization)
    kinds = [d["kind"] for d in docs]
    # kustomize puts a ResourceQuota right after the Namespaces (deploy/namespaced/quota.yaml): it needs no CRD.
    before = ("Namespace", "ResourceQuota", "CustomResourceDefinition")
    first_other = next(i for i, k in enumerate(kinds) if k not in before)
    assert "CustomResourceDefinition" in kinds[:first_other], f"CRD not ahead of the rest: {kinds}"
    crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert crds == {"disttrainingruns.distml.dev", "disttrainingsweeps.distml.dev"}
    assert "CustomResourceDefinition" not in kinds[first_other:], f"a CRD after the rest: {kinds}"

    deployment = only(docs, "Deployment", "dtr-operator")
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == SA_NAME
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["image"] == image_names()[0]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert set(container["resources"]) == {"requests", "limits"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    probe = container["livenessProbe"]["httpGet"]
    assert probe["path"] == "/healthz" and ports[probe["port"]] == 8080
    args = container["args"]
    assert "--liveness-port=8080" in args and "--metrics-port=9090" in args
    if mode.served_namespace is None:
        assert "--all-namespaces" in args and not any(a.startswith("--namespace") for a in args)
    else:
        assert f"--namespace={mode.served_namespace}" in args and "--all-namespaces" not in args
    # Read-only root: the only writable place is the /tmp emptyDir.
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/tmp"]
    # Its own priority, shipped with it in both modes (docs/operator.md#the-operators-priority).
    assert pod["priorityClassName"] == only(docs, "PriorityClass")["metadata"]["name"]


def registry_overlay(mode: Mode, registry: str, out: Path) -> Path:
    """The overlay deploy/images/push.sh writes for mode's kustomization (DTR_PUSH=0: no push)."""
    env = {**os.environ, "DTR_PUSH": "0", "DTR_DEPLOY": str(mode.kustomization), "DTR_OVERLAY": str(out)}
    proc = subprocess.run(["bash", str(REPO / "deploy" / "images" / "push.sh"), registry],
                          env=env, capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"kubectl apply -k {out}" in proc.stdout, proc.stdout
    return out


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_the_registry_overlay_changes_only_where_both_images_come_from(mode: Mode, tmp_path: Path) -> None:
    registry = "registry.example.com:5000/ml"
    plain, pushed = render(mode.kustomization), render(registry_overlay(mode, registry, tmp_path / "overlay"))
    container = operator_container(pushed)
    operator, trainer = (name.removeprefix("localhost/") for name in image_names())  # the path on any registry
    assert container["image"] == f"{registry}/{operator}"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DTR_TRAINER_IMAGE"] == f"{registry}/{trainer}"
    assert env["DTR_ALLOWED_IMAGES"] == f"{registry}/{trainer.rsplit(':', 1)[0]}@sha256:*"  # any digest, never a tag
    # Everything else is what deploy/ renders: the same objects, RBAC, flags, security settings.
    original = operator_container(plain)
    assert [e["name"] for e in container["env"]] == [e["name"] for e in original["env"]], "env merged by name"
    for doc in (container, original):
        doc.pop("image")
        doc.pop("env")
    assert container == original

    def others(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted((d for d in docs if d["kind"] != "Deployment"), key=lambda d: (d["kind"], d["metadata"]["name"]))

    assert others(pushed) == others(plain)


def test_push_refuses_a_registry_that_is_not_one(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(REPO / "deploy" / "images" / "push.sh"), "https://Reg/"],
                          env={**os.environ, "DTR_PUSH": "0", "DTR_OVERLAY": str(tmp_path)},
                          capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert proc.returncode == 1 and "is not host[:port][/path]" in proc.stderr, proc.stderr
    assert not (tmp_path / "kustomization.yaml").exists()


# ---------------------------------------------------------------- against the API server


def kubectl(cluster: Cluster, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl(*args, input=input, check=False)


def ensure_namespaces(cluster: Cluster, docs: list[dict[str, Any]]) -> None:
    """Server-side dry-runs of namespaced objects need their namespace to exist for real."""
    namespaces = [d for d in docs if d["kind"] == "Namespace"]
    cluster.kubectl("apply", "-f", "-", input=as_yaml(namespaces))


def json_stream(text: str) -> list[Any]:
    decoder, objects, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        obj, end = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        objects.append(obj)
        at = end
    return objects


def access_reviews(cluster: Cluster, checks: list[tuple[str, str, str, str | None]]) -> list[bool]:
    """`kubectl auth can-i` for many (verb, resource[.group], subresource, namespace) in one call:
    the same SelfSubjectAccessReviews, impersonating the ServiceAccount (None = all namespaces)."""
    items = []
    for verb, qualified, subresource, namespace in checks:
        resource, _, group = qualified.partition(".")
        attributes = {"verb": verb, "resource": resource, "group": group, "subresource": subresource,
                      "namespace": namespace or ""}  # fmt: skip
        items.append({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                      "spec": {"resourceAttributes": attributes}})  # fmt: skip
    request = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    proc = cluster.kubectl("create", "--validate=false", "-f", "-", "-o", "json", f"--as={SA_USER}", input=request)
    reviews = json_stream(proc.stdout)  # kubectl prints one JSON object per created item
    assert len(reviews) == len(checks), proc.stdout[:2000]
    return [bool(r["status"].get("allowed")) for r in reviews]


def rules_review(cluster: Cluster, user: str, namespace: str) -> set[Triple]:
    """What `user` may do in `namespace`, as the API server's authorizer reports it."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
              "spec": {"namespace": namespace}}
    proc = cluster.kubectl("create", "--validate=false", "-f", "-", "-o", "json", f"--as={user}",
                           input=json.dumps(review))
    return rule_triples(json.loads(proc.stdout)["status"]["resourceRules"])


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_every_manifest_passes_server_side_dry_run(control_plane: Cluster, mode: Mode) -> None:
    docs = render(mode.kustomization)
    ensure_namespaces(control_plane, docs)
    proc = kubectl(control_plane, "apply", "--dry-run=server", "-f", "-", input=as_yaml(docs))
    assert proc.returncode == 0, proc.stderr
    # One "... (server dry run)" line per object, and no warning from the server (PodSecurity warns
    # on a Deployment it would refuse pods of). kubectl's own note about the CRD that the control
    # plane created without `kubectl apply` is not about the manifests.
    assert proc.stdout.count("(server dry run)") == len(docs), proc.stdout
    warnings = [w for w in proc.stderr.splitlines()
                if w.startswith("Warning") and "last-applied-configuration" not in w]
    assert not warnings, proc.stderr


def test_the_examples_the_k3d_script_applies_pass_server_side_dry_run(control_plane: Cluster, namespace: str) -> None:
    examples = sorted((REPO / "examples").glob("*.yaml"))
    assert REPO / "examples" / "mnist.yaml" in examples  # deploy/k3d/up.sh's default
    for example in examples:
        proc = kubectl(control_plane, "apply", "--dry-run=server", "-n", namespace, "-f", str(example))
        assert proc.returncode == 0 and "(server dry run)" in proc.stdout, f"{example.name}: {proc.stderr}"


@pytest.fixture(scope="module", params=MODES, ids=lambda m: m.name)
def installed(request: pytest.FixtureRequest, control_plane: Cluster) -> Iterator[Mode]:
    """One mode installed for real with `kubectl apply -k` (its RBAC removed afterwards)."""
    with installed_mode(control_plane, request.param) as mode:
        yield mode


def test_the_operator_pod_is_admitted_under_the_restricted_pod_security_standard(
    control_plane: Cluster, installed: Mode
) -> None:
    deployment = only(render(installed.kustomization), "Deployment", "dtr-operator")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dtr-operator-admission-check", "namespace": SA_NAMESPACE},
        "spec": deployment["spec"]["template"]["spec"],
    }
    accepted = kubectl(control_plane, "create", "--dry-run=server", "-f", "-", input=json.dumps(pod))
    assert accepted.returncode == 0, accepted.stderr

    # The check has teeth: the same pod without its container securityContext is refused.
    weakened = copy.deepcopy(pod)
    del weakened["spec"]["containers"][0]["securityContext"]
    refused = kubectl(control_plane, "create", "--dry-run=server", "-f", "-", input=json.dumps(weakened))
    assert refused.returncode != 0 and 'violates PodSecurity "restricted' in refused.stderr, refused.stderr


def test_the_operators_pod_is_given_its_priority_by_the_api_server(control_plane: Cluster, installed: Mode) -> None:
    """A pod of the installed Deployment's template, as its ReplicaSet would create it (this control plane runs no
    Deployment controller: created with a server-side dry run), gets the class's priority from the API server's
    Priority admission: a node short of disk or memory evicts it after every pod without a class."""
    shipped = only(render(installed.kustomization), "PriorityClass")
    name = shipped["metadata"]["name"]
    stored = control_plane.kubectl_json("get", "priorityclass", name)
    assert (stored["value"], stored["preemptionPolicy"]) == (shipped["value"], shipped["preemptionPolicy"])
    template = control_plane.kubectl_json("get", "deployment", "dtr-operator", "-n", SA_NAMESPACE)["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
           "metadata": {"name": "dtr-operator-priority-check", "namespace": SA_NAMESPACE}}  # fmt: skip
    admitted = kubectl(control_plane, "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod))
    assert admitted.returncode == 0, admitted.stderr
    spec = json.loads(admitted.stdout)["spec"]
    assert spec["priorityClassName"] == name
    assert spec["priority"] == shipped["value"] > 0 and spec["preemptionPolicy"] == shipped["preemptionPolicy"]
    # The check has teeth: a class the cluster does not have is refused, not silently priority 0.
    pod["spec"] = {**template["spec"], "priorityClassName": f"{name}-missing"}
    refused = kubectl(control_plane, "create", "--dry-run=server", "-f", "-", input=json.dumps(pod))
    assert refused.returncode != 0 and "no PriorityClass" in refused.stderr, refused.stderr


def test_service_account_may_do_exactly_what_the_architecture_lists(
    control_plane: Cluster, installed: Mode, namespace: str
) -> None:
    """The authorizer's own view of the ServiceAccount, minus what every account gets anyway."""
    wanted = documented()
    baseline_user = f"system:serviceaccount:{namespace}:default"  # no bindings of its own
    baseline = rules_review(control_plane, baseline_user, namespace)
    if installed.served_namespace is None:
        assert rules_review(control_plane, SA_USER, namespace) - baseline == without_namespaces(wanted)
    else:
        inside = rules_review(control_plane, SA_USER, installed.served_namespace) - baseline
        assert inside == wanted
        outside = rules_review(control_plane, SA_USER, namespace) - baseline
        assert outside == cluster_scoped(wanted)


# (verb, resource, subresource) the operator needs, asked in a namespace it serves.
NEEDED = [
    ("get", "disttrainingruns.distml.dev", ""),
    ("watch", "disttrainingruns.distml.dev", ""),
    ("patch", "disttrainingruns.distml.dev", ""),
    ("patch", "disttrainingruns.distml.dev", "status"),
    # blockOwnerDeletion under OwnerReferencesPermissionEnforcement
    ("update", "disttrainingruns.distml.dev", "finalizers"),
    ("create", "tfjobs.kubeflow.org", ""),
    ("watch", "tfjobs.kubeflow.org", ""),
    ("patch", "tfjobs.kubeflow.org", ""),  # runPolicy.suspend (spec.suspend); cleanPodPolicy of a failed TFJob
    ("delete", "tfjobs.kubeflow.org", ""),  # a failed one, to make it again (spec.disruption.resume)
    ("create", "disttrainingruns.distml.dev", ""),  # a sweep's trials (reconcile/sweeps.py)
    ("delete", "disttrainingruns.distml.dev", ""),  # a sweep's trial stopped early
    ("watch", "disttrainingsweeps.distml.dev", ""),
    ("patch", "disttrainingsweeps.distml.dev", "status"),
    ("create", "persistentvolumeclaims", ""),
    ("get", "pods", ""),
    ("get", "pods", "log"),  # status.progress
    ("get", "configmaps", ""),  # a run's code (spec.training.code.configMap): its SHA-256 in status.code
    ("create", "events", ""),
    ("list", "events", ""),  # a TFJob's FailedCreatePod events: pods the API server refused
    ("create", "poddisruptionbudgets.policy", ""),  # spec.disruption.protect
    ("patch", "poddisruptionbudgets.policy", ""),  # let go once the run has finished
]
# What it must never be able to do, anywhere.
FORBIDDEN = [
    ("get", "secrets", ""),
    ("list", "secrets", ""),
    ("deletecollection", "tfjobs.kubeflow.org", ""),
    ("update", "tfjobs.kubeflow.org", ""),
    ("deletecollection", "disttrainingruns.distml.dev", ""),
    ("update", "disttrainingruns.distml.dev", ""),
    ("delete", "disttrainingsweeps.distml.dev", ""),
    ("delete", "persistentvolumeclaims", ""),
    ("delete", "poddisruptionbudgets.policy", ""),
    ("list", "poddisruptionbudgets.policy", ""),
    ("list", "persistentvolumeclaims", ""),
    ("watch", "persistentvolumeclaims", ""),
    ("patch", "events", ""),
    ("create", "events.events.k8s.io", ""),
    ("create", "pods", ""),
    ("delete", "pods", ""),
    ("create", "pods", "exec"),
    ("get", "deployments.apps", ""),
    ("create", "deployments.apps", ""),
    ("patch", "deployments.apps", ""),
    ("delete", "deployments.apps", ""),
    ("create", "configmaps", ""),
    ("list", "configmaps", ""),
    ("watch", "configmaps", ""),
    ("patch", "configmaps", ""),
    ("create", "serviceaccounts", "token"),
    ("create", "rolebindings.rbac.authorization.k8s.io", ""),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("delete", "namespaces", ""),
]


def test_can_i_allows_what_the_operator_needs(control_plane: Cluster, installed: Mode) -> None:
    where = installed.served_namespace or "default"
    refused = [n for n in NEEDED if not can_i(control_plane, n[0], n[1], where, n[2])]
    assert not refused, f"{installed.name} mode refuses what the operator needs: {refused}"
    assert can_i(control_plane, "watch", "customresourcedefinitions.apiextensions.k8s.io", None)
    if installed.served_namespace is None:
        assert can_i(control_plane, "list", "disttrainingruns.distml.dev", None)
        assert not can_i(control_plane, "list", "namespaces", None)
    else:
        assert can_i(control_plane, "watch", "namespaces", None)


def test_dtr_namespaces_says_which_namespaces_the_installed_operator_watches(
    control_plane: Cluster, installed: Mode, namespace: str
) -> None:
    """`dtr namespaces -n NS` reads the installed Deployment's flags from the API server."""

    def ask(where: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
        return subprocess.run([str(REPO / ".venv" / "op" / "bin" / "dtr"), "namespaces", "-n", where],
                              env=env, capture_output=True, text=True, check=False, timeout=60)  # fmt: skip

    outside = ask(namespace)
    if installed.served_namespace is None:
        assert outside.returncode == 0, outside.stdout + outside.stderr
        assert f"namespace {namespace}: watched by {SA_NAMESPACE}/dtr-operator" in outside.stdout
        assert "watches all namespaces" in outside.stdout
    else:
        assert outside.returncode == 1, outside.stdout + outside.stderr
        assert f"namespace {namespace}: NOT watched: runs created there get no status" in outside.stdout
        assert f"watches namespace(s) {installed.served_namespace}" in outside.stdout
        inside = ask(installed.served_namespace)
        assert inside.returncode == 0 and "watched by" in inside.stdout, inside.stdout + inside.stderr


def test_can_i_refuses_secrets_deletes_and_everything_else(
    control_plane: Cluster, installed: Mode, namespace: str
) -> None:
    where = installed.served_namespace or "default"
    # The headline refusals, asked exactly as a person would ...
    assert not can_i(control_plane, "get", "secrets", where)
    assert not can_i(control_plane, "list", "secrets", None)
    assert not can_i(control_plane, "delete", "persistentvolumeclaims", where)
    assert not can_i(control_plane, "create", "deployments.apps", where)
    # ... and the whole matrix (every forbidden action, served namespace, another, its own, all).
    checks = [(v, r, sub, p) for v, r, sub in FORBIDDEN for p in (where, namespace, SA_NAMESPACE, None)]
    allowed = [c for c, ok in zip(checks, access_reviews(control_plane, checks), strict=True) if ok]
    assert not allowed, f"{installed.name} mode allows: {allowed}"
    # The bulk check is not blind: the same call answers yes where the operator is allowed.
    needed = [(v, r, sub, where) for v, r, sub in NEEDED]
    assert all(access_reviews(control_plane, needed))


@pytest.mark.parametrize("installed", [NAMESPACED_MODE], ids=lambda m: m.name, indirect=True)
def test_namespaced_mode_cannot_act_outside_its_namespace(
    control_plane: Cluster, installed: Mode, namespace: str
) -> None:
    outside = [n for n in NEEDED if can_i(control_plane, n[0], n[1], namespace, n[2])]
    assert not outside, f"allowed outside {installed.served_namespace}: {outside}"
    everywhere = [("list", "disttrainingruns.distml.dev"), ("list", "tfjobs.kubeflow.org"),
                  ("list", "persistentvolumeclaims"), ("list", "pods")]  # fmt: skip
    assert not [e for e in everywhere if can_i(control_plane, *e, None)]


# ---------------------------------------------------------------- the operator, as its ServiceAccount


def test_operator_as_its_service_account_completes_a_run(
    control_plane: Cluster, installed: Mode, namespace: str, tmp_path: Path
) -> None:
    """`dtr operator` (the dev environment's) with the Deployment's flags and only the
    ServiceAccount's token, no admin credentials to fall back on, expands a run and follows it to
    Succeeded. tests/integration/test_deploy_images.py runs the image's environment the same way."""
    as_operator = service_account_cluster(control_plane, tmp_path)
    ports = free_port(), free_port()
    args, deployment_env = operator_flags(render(installed.kustomization), *ports)
    command = [str(REPO / ".venv" / "op" / "bin" / "dtr"), "operator", *args]
    env = {**os.environ, **deployment_env, "KUBECONFIG": str(as_operator.kubeconfig)}

    def start(log: IO[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)

    run_ns = installed.served_namespace or namespace
    image = deployment_env["DTR_TRAINER_IMAGE"]
    operator_completes_a_run(control_plane, start, ports, run_ns, image, tmp_path / "operator.log")
