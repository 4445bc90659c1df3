"""A run's own code (spec.training.code) with the operator (kopf.testing.KopfRunner, in this process) against the
real local control plane and the Kubeflow training-operator: the operator waits for the code's ConfigMap
(CodeNotFound) and proceeds once it appears, records the file's SHA-256 in status.code, mounts it read-only in
the worker pods, refuses it under --user-code=disallowed, and names a failure in the user's code (UserCodeError).

No kubelet runs here: where a test needs workers to finish it writes the pods' status as a kubelet would.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dtr_contract import exits, flags, layout
from operator_support import (
    create_run,
    get,
    items,
    set_pod_state,
    wait_status,
    worker_pods,
)

from support.cluster import Cluster
from support.operator import Operator, operator_with
from support.wait import wait_for

SOURCE = "def build_model(ctx):\n    return None\n\n\ndef load_data(ctx):\n    return None\n"
SHA = hashlib.sha256(SOURCE.encode()).hexdigest()


def configmap(namespace: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": data, "immutable": True}  # fmt: skip


def wait_created(cluster: Cluster, namespace: str, name: str, timeout: float = 30) -> dict[str, Any]:
    """The run's status once its TFJob exists (condition Created), as the operator recorded it then."""

    def created() -> dict[str, Any] | None:
        st = (get(cluster, namespace, "dtr", name) or {}).get("status") or {}
        ok = any(c["type"] == "Created" and c["status"] == "True" for c in st.get("conditions") or [])
        return st if ok else None

    return wait_for(created, f"run {name}: its TFJob created", timeout=timeout)


def code_run(config_map: str, key: str | None = None, **training: Any) -> dict[str, Any]:
    code = {"configMap": config_map, **({"key": key} if key else {})}
    return {"workers": 2, "restartPolicy": "Never", "training": {"code": code, "dataset": "tables/wine", **training}}


def test_the_run_waits_for_its_code_then_records_its_digest_and_mounts_it(
    control_plane: Cluster, namespace: str, operator: Operator
) -> None:
    create_run(control_plane, namespace, "wine", code_run("wine-code", "wine.py", metric="auc"))
    st = wait_status(control_plane, namespace, "wine", "waiting for its code", reason="CodeNotFound")
    assert st["phase"] == "Pending" and "ConfigMap wine-code" in st["message"] and "wine.py" in st["message"], st
    assert get(control_plane, namespace, "tfjob", "wine") is None and "code" not in st

    control_plane.create(configmap(namespace, "wine-code", {"wine.py": SOURCE}))

    # Retried with backoff (5 s, 10 s, ...): it proceeds once the ConfigMap is there.
    st = wait_created(control_plane, namespace, "wine", timeout=90)
    assert st["code"] == {"configMap": "wine-code", "key": "wine.py", "sha256": SHA}, st
    job = get(control_plane, namespace, "tfjob", "wine")
    template = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    (volume,) = [v for v in template["spec"]["volumes"] if "configMap" in v]
    assert volume["configMap"] == {"name": "wine-code", "items": [{"key": "wine.py", "path": "wine.py", "mode": 0o444}],
                                   "defaultMode": 0o444}  # fmt: skip
    (container,) = template["spec"]["containers"]
    assert {"name": volume["name"], "mountPath": layout.CODE_DIR, "readOnly": True} in container["volumeMounts"]
    args = container["args"]
    assert args[args.index(flags.CODE) + 1] == layout.code_file("wine.py") and flags.MODEL not in args
    assert args[args.index(flags.CODE_SHA256) + 1] == SHA, "the workers check the file against the recorded digest"
    assert args[args.index(flags.METRIC) + 1] == "auc"
    # The real training-operator made the pods with the volume; the API server took it (a kubelet would mount it).
    for pod in worker_pods(control_plane, namespace, "wine", 2):
        assert any(v.get("configMap", {}).get("name") == "wine-code" for v in pod["spec"]["volumes"])
    reasons = [e["reason"] for e in control_plane.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=wine")["items"]]  # fmt: skip
    assert "CodeNotFound" in reasons


def test_a_configmap_without_the_key_is_waited_for_and_named_but_not_its_keys(
    control_plane: Cluster, namespace: str, operator: Operator
) -> None:
    control_plane.create(configmap(namespace, "reg-code", {"model.py": SOURCE}))
    create_run(control_plane, namespace, "reg", code_run("reg-code", "regression.py"))

    def waiting() -> dict[str, Any] | None:
        st = (get(control_plane, namespace, "dtr", "reg") or {}).get("status") or {}
        return st if st.get("reason") == "CodeNotFound" else None

    st = wait_for(waiting, "CodeNotFound naming the ConfigMap and the key", timeout=30)
    assert "ConfigMap reg-code" in st["message"] and "no key regression.py" in st["message"], st
    assert "model.py" not in st["message"], "the keys a ConfigMap holds are not told (review R13)"
    assert get(control_plane, namespace, "tfjob", "reg") is None


def test_a_user_code_failure_is_its_own_reason_with_the_workers_line(
    control_plane: Cluster, namespace: str, operator: Operator
) -> None:
    control_plane.create(configmap(namespace, "bad-code", {"model.py": SOURCE}))
    create_run(control_plane, namespace, "bad", code_run("bad-code"))
    wait_created(control_plane, namespace, "bad")
    pods = worker_pods(control_plane, namespace, "bad", 2)
    line = "model.py:6 in load_data: KeyError: 'alcohol'"
    set_pod_state(control_plane, namespace, pods[1], "Running")
    set_pod_state(control_plane, namespace, pods[0], "Failed", exit_code=exits.USER_CODE,
                  message=f"dtr_trainer[worker-0]: error: {line}\n")  # fmt: skip
    st = wait_status(control_plane, namespace, "bad", "failed", phase="Failed")
    assert st["reason"] == "UserCodeError", st
    assert st["message"] == f"{line} (worker bad-worker-0, exit code {exits.USER_CODE})"
    assert st["code"]["sha256"] == SHA, "status.code stays through the later writes"


def test_a_regression_runs_metrics_and_headline(control_plane: Cluster, namespace: str, operator: Operator) -> None:
    control_plane.create(configmap(namespace, "mae-code", {"model.py": SOURCE}))
    create_run(control_plane, namespace, "mae", {**code_run("mae-code", metric="mae"), "workers": 1})
    wait_created(control_plane, namespace, "mae")
    (pod,) = worker_pods(control_plane, namespace, "mae", 1)
    summary = {"loss": 0.31, "epochs": 3, "examplesPerSecond": 812.5, "modelPath": "/mnt/dtr/models/mae/1",
               "modelVersion": 1, "metric": "mae", "metrics": {"loss": 0.31, "mae": 0.4172}}  # fmt: skip
    set_pod_state(control_plane, namespace, pod, "Succeeded", message=json.dumps(summary))
    st = wait_status(control_plane, namespace, "mae", "succeeded", phase="Succeeded")
    assert (st["reason"], st["headline"]) == ("TrainingSucceeded", "mae=0.4172"), st
    assert st["metrics"] == {"loss": 0.31, "mae": 0.4172, "epochs": 3, "examplesPerSecond": 812.5}
    assert st["message"] == "mae 0.4172, model exported to /mnt/dtr/models/mae/1"
    row = control_plane.kubectl("get", "dtr", "mae", "-n", namespace, "--no-headers").stdout.split()
    assert row[3:6] == ["3/3", "/mnt/dtr/models/mae/1", "mae=0.4172"], row  # ACCURACY empty


@pytest.fixture
def no_user_code(control_plane: Cluster, namespace: str) -> Iterator[Operator]:
    """The operator with --user-code=disallowed (its env twin: `kopf run` reads settings from the environment)."""
    with operator_with(namespace, DTR_USER_CODE="disallowed") as op:
        yield op


def test_code_in_a_configmap_is_refused_when_the_operator_disallows_it(
    control_plane: Cluster, namespace: str, no_user_code: Operator
) -> None:
    control_plane.create(configmap(namespace, "sent-code", {"model.py": SOURCE}))
    create_run(control_plane, namespace, "sent", code_run("sent-code"))
    st = wait_status(control_plane, namespace, "sent", "refused", phase="Failed", reason="UserCodeNotAllowed")
    assert "--user-code=disallowed" in st["message"] and "spec.training.code.configMap sent-code" in st["message"]
    assert get(control_plane, namespace, "tfjob", "sent") is None
    assert not items(control_plane, namespace, "pvc", "distml.dev/run=sent"), "nothing was created"
    # Code in the image is --allowed-images' to judge: the default image with a module runs.
    create_run(control_plane, namespace, "baked", {"workers": 1, "training": {"code": {"module": "acme.wine"}}})
    st = wait_created(control_plane, namespace, "baked")
    args = get(control_plane, namespace, "tfjob", "baked")["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"][0]["args"]  # fmt: skip
    assert args[args.index(flags.CODE_MODULE) + 1] == "acme.wine" and "code" not in st


def test_dtr_submit_sends_the_file_and_the_run_which_owns_it(
    control_plane: Cluster, namespace: str, operator: Operator, tmp_path: Path
) -> None:
    """`dtr submit FILE.py` as a user runs it: the ConfigMap, the run, the owner reference; the operator records
    the same digest dtr submit printed; deleting the run deletes the code."""
    model = tmp_path / "wine_model.py"
    model.write_text(SOURCE)
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    argv = [sys.executable, "-m", "dtr_cli", "submit", str(model), "-n", namespace, "--workers", "1",
            flags.DATASET, "tables/wine.csv", flags.METRIC, "accuracy"]  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"code wine_model.py in ConfigMap wine-model-code (sha256 {SHA})" in proc.stdout, proc.stdout
    assert f"kubectl get distrainingruns wine-model -n {namespace} -w" in proc.stdout

    run = get(control_plane, namespace, "dtr", "wine-model")
    cm = get(control_plane, namespace, "configmap", "wine-model-code")
    assert cm["immutable"] is True and cm["data"] == {"wine_model.py": SOURCE}
    assert cm["metadata"]["labels"]["distml.dev/run"] == "wine-model"
    (owner,) = cm["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("DistTrainingRun", "wine-model", run["metadata"]["uid"])
    st = wait_created(control_plane, namespace, "wine-model")
    assert st["code"] == {"configMap": "wine-model-code", "key": "wine_model.py", "sha256": SHA}

    # The same name again: refused before anything else is touched (the ConfigMap is taken).
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 1 and "ConfigMap wine-model-code already exists" in again.stderr, again.stderr

    control_plane.kubectl("delete", "dtr", "wine-model", "-n", namespace)
    wait_for(lambda: get(control_plane, namespace, "configmap", "wine-model-code") is None,
             "the garbage collector to delete the run's code with it", timeout=60)  # fmt: skip


def test_dtr_submit_refuses_a_file_that_does_not_compile_before_any_api_call(tmp_path: Path) -> None:
    model = tmp_path / "broken.py"
    model.write_text("def build_model(ctx)\n    pass\n")
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "no-such-kubeconfig")}
    proc = subprocess.run([sys.executable, "-m", "dtr_cli", "submit", str(model), "-n", "ml"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2 and f"{model}:1: SyntaxError" in proc.stderr, proc.stderr
