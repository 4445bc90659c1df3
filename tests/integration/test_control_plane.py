"""The local control plane behaves like a real cluster where the operator depends on it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from devcluster import node as devnode
from devcluster.controlplane import REPO, pid_runs
from support.cluster import Cluster
from support.wait import wait_for


def pinned(name: str) -> str:
    return devnode.pinned(devnode.HERE / "versions.env")[name]


def missing(cluster: Cluster, *args: str) -> bool:
    proc = cluster.kubectl("get", *args, check=False)
    return proc.returncode != 0 and "NotFound" in proc.stderr


def test_apiserver_is_the_pinned_version(control_plane: Cluster) -> None:
    version = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == pinned("K8S_VERSION")


def test_rbac_refuses_a_service_account_until_it_is_granted_access(
    control_plane: Cluster, namespace: str, tmp_path: Path
) -> None:
    k = control_plane.kubectl
    k("create", "serviceaccount", "nobody", "-n", namespace)
    token = k("create", "token", "nobody", "-n", namespace, "--duration=10m").stdout.strip()
    nobody = control_plane.as_token(token, tmp_path)

    # TokenRequest works and the token authenticates as the ServiceAccount ...
    whoami = json.loads(nobody.kubectl("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:nobody"
    # ... which RBAC refuses, until a RoleBinding grants exactly one thing.
    denied = nobody.kubectl("get", "configmaps", "-n", namespace, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()
    assert nobody.kubectl("auth", "can-i", "list", "configmaps", "-n", namespace, check=False).stdout.strip() == "no"

    k("create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps", "-n", namespace)
    k("create", "rolebinding", "cm-reader", "--role=cm-reader", f"--serviceaccount={namespace}:nobody", "-n", namespace)
    wait_for(
        lambda: nobody.kubectl("auth", "can-i", "list", "configmaps", "-n", namespace,
                               check=False).stdout.strip() == "yes",
        "the RoleBinding to take effect",
    )
    nobody.kubectl("get", "configmaps", "-n", namespace)
    assert nobody.kubectl("auth", "can-i", "create", "configmaps", "-n", namespace, check=False).stdout.strip() == "no"
    assert nobody.kubectl("auth", "can-i", "list", "pods", "-n", namespace, check=False).stdout.strip() == "no"


def test_garbage_collector_deletes_a_child_after_its_owner(control_plane: Cluster, namespace: str) -> None:
    k = control_plane.kubectl
    k("create", "configmap", "owner", "-n", namespace)
    k("create", "configmap", "bystander", "-n", namespace)
    owner_uid = k("get", "configmap", "owner", "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
    control_plane.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "child",
                "namespace": namespace,
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}],
            },
        }
    )
    k("delete", "configmap", "owner", "-n", namespace, "--cascade=background")
    wait_for(lambda: missing(control_plane, "configmap", "child", "-n", namespace),
             "the child ConfigMap to be collected")
    k("get", "configmap", "bystander", "-n", namespace)  # only owned objects go


def test_new_namespace_gets_default_service_account_and_root_ca(control_plane: Cluster, namespace: str) -> None:
    wait_for(lambda: not missing(control_plane, "serviceaccount", "default", "-n", namespace), "ServiceAccount default")
    wait_for(lambda: not missing(control_plane, "configmap", "kube-root-ca.crt", "-n", namespace), "kube-root-ca.crt")


def test_deleted_namespace_goes_away_with_its_contents(control_plane: Cluster) -> None:
    k = control_plane.kubectl
    name = f"t-ns-deletion-{uuid.uuid4().hex[:6]}"
    k("create", "namespace", name)
    k("create", "configmap", "content", "-n", name)
    k("delete", "namespace", name, "--wait=false")
    wait_for(lambda: missing(control_plane, "namespace", name), "the namespace to be finalized", timeout=90)


def tfjob(name: str, namespace: str, workers: int, container: str = "tensorflow") -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": [
                        {"name": container, "image": "busybox:1.36", "command": ["true"]},
                    ]}},
                }
            },
        },
    }


def test_training_operator_creates_pods_and_headless_services(control_plane: Cluster, namespace: str) -> None:
    control_plane.create(tfjob("mnist", namespace, workers=2))
    uid = control_plane.kubectl("get", "tfjob", "mnist", "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
    selector = "training.kubeflow.org/job-name=mnist"

    def items(kind: str) -> list[dict[str, Any]]:
        return control_plane.kubectl_json("get", kind, "-n", namespace, "-l", selector)["items"]

    pods = wait_for(lambda: (p := items("pods")) and len(p) == 2 and p, "2 worker pods")
    services = wait_for(lambda: (s := items("services")) and len(s) == 2 and s, "2 worker services")

    expected = {"mnist-worker-0", "mnist-worker-1"}
    assert {p["metadata"]["name"] for p in pods} == expected
    assert {s["metadata"]["name"] for s in services} == expected
    for svc in services:
        assert svc["spec"]["clusterIP"] == "None"
        assert [p["port"] for p in svc["spec"]["ports"]] == [2222]
    for pod in pods:
        assert [o["uid"] for o in pod["metadata"]["ownerReferences"]] == [uid]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
        tf_config = json.loads(env["TF_CONFIG"])
        assert tf_config["cluster"]["worker"] == [f"mnist-worker-{i}.{namespace}.svc:2222" for i in range(2)]
        index = pod["metadata"]["labels"]["training.kubeflow.org/replica-index"]
        assert tf_config["task"] == {"type": "worker", "index": int(index)}

    wait_for(
        lambda: any(
            c["type"] == "Created" and c["status"] == "True"
            for c in control_plane.kubectl_json("get", "tfjob", "mnist", "-n", namespace)
            .get("status", {}).get("conditions", [])
        ),
        "the TFJob's Created condition",
    )


def test_an_in_process_read_is_what_kubectl_prints_and_none_when_missing(control_plane: Cluster,
                                                                         namespace: str) -> None:  # fmt: skip
    """Cluster.read, what the tiers poll with instead of a kubectl per poll: the same objects, lists and events."""
    control_plane.create(tfjob("read", namespace, workers=1))
    selector = "training.kubeflow.org/job-name=read"
    pods = wait_for(lambda: control_plane.read("pod", namespace, labelSelector=selector)["items"], "the worker pod")
    name = pods[0]["metadata"]["name"]
    read, printed = control_plane.read("pod", namespace, name), control_plane.kubectl_json("get", "pod", name, "-n",
                                                                                         namespace)  # fmt: skip
    assert (read["metadata"]["uid"], read["spec"]) == (printed["metadata"]["uid"], printed["spec"])
    job = control_plane.read("tfjob", namespace, "read")
    assert job["spec"] == control_plane.kubectl_json("get", "tfjob", "read", "-n", namespace)["spec"]
    def uids(events: dict[str, Any]) -> set[str]:
        return {e["metadata"]["uid"] for e in events["items"]}

    printed_events = uids(control_plane.kubectl_json("get", "events", "-n", namespace))
    assert printed_events and printed_events <= uids(control_plane.read("events", namespace))
    assert control_plane.read("dtr", namespace, "nothing") is None
    # no kubelet here: the pod's container never started, so it has no log yet
    assert not control_plane.read("pod", namespace, name, strict=False, log="", container="tensorflow")


def test_training_operator_webhook_rejects_a_tfjob_without_a_tensorflow_container(
    control_plane: Cluster, namespace: str
) -> None:
    proc = control_plane.create(tfjob("bad", namespace, workers=1, container="main"), check=False)
    assert proc.returncode != 0
    assert "validator.tfjob.training-operator.kubeflow.org" in proc.stderr
    assert "must have at least one container with name tensorflow" in proc.stderr


def test_pv_binder_binds_a_claim_to_a_matching_volume(control_plane: Cluster, namespace: str) -> None:
    storage_class = f"manual-{namespace}"  # unique, so no other test's claim can take this volume
    pv = f"pv-{namespace}"
    control_plane.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": storage_class,
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": f"/tmp/{pv}"},
            },
        }
    )
    try:
        control_plane.create(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "namespace": namespace},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": storage_class,
                    "resources": {"requests": {"storage": "500Mi"}},
                },
            }
        )

        def phase(*what: str) -> str:
            return control_plane.kubectl("get", *what, "-o", "jsonpath={.status.phase}").stdout

        wait_for(lambda: phase("pvc", "data", "-n", namespace) == "Bound", "the claim to bind")
        volume = control_plane.kubectl("get", "pvc", "data", "-n", namespace, "-o", "jsonpath={.spec.volumeName}")
        assert volume.stdout == pv
        assert phase("pv", pv) == "Bound"
    finally:
        control_plane.kubectl("delete", "pvc", "data", "-n", namespace, "--wait=true", "--timeout=60s", check=False)
        control_plane.kubectl("delete", "pv", pv, "--wait=false", check=False)


def test_resource_quota_is_counted_and_enforced(control_plane: Cluster, namespace: str) -> None:
    # kube-root-ca.crt is one. Created while the quota is new, it could be charged by neither the quota's first
    # count nor admission (the quota not yet in its cache), and stay uncounted until the 5-minute resync.
    wait_for(
        lambda: control_plane.kubectl("get", "configmap", "kube-root-ca.crt", "-n", namespace, check=False).returncode
        == 0,
        "the namespace's kube-root-ca.crt",
    )
    control_plane.kubectl("create", "quota", "one-cm", "-n", namespace, "--hard=configmaps=2")
    wait_for(
        lambda: control_plane.kubectl(
            "get", "quota", "one-cm", "-n", namespace, "-o", "jsonpath={.status.used.configmaps}"
        ).stdout == "1",
        "the quota controller to count the namespace's ConfigMaps",
    )
    control_plane.kubectl("create", "configmap", "fits", "-n", namespace)
    refused = control_plane.kubectl("create", "configmap", "over", "-n", namespace, check=False)
    assert refused.returncode != 0 and "exceeded quota" in refused.stderr


def project_crds() -> list[dict[str, Any]]:
    import yaml

    return [
        doc
        for path in sorted((REPO / "crds").glob("*.y*ml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "CustomResourceDefinition"
    ]


def test_project_crds_are_served_with_all_their_names(control_plane: Cluster) -> None:
    crds = project_crds()
    assert crds, "crds/ holds no CustomResourceDefinition"
    for crd in crds:
        names = crd["spec"]["names"]
        served = control_plane.kubectl_json("get", "crd", crd["metadata"]["name"])
        conditions = {c["type"]: c["status"] for c in served["status"]["conditions"]}
        assert conditions.get("Established") == "True"
        for name in [names["plural"], names.get("singular", names["plural"]), *names.get("shortNames", [])]:
            control_plane.kubectl("get", name, "--all-namespaces")
        control_plane.kubectl("explain", f"{names.get('singular', names['plural'])}.spec")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.usefixtures("control_plane")  # runs beside the session's plane: two at once must not collide
def test_cli_up_refuses_twice_and_down_leaves_nothing_running(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "devcluster.controlplane"]
    workdir = tmp_path / "plane"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args, "--dir", str(workdir)], capture_output=True, text=True, timeout=300,
                              check=False, cwd=REPO)  # fmt: skip

    up = run("up")
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == f"export KUBECONFIG={workdir / 'kubeconfig'}"
        state = json.loads((workdir / "state.json").read_text())
        assert run("status").returncode == 0

        again = run("up")
        assert again.returncode == 1 and "already runs" in again.stderr
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr

    assert not any(pid_runs(pid, state["binaries"][c]) for c, pid in state["pids"].items())
    assert not any(port_open(port) for port in state["ports"].values())
    assert run("status").returncode == 1
