"""The first day on a cluster (issue 43), against the real kube-apiserver: `dtr data put --create` makes the claim
runs may mount, and `dtr submit` sends a complete run (resources, queue, priority classes, a base file) that the
API server's schema, the CRD, takes as dtr checked it; the transfer pods run an image the cluster has (its operator's
default, else the run's), never this machine's. No kubelet here: a transfer pod never starts (the copy
itself is tested on a real node, tests/node/test_transfer.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from operator_support import get

from support.cluster import Cluster
from support.wait import wait_for

OWN_TRAINER = "registry.example:5000/ml/own-trainer@sha256:" + "b" * 64  # a team's image, named with --image
SOURCE = "def build_model(ctx):\n    return None\n\n\ndef load_data(ctx):\n    return None\n"


def _dtr(cluster: Cluster, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "dtr_cli", *argv], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_data_put_create_makes_the_labelled_claim_once(control_plane: Cluster, namespace: str,
                                                       tmp_path: Path) -> None:  # fmt: skip
    data = tmp_path / "wine.npz"
    data.write_bytes(b"not really npz")
    # No operator watches this namespace: the image is named (test_the_transfer_pods_image_is_the_clusters_... below).
    first = _dtr(control_plane, "data", "put", "--create", "64Mi", "my-data", str(data), "-n", namespace,
                 "--timeout", "3", "--image", OWN_TRAINER)  # fmt: skip
    assert f"claim my-data created in namespace {namespace}: 64Mi, ReadWriteOnce, labelled distml.dev/runs=allowed" \
        in first.stderr, first.stderr  # fmt: skip
    # No kubelet: the copy's pod never starts, and says so (exit 1); the claim stays, made as runs need it.
    assert first.returncode == 1 and "did not start in 3 s" in first.stderr, first.stderr
    pvc = get(control_plane, namespace, "pvc", "my-data")
    assert pvc["metadata"]["labels"] == {"distml.dev/runs": "allowed"}
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"] and pvc["spec"]["resources"]["requests"] == {
        "storage": "64Mi"}  # fmt: skip
    wait_for(lambda: not control_plane.kubectl_json("get", "pods", "-n", namespace, "-o", "json")["items"],
             "the transfer pod deleted", timeout=60)  # fmt: skip

    # Again: the claim is used as it is, not made twice; a claim without the label is named with the fix.
    again = _dtr(control_plane, "data", "put", "--create", "1Gi", "my-data", str(data), "-n", namespace,
                 "--timeout", "1", "--image", OWN_TRAINER)  # fmt: skip
    assert f"claim my-data exists in namespace {namespace}: the data goes into it as it is\n" in again.stderr
    control_plane.kubectl("label", "pvc", "my-data", "-n", namespace, "distml.dev/runs-")
    bare = _dtr(control_plane, "data", "put", "--create", "1Gi", "my-data", str(data), "-n", namespace,
                "--timeout", "1")  # fmt: skip
    assert f"kubectl label pvc my-data -n {namespace} distml.dev/runs=allowed" in bare.stderr, bare.stderr


def test_submit_sends_a_complete_run_the_api_server_takes(control_plane: Cluster, namespace: str,
                                                          tmp_path: Path) -> None:  # fmt: skip
    model = tmp_path / "wine_model.py"
    model.write_text(SOURCE)
    base = tmp_path / "team.yaml"
    base.write_text(yaml.safe_dump({
        "apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "metadata": {"labels": {"team": "a"}},
        "spec": {"workers": 3, "training": {"epochs": 5},
                 "tolerations": [{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}]},
    }))  # fmt: skip
    proc = _dtr(control_plane, "submit", str(model), "-n", namespace, "-f", str(base), "--workers", "2", "--cpu",
                "500m", "--memory", "256Mi", "--gpus", "1", "--queue", "team-q", "--priority-class", "batch",
                "--workload-priority-class", "high", "--claim", "my-data")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = get(control_plane, namespace, "dtr", "wine-model")
    spec = run["spec"]
    assert run["metadata"]["labels"] == {"team": "a"}
    assert spec["resources"] == {"requests": {"cpu": "500m", "memory": "256Mi"},
                                 "limits": {"cpu": "500m", "memory": "256Mi", "nvidia.com/gpu": "1"}}  # fmt: skip
    assert (spec["workers"], spec["training"]["epochs"], spec["queueName"], spec["priorityClassName"],
            spec["workloadPriorityClass"]) == (2, 5, "team-q", "batch", "high")  # fmt: skip
    assert spec["tolerations"][0]["key"] == "pool" and spec["storage"]["claimName"] == "my-data"
    assert spec["training"]["code"] == {"configMap": "wine-model-code", "key": "wine_model.py"}

    # Refused before any API call, naming the field, as dtr render says it.
    bad = _dtr(control_plane, "submit", str(model), "-n", namespace, "--name", "other",
               "--workload-priority-class", "high")  # fmt: skip
    assert bad.returncode == 2 and "spec.workloadPriorityClass: needs spec.queueName" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr and get(control_plane, namespace, "configmap", "other-code") is None


def test_submit_wait_follows_the_status_to_its_end(control_plane: Cluster, namespace: str, tmp_path: Path) -> None:
    """--wait reads the run's status from the API server: here written as the operator would (no operator, no
    kubelet in this tier), an epoch, then the end."""
    model = tmp_path / "wine_model.py"
    model.write_text(SOURCE)
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    proc = subprocess.Popen([sys.executable, "-m", "dtr_cli", "submit", str(model), "-n", namespace, "--wait"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_for(lambda: get(control_plane, namespace, "dtr", "wine-model"), "the run created", timeout=60)
        progress = {"epoch": 1, "epochs": 2, "metrics": [{"name": "loss", "value": "0.5"}]}
        for status in ({"phase": "Running", "progress": progress},
                       {"phase": "Succeeded", "message": "accuracy 0.97", "progress": {**progress, "epoch": 2}}):
            control_plane.kubectl("patch", "dtr", "wine-model", "-n", namespace, "--subresource=status",
                                  "--type=merge", "-p", json.dumps({"status": status}))  # fmt: skip
            time.sleep(3)  # the client polls every 2 s: each status seen
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert "wine-model: epoch 1/2 loss=0.5\n" in out and out.endswith("wine-model: Succeeded: accuracy 0.97\n"), out


# ---- the transfer pods' image: the cluster's (dtr_client.images), never this machine's default

REGISTRY_TRAINER = "registry.example:5000/ml/distml/trainer@sha256:" + "a" * 64  # a registry install's default


def _operator_deployment(where: str, watched: str) -> dict[str, Any]:
    """An operator's Deployment as a registry install leaves it (push.sh's overlay): its default trainer image on the
    registry. Only the object matters here: dtr reads its flags as `dtr operator` would."""
    labels = {"app.kubernetes.io/name": "dtr-operator"}
    container = {"name": "operator", "image": "registry.example:5000/ml/distml/operator:0.1.0",
                 "args": ["--log-format=json", f"--namespace={watched}"],
                 "env": [{"name": "DTR_TRAINER_IMAGE", "value": REGISTRY_TRAINER}]}  # fmt: skip
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "dtr-operator", "namespace": where, "labels": labels},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}  # fmt: skip


def _author(cluster: Cluster, namespace: str, where: Path) -> Cluster:
    """A run author who may do in NAMESPACE what dtr data put and model get need (docs/models.md), and read nothing
    outside it: not the operator's Deployment, not TFJobs."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "author", "namespace": namespace},
            "rules": [{"apiGroups": ["distml.dev"], "resources": ["disttrainingruns"], "verbs": ["get"]},
                      {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"]},
                      {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create", "delete"]},
                      {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
                      {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]}]}  # fmt: skip
    cluster.create(role)
    cluster.kubectl("create", "serviceaccount", "author", "-n", namespace)
    cluster.kubectl("create", "rolebinding", "author", "--role=author", f"--serviceaccount={namespace}:author",
                    "-n", namespace)  # fmt: skip
    token = cluster.kubectl("create", "token", "author", "-n", namespace, "--duration=10m").stdout.strip()
    return cluster.as_token(token, where)


def _transfer_pod_image(cluster: Cluster, namespace: str, *argv: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """dtr ARGV (a transfer that cannot start here: no kubelet), and the image of the pod it made, read from the API
    server while it waits."""
    env = {k: v for k, v in os.environ.items() if k != "DTR_TRAINER_IMAGE"}
    env["KUBECONFIG"] = str(cluster.kubeconfig)
    proc = subprocess.Popen([sys.executable, "-m", "dtr_cli", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip

    def made() -> str | None:
        pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/name=dtr-transfer")
        return next((p["spec"]["containers"][0]["image"] for p in pods["items"]), None)

    image = wait_for(made, "the transfer pod", timeout=60)
    out, err = proc.communicate(timeout=60)
    return image, subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_transfer_pods_image_is_the_clusters_never_this_machines(control_plane: Cluster, namespace: str,
                                                                      tmp_path: Path) -> None:  # fmt: skip
    ops = f"{namespace}-ops"
    control_plane.kubectl("create", "namespace", ops)
    try:
        control_plane.create(_operator_deployment(ops, namespace))
        claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c", "namespace": namespace},
                 "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}}
        control_plane.create(claim)
        data = tmp_path / "wine.npz"
        data.write_bytes(b"not really npz")

        # Whoever may read the operator's Deployment: its default trainer image, said with where it came from.
        image, put = _transfer_pod_image(control_plane, namespace, "data", "put", "--claim", "c", str(data),
                                         "-n", namespace, "--timeout", "3")  # fmt: skip
        assert image == REGISTRY_TRAINER, put.stderr
        assert f"the transfer pod's image: {REGISTRY_TRAINER} (the default trainer image of {ops}/dtr-operator, " \
            f"the operator watching {namespace})" in put.stderr  # fmt: skip
        assert put.returncode == 1 and "did not start in 3 s" in put.stderr, put.stderr

        # A run author who may not read it: the run's own image for model get; for a bare claim, an error naming
        # what to give, and no pod.
        author = _author(control_plane, namespace, tmp_path)
        run = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun",
               "metadata": {"name": "r", "namespace": namespace},
               "spec": {"image": OWN_TRAINER, "storage": {"claimName": "c"}}}  # fmt: skip
        control_plane.create(run)
        wait_for(lambda: not control_plane.kubectl_json("get", "pods", "-n", namespace)["items"],
                 "the first transfer pod deleted", timeout=60)  # fmt: skip
        image, got = _transfer_pod_image(author, namespace, "model", "get", "r", str(tmp_path / "model"), "-n",
                                         namespace, "--timeout", "3")  # fmt: skip
        assert image == OWN_TRAINER and f"{OWN_TRAINER} (r's spec.image)" in got.stderr, got.stderr
        env = {k: v for k, v in os.environ.items() if k != "DTR_TRAINER_IMAGE"}
        refused = subprocess.run([sys.executable, "-m", "dtr_cli", "data", "put", "--claim", "c", str(data), "-n",
                                  namespace], env={**env, "KUBECONFIG": str(author.kubeconfig)},
                                 capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert refused.returncode == 1, refused.stderr
        assert "the operators' Deployments cannot be read (forbidden to you)" in refused.stderr, refused.stderr
        assert "--image IMAGE or DTR_TRAINER_IMAGE=IMAGE" in refused.stderr
        assert "localhost/distml/trainer" not in refused.stderr
    finally:
        control_plane.kubectl("delete", "namespace", ops, "--wait=false", check=False)
