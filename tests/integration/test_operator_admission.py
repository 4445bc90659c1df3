"""deploy/base/operator-admission.yaml on the real API server (security review R4): what the operator's own
ServiceAccount creates of TFJobs, NetworkPolicies and PodDisruptionBudgets must have the shapes builders.py makes.
The operator's own children, built by builders.py, are admitted; the same objects widened as a stolen token would
(an allow-all policy, a host-network or privileged pod, a hostPath, a budget over other pods) are refused; the
admin may still write them (the policy binds only that account). The operator's whole path under the policy:
test_deploy.py::test_operator_as_its_service_account_completes_a_run and every node test."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import CLUSTER_MODE, SA_USER, installed_mode
from dtr_operator.builders import build_network_policy, build_pdb, children, owned_by
from dtr_operator.spec import RunSpec, parse_run
from dtr_operator.sweep.observe import trial_run

from support.cluster import Cluster
from support.runs import run_doc
from support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
Mutation = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def installed(control_plane: Cluster) -> Iterator[None]:
    with installed_mode(control_plane, CLUSTER_MODE):
        # The API server applies a new policy within a moment: in force once an object owned by nothing is refused.
        unowned = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                   "metadata": {"name": "in-force", "namespace": "default"},
                   "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}  # fmt: skip
        wait_for(lambda: not create(control_plane, unowned)[0], "the admission policy to take effect", timeout=60,
                 interval=0.5)  # fmt: skip
        yield


def a_run(namespace: str) -> RunSpec:
    doc = yaml.safe_load((REPO / "examples" / "digits.yaml").read_text())
    spec = {**doc["spec"], "disruption": {"protect": True},
            "training": {**doc["spec"]["training"], "code": {"configMap": "code", "key": "model.py"}}}  # fmt: skip
    del spec["training"]["model"]
    return parse_run(run_doc("shapes", namespace, spec, uid=str(uuid.uuid4())))


def built(run: RunSpec) -> dict[str, dict[str, Any]]:
    """The run's TFJob, NetworkPolicy and PodDisruptionBudget as the operator creates them."""
    pdb = build_pdb(run)
    assert pdb is not None
    return {"TFJob": children(run)[1], "NetworkPolicy": owned_by(build_network_policy(run), run),
            "PodDisruptionBudget": owned_by(pdb, run)}  # fmt: skip


def create(cluster: Cluster, doc: dict[str, Any], as_user: str | None = SA_USER) -> tuple[bool, str]:
    who = [f"--as={as_user}"] if as_user else []
    proc = cluster.kubectl("create", "--dry-run=server", *who, "-f", "-", input=json.dumps(doc), check=False)
    return proc.returncode == 0, proc.stderr


def pod(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]


def container(job: dict[str, Any]) -> dict[str, Any]:
    return pod(job)["containers"][0]


# (id, kind, what a stolen token changes, words of the refusal)
WIDENED: list[tuple[str, str, Mutation, str]] = [
    ("policy-allow-all", "NetworkPolicy", lambda p: p["spec"].update(ingress=[{}]), "admits only its run's pods"),
    ("policy-all-pods", "NetworkPolicy", lambda p: p["spec"].update(podSelector={}), "admits only its run's pods"),
    ("policy-other-namespaces", "NetworkPolicy",
     lambda p: p["spec"]["ingress"][0]["from"][0].update(namespaceSelector={}), "admits only its run's pods"),
    ("policy-ip-block", "NetworkPolicy",
     lambda p: p["spec"]["ingress"][0]["from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}}), "admits only its run's"),
    ("policy-egress", "NetworkPolicy", lambda p: p["spec"].update(policyTypes=["Ingress", "Egress"], egress=[{}]),
     "ingress only"),
    ("policy-not-owned", "NetworkPolicy", lambda p: p["metadata"].pop("ownerReferences"), "controlled by the"),
    ("policy-other-name", "NetworkPolicy", lambda p: p["metadata"].update(name="elsewhere"), "controlled by the"),
    ("job-host-network", "TFJob", lambda j: pod(j).update(hostNetwork=True), "host namespaces"),
    ("job-host-pid", "TFJob", lambda j: pod(j).update(hostPID=True), "host namespaces"),
    ("job-token", "TFJob", lambda j: pod(j).update(automountServiceAccountToken=True), "no token"),
    ("job-service-account", "TFJob", lambda j: pod(j).update(serviceAccountName="dtr-operator"), "ServiceAccount"),
    ("job-root", "TFJob", lambda j: pod(j)["securityContext"].update(runAsNonRoot=False), "non-root"),
    ("job-init-container", "TFJob", lambda j: pod(j).update(initContainers=[copy.deepcopy(container(j))]),
     "init"),
    ("job-privileged", "TFJob", lambda j: container(j)["securityContext"].update(privileged=True), "privilege"),
    ("job-escalation", "TFJob", lambda j: container(j)["securityContext"].update(allowPrivilegeEscalation=True),
     "privilege"),
    ("job-capability", "TFJob", lambda j: container(j)["securityContext"]["capabilities"].update(add=["NET_ADMIN"]),
     "capabilities"),
    ("job-host-path", "TFJob",
     lambda j: pod(j)["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), "mounts only"),
    ("job-secret", "TFJob", lambda j: pod(j)["volumes"].append({"name": "s", "secret": {"secretName": "x"}}),
     "mounts only"),
    ("job-not-owned", "TFJob", lambda j: j["metadata"].update(ownerReferences=[]), "controlled by the"),
    ("budget-other-pods", "PodDisruptionBudget", lambda b: b["spec"].update(selector={"matchLabels": {"app": "db"}}),
     "covers only its run's pods"),
]


def test_the_operators_own_children_are_admitted(control_plane: Cluster, installed: None, namespace: str) -> None:
    for kind, doc in built(a_run(namespace)).items():
        ok, err = create(control_plane, doc)
        assert ok, f"{kind}: {err}"


@pytest.mark.parametrize(("kind", "widen", "words"), [w[1:] for w in WIDENED], ids=[w[0] for w in WIDENED])
def test_the_operators_account_cannot_widen_what_it_makes(
    control_plane: Cluster, installed: None, namespace: str, kind: str, widen: Mutation, words: str
) -> None:
    doc = copy.deepcopy(built(a_run(namespace))[kind])
    widen(doc)
    ok, err = create(control_plane, doc)
    assert not ok and "operator-admission.yaml" in err and words in err, err


def test_the_policy_binds_only_the_operators_account(control_plane: Cluster, installed: None, namespace: str) -> None:
    """An admin (and `edit` in its namespace) may still write a wide policy: the operator reports it on the runs it
    widens (IsolationWeakened), the admission policy does not stand in for the namespace's owner."""
    doc = copy.deepcopy(built(a_run(namespace))["NetworkPolicy"])
    doc["spec"]["ingress"] = [{}]
    ok, err = create(control_plane, doc, as_user=None)
    assert ok, err


# ---- the runs the operator makes and deletes: a sweep's trials only ------------------------------------------


def a_sweep(control_plane: Cluster, namespace: str) -> dict[str, Any]:
    """A sweep as its author makes it (as the admin here); no operator serves it in this module."""
    doc = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingSweep",
           "metadata": {"name": "lr", "namespace": namespace},
           "spec": {"template": {"spec": {"suspend": True}}, "space": {"width": {"choice": [8, 16]}},
                    "objective": {"metric": "val_accuracy"}}}  # fmt: skip
    control_plane.kubectl("create", "-f", "-", input=json.dumps(doc))
    return control_plane.kubectl_json("get", "disttrainingsweep", "lr", "-n", namespace)


def as_operator(control_plane: Cluster, namespace: str, *args: str, input: str | None = None) -> tuple[bool, str]:
    proc = control_plane.kubectl(*args, "-n", namespace, "--dry-run=server", f"--as={SA_USER}", input=input,
                                 check=False)  # fmt: skip
    return proc.returncode == 0, proc.stderr


def test_the_operators_account_creates_and_deletes_only_a_sweeps_trials(
    control_plane: Cluster, installed: None, namespace: str
) -> None:
    """Its RBAC may create and delete any run (a sweep's stopped trials are deleted): a stolen token may still make
    or delete only runs a sweep controls under their trial's name, and may not make another's run a trial."""
    sweep = a_sweep(control_plane, namespace)
    trial = trial_run(sweep, 0, {"width": 8})
    assert create(control_plane, trial)[0], create(control_plane, trial)[1]
    for what, change in (("not owned", lambda d: d["metadata"].pop("ownerReferences")),
                         ("another name", lambda d: d["metadata"].update(name="lr-7")),
                         ("not a trial", lambda d: d["metadata"]["labels"].pop("distml.dev/trial"))):  # fmt: skip
        doc = copy.deepcopy(trial)
        change(doc)
        ok, err = create(control_plane, doc)
        assert not ok and "only a sweep's trials" in err, (what, err)

    control_plane.kubectl("create", "-f", "-", input=json.dumps(trial))  # the sweep's trial, as the operator made it
    control_plane.create(run_doc("teammates", namespace, {"suspend": True}))
    assert as_operator(control_plane, namespace, "delete", "disttrainingrun", trial["metadata"]["name"])[0]
    ok, err = as_operator(control_plane, namespace, "delete", "disttrainingrun", "teammates")
    assert not ok and "only a sweep's trials" in err, err
    made_trial = json.dumps({"metadata": {"labels": {"distml.dev/trial": "1"},
                                          "ownerReferences": trial["metadata"]["ownerReferences"]}})  # fmt: skip
    ok, err = as_operator(control_plane, namespace, "patch", "disttrainingrun", "teammates", "--type=merge",
                          "-p", made_trial)  # fmt: skip
    assert not ok and "never changes a run's owners" in err, err
    ok, err = as_operator(control_plane, namespace, "patch", "disttrainingrun", "teammates", "--type=merge",
                          "-p", '{"metadata": {"annotations": {"kopf.zalando.org/touch": "1"}}}')  # fmt: skip
    assert ok, f"the operator's own updates must pass: {err}"
