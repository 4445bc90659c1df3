"""The first day on a cluster (issue 43), against the real kube-apiserver: `dtr data put --create` makes the claim
runs may mount, and `dtr submit` sends a complete run (resources, queue, priority classes, a base file) that the
API server's schema, the CRD, takes as dtr checked it. No kubelet here: a transfer pod never starts (the copy
itself is tested on a real node, tests/node/test_transfer.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from operator_support import get

from support.cluster import Cluster
from support.wait import wait_for

SOURCE = "def build_model(ctx):\n    return None\n\n\ndef load_data(ctx):\n    return None\n"


def _dtr(cluster: Cluster, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "dtr_cli", *argv], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_data_put_create_makes_the_labelled_claim_once(control_plane: Cluster, namespace: str,
                                                       tmp_path: Path) -> None:  # fmt: skip
    data = tmp_path / "wine.npz"
    data.write_bytes(b"not really npz")
    first = _dtr(control_plane, "data", "put", "--create", "64Mi", "my-data", str(data), "-n", namespace,
                 "--timeout", "3")  # fmt: skip
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
                 "--timeout", "1")  # fmt: skip
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
