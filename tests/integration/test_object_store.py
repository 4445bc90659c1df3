"""A run naming an object store (spec.objectStore; docs/object-storage.md) with the operator (KopfRunner, in this
process) against the real local control plane and the Kubeflow training-operator: an endpoint the operator's
--allowed-object-stores does not list fails the run ObjectStoreNotAllowed before anything is created; an allowed
one gets a TFJob whose worker pods take the keys from the run's Secret by reference (no key anywhere in the TFJob,
its pods, the run or its events) and the CA mounted read-only; a worker's preflight exit becomes the run's reason.

No kubelet runs here: where a test needs a worker to finish it writes the pod's status as a kubelet would.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from dtr_contract import env, exits, flags
from operator_support import create_run, get, items, set_pod_state, wait_status, worker_pods

from support.cluster import Cluster
from support.operator import Operator, operator_with

ENDPOINT = "http://s3.example.svc:8333"
DATASET = "s3://datasets/digits"


def _spec(**store: Any) -> dict[str, Any]:
    return {"workers": 2, "restartPolicy": "Never",
            "objectStore": {"endpoint": ENDPOINT, "credentialsSecret": "s3-keys", **store},
            "training": {"dataset": DATASET}, "export": {"storageUri": "s3://models/digits"}}  # fmt: skip


@pytest.fixture
def allowed(control_plane: Cluster, namespace: str) -> Iterator[Operator]:
    """The operator with --allowed-object-stores listing ENDPOINT (its env twin: `kopf run` reads the environment)."""
    with operator_with(namespace, DTR_ALLOWED_OBJECT_STORES=f"https://other.example,{ENDPOINT}") as op:
        yield op


def test_an_endpoint_not_allowed_fails_the_run_before_anything_is_created(
    control_plane: Cluster, namespace: str, operator: Operator
) -> None:
    create_run(control_plane, namespace, "s3-refused", _spec())
    st = wait_status(control_plane, namespace, "s3-refused", "refused", phase="Failed", reason="ObjectStoreNotAllowed")
    assert ENDPOINT in st["message"] and "--allowed-object-stores" in st["message"], st
    assert get(control_plane, namespace, "tfjob", "s3-refused") is None
    assert not items(control_plane, namespace, "pvc", "distml.dev/run=s3-refused"), "nothing was created"
    assert get(control_plane, namespace, "networkpolicy", "s3-refused") is None


def _secret(namespace: str, access: str, secret: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-keys", "namespace": namespace},
            "stringData": {env.AWS_ACCESS_KEY_ID: access, env.AWS_SECRET_ACCESS_KEY: secret}}  # fmt: skip


def _everything(cluster: Cluster, namespace: str, name: str) -> str:
    """The run, its TFJob, its pods and the namespace's events, as JSON: where a key must never be."""
    docs = [get(cluster, namespace, "dtr", name), get(cluster, namespace, "tfjob", name),
            *items(cluster, namespace, "pods", f"training.kubeflow.org/job-name={name}"),
            cluster.kubectl_json("get", "events", "-n", namespace)]  # fmt: skip
    return json.dumps(docs)


def test_an_allowed_endpoint_gets_a_tfjob_whose_pods_take_the_keys_from_the_secret(
    control_plane: Cluster, namespace: str, allowed: Operator
) -> None:
    access, secret = f"AK{secrets.token_hex(9).upper()}", secrets.token_urlsafe(30)
    control_plane.create(_secret(namespace, access, secret))
    create_run(control_plane, namespace, "s3-run", _spec(caConfigMap="s3-ca", region="eu-west-3"))
    pods = worker_pods(control_plane, namespace, "s3-run", 2)
    job = get(control_plane, namespace, "tfjob", "s3-run")
    for template in [job["spec"]["tfReplicaSpecs"]["Worker"]["template"], *pods]:
        (container,) = template["spec"]["containers"]
        variables = {v["name"]: v for v in container["env"]}
        for key in (env.AWS_ACCESS_KEY_ID, env.AWS_SECRET_ACCESS_KEY):
            assert variables[key] == {"name": key, "valueFrom": {"secretKeyRef": {"name": "s3-keys", "key": key}}}
        assert variables[env.S3_ENDPOINT]["value"] == ENDPOINT and variables[env.AWS_REGION]["value"] == "eu-west-3"
        ca_mount = next(m for m in container["volumeMounts"] if m["name"] == "dtr-s3-ca")
        assert ca_mount["readOnly"] and variables[env.S3_CA_FILE]["value"] == f"{ca_mount['mountPath']}/ca.crt"
        args = container["args"]
        assert args[args.index(flags.DATASET) + 1] == DATASET
        assert args[args.index(flags.EXPORT_DIR) + 1] == "s3://models/digits"
    everything = _everything(control_plane, namespace, "s3-run")
    assert access not in everything and secret not in everything, "a key is spelled out"


def test_a_workers_preflight_exit_is_the_runs_reason(
    control_plane: Cluster, namespace: str, allowed: Operator
) -> None:
    control_plane.create(_secret(namespace, "AKEXAMPLE", "not-the-key"))
    create_run(control_plane, namespace, "s3-keys", _spec())
    pods = worker_pods(control_plane, namespace, "s3-keys", 2)
    line = (f"{DATASET}: the object store {ENDPOINT} refused the keys (SignatureDoesNotMatch): check the keys "
            f"{env.AWS_ACCESS_KEY_ID} and {env.AWS_SECRET_ACCESS_KEY} of spec.objectStore.credentialsSecret")
    set_pod_state(control_plane, namespace, pods[1], "Running")
    set_pod_state(control_plane, namespace, pods[0], "Failed", exit_code=exits.OBJECT_STORE_KEYS,
                  message=f"dtr_trainer[worker-0]: error: {line}\n")  # fmt: skip
    st = wait_status(control_plane, namespace, "s3-keys", "failed", phase="Failed")
    assert st["reason"] == "ObjectStoreKeysRefused", st
    assert st["message"].startswith(line) and f"exit code {exits.OBJECT_STORE_KEYS})" in st["message"], st
    assert "not-the-key" not in _everything(control_plane, namespace, "s3-keys"), "a key is spelled out"


def test_a_run_with_no_volume_gets_no_claim_and_its_workers_an_empty_dir_and_the_backup_uri(
    control_plane: Cluster, namespace: str, allowed: Operator
) -> None:
    spec = {**_spec(), "storage": {"volume": False, "size": "300Mi", "backupUri": "s3://runs/backups/nv"}}
    create_run(control_plane, namespace, "s3-nv", spec)
    [pod, _] = worker_pods(control_plane, namespace, "s3-nv", 2)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "dtr-data")
    assert volume == {"name": "dtr-data", "emptyDir": {"sizeLimit": "300Mi"}}
    args = pod["spec"]["containers"][0]["args"]
    uid = get(control_plane, namespace, "dtr", "s3-nv")["metadata"]["uid"]
    assert args[args.index(flags.BACKUP_URI) + 1] == f"s3://runs/backups/nv/s3-nv/{uid}"  # per run object
    assert not items(control_plane, namespace, "pvc", "distml.dev/run=s3-nv"), "a run with no volume has no claim"
    st = wait_status(control_plane, namespace, "s3-nv", "its TFJob created", tfJob="s3-nv")
    assert "pvc" not in st and "PVC" not in st["message"], st
