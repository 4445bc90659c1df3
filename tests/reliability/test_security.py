"""Security: the `restricted` Pod Security Standard, enforced by the API server's PodSecurity admission
on the test namespace, admits the trainer pods the training-operator creates for a run and the operator
Deployment from deploy/; a weakened pod in the same namespace is refused (so enforcement is really on).

RBAC least privilege (can-i, impersonated runs, namespaced mode) is tests/integration/test_deploy.py's;
the trainer refusing dataset paths that escape its volume is tests/trainer/test_bad_input.py and
test_units.py's (`escapes --data-dir`); the CRD refuses escaping dataset/modelName values (invalid_runs.yaml).
"""

from __future__ import annotations

import copy
import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kopf.testing import KopfRunner
from ledger import Ledger, Record

from support.api import Api
from support.cluster import Cluster
from support.wait import poll

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/distml/trainer:0.1.0-test"
PSS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
}


@pytest.fixture(scope="module")
def restricted_ns(control_plane: Cluster) -> Iterator[str]:
    name = f"t-restricted-{uuid.uuid4().hex[:6]}"
    doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": PSS}}
    control_plane.create(doc)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def tfjob_events(api: Api, namespace: str, name: str) -> list[str]:
    selector = f"involvedObject.kind=TFJob,involvedObject.name={name}"
    got = api.core.list_namespaced_event(namespace, field_selector=selector)
    return [f"{e.reason}: {e.message}" for e in got.items]


def test_trainer_pods_are_admitted_under_restricted(
    control_plane: Cluster, restricted_ns: str, ledger: Ledger
) -> None:
    api = Api.from_kubeconfig(str(control_plane.kubeconfig))
    os.environ["DTR_TRAINER_IMAGE"] = IMAGE
    args = ["run", "--standalone", "--namespace", restricted_ns, "-m", "dtr_operator.handlers"]
    with KopfRunner(args, timeout=60) as runner:
        code, message = api.create_run(restricted_ns, "secure", {"workers": 3, "training": {"dataset": "digits"}})
        assert code == 201, message
        pods = poll(lambda: len(p := api.pods(restricted_ns, "secure")) == 3 and p, 60)
        events = tfjob_events(api, restricted_ns, "secure")
    assert runner.exit_code == 0 and "Traceback" not in runner.output, runner.output[-3000:]
    admitted = len(pods or [])
    contexts_ok = all(
        p.spec.security_context.run_as_non_root
        and p.spec.security_context.seccomp_profile.type == "RuntimeDefault"
        and p.spec.containers[0].security_context.allow_privilege_escalation is False
        and p.spec.containers[0].security_context.capabilities.drop == ["ALL"]
        for p in pods or []
    )

    # The control: the same TFJob with the securityContext stripped is refused pod by pod.
    weak = copy.deepcopy(api.tfjob(restricted_ns, "secure"))
    weak["metadata"] = {"name": "weakened", "namespace": restricted_ns}
    weak.pop("status", None)
    template = weak["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    template["metadata"] = {}
    template["spec"].pop("securityContext")
    template["spec"]["containers"][0].pop("securityContext")
    weak["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    api.create_tfjob(weak)
    refusal = poll(lambda: [e for e in tfjob_events(api, restricted_ns, "weakened") if "violates PodSecurity" in e], 60)
    weak_pods = api.pods(restricted_ns, "weakened")
    ledger.add(
        Record(
            area="security",
            case="restricted PSS enforced: the run's TFJob worker pods",
            tried=admitted + 1,
            correct=(admitted if contexts_ok else 0) + int(bool(refusal) and not weak_pods),
            user_sees=f"{admitted} of 3 worker pods admitted; "
                      f"a weakened TFJob: {(refusal or ['(no refusal)'])[0][:160]}",
            detail={"pods_admitted": admitted, "security_contexts_restricted": contexts_ok,
                    "weakened_refused": bool(refusal) and not weak_pods, "tfjob_events": events[:5]},
        )
    )
    assert admitted == 3, f"worker pods not admitted; TFJob events: {events}"
    assert contexts_ok
    assert refusal and not weak_pods, tfjob_events(api, restricted_ns, "weakened")


def deploy_docs(control_plane: Cluster) -> list[dict[str, Any]]:
    out = control_plane.kubectl("kustomize", str(REPO / "deploy")).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def dry_run(control_plane: Cluster, doc: dict[str, Any]) -> Any:
    return control_plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False)


def test_operator_deployment_passes_restricted(control_plane: Cluster, restricted_ns: str, ledger: Ledger) -> None:
    docs = deploy_docs(control_plane)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    deployment["metadata"]["namespace"] = account["metadata"]["namespace"] = restricted_ns
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(account))  # pods need their account to exist
    for priority in [d for d in docs if d["kind"] == "PriorityClass"]:  # and the class they name (deploy/base)
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(priority))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "operator-pod", "namespace": restricted_ns},
        "spec": copy.deepcopy(deployment["spec"]["template"]["spec"]),
    }
    results = {}
    proc = dry_run(control_plane, deployment)
    results["deployment"] = proc.returncode == 0 and "violate PodSecurity" not in proc.stderr
    proc = dry_run(control_plane, pod)
    results["pod"] = proc.returncode == 0
    # The control: the pod run as root with privilege escalation is refused, naming what violates.
    weak = copy.deepcopy(pod)
    weak["metadata"]["name"] = "operator-root"
    weak["spec"]["securityContext"] = {"runAsUser": 0}
    weak["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": True}
    refused = dry_run(control_plane, weak)
    reasons = re.findall(r'violates PodSecurity "restricted:latest": (.*)', refused.stderr)
    results["weakened refused"] = refused.returncode != 0 and bool(reasons)
    weak_deployment = copy.deepcopy(deployment)
    weak_deployment["spec"]["template"]["spec"] = weak["spec"]
    warned = dry_run(control_plane, weak_deployment)
    results["weakened deployment warned"] = "would violate PodSecurity" in warned.stderr
    ledger.add(
        Record(
            area="security",
            case="restricted PSS enforced: the operator Deployment (deploy/), server dry-run",
            tried=len(results),
            correct=sum(results.values()),
            user_sees=f"Deployment and its pod admitted; root pod refused: {(reasons or ['?'])[0][:160]}",
            detail=results,
        )
    )
    assert all(results.values()), (results, refused.stderr, warned.stderr)


def test_images_run_as_the_uid_the_pods_require() -> None:
    """Both images switch to uid 1000 (non-root), the uid the TFJob's and the Deployment's pods set."""
    from dtr_operator.builders import RUN_AS

    for dockerfile in ("Dockerfile.trainer", "Dockerfile.operator"):
        users = re.findall(r"^USER\s+(\S+)", (REPO / dockerfile).read_text(), re.MULTILINE)
        assert users and users[-1].split(":")[0] == str(RUN_AS) != "0", (dockerfile, users)
