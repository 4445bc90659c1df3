"""The experiment loop's fields on the real API server (docs/experiments.md): spec.training.params admitted as sent
and refused at admission naming the field, by the CRD's schema (entries, a string's length, a value with contents)
or by deploy/base/admission.yaml's policy (a name outside the grammar, an empty object); dtr render's parser refuses
the same. With the operator: params and validateEvery reach the TFJob's trainer arguments, and a chief's summary
saying a callback stopped it early makes the run's status say so."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from dtr_contract import flags
from dtr_operator.api import GROUP, PLURAL, VERSION
from dtr_operator.spec import SpecError, parse_run
from operator_support import create_run, get, set_pod_state, wait_status, worker_pods

from support.cluster import Cluster
from support.operator import Operator
from support.runs import run_doc
from support.wait import wait_for

ADMISSION = Path(__file__).resolve().parents[2] / "deploy" / "base" / "admission.yaml"
PARAMS = {"width": 64, "dropout": 0.25, "optimizer": "sgd", "residual": True, "w" * 32: "x" * 32}


@pytest.fixture(scope="module")
def params_policy(control_plane: Cluster) -> Cluster:
    control_plane.kubectl("apply", "-f", str(ADMISSION))
    return control_plane


def _create(cluster: Cluster, namespace: str, name: str, training: dict[str, Any]) -> str:
    """'' when created, else the API server's answer."""
    doc = run_doc(name, namespace, {"training": training})
    proc = cluster.kubectl("create", "--raw", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}", "-f", "-",
                           input=json.dumps(doc), check=False)
    return "" if proc.returncode == 0 else proc.stderr


def _let_go(cluster: Cluster, namespace: str, name: str) -> None:
    cluster.kubectl("patch", "disttrainingrun", name, "-n", namespace, "--type=merge",
                    "-p", '{"metadata": {"finalizers": null}}', check=False)


def test_params_are_stored_as_sent(params_policy: Cluster, namespace: str) -> None:
    assert _create(params_policy, namespace, "ok", {"params": PARAMS, "validateEvery": 0}) == ""
    stored = params_policy.kubectl_json("get", "dtr", "ok", "-n", namespace)["spec"]["training"]
    assert stored["params"] == PARAMS and stored["validateEvery"] == 0
    _let_go(params_policy, namespace, "ok")


# (id, training, words of the API server's refusal, by whom)
REFUSED = [
    ("too-many", {"params": {f"p{i}": i for i in range(13)}}, "spec.training.params: Too many", "CRD"),
    ("long-value", {"params": {"w": "x" * 33}}, "spec.training.params.w: Too long", "CRD"),
    ("object-value", {"params": {"w": {"a": 1}}}, "spec.training.params.w: Too many", "CRD"),
    ("list-value", {"params": {"w": [1, 2]}}, "spec.training.params.w: Too many", "CRD"),
    ("validate-every", {"validateEvery": -1}, "spec.training.validateEvery", "CRD"),
    ("bad-name", {"params": {"1w": 1}}, "spec.training.params: names are letters, digits", "policy"),
    ("long-name", {"params": {"w" * 33: 1}}, "spec.training.params: names are letters, digits", "policy"),
    ("empty-object", {"params": {"w": {}}}, "spec.training.params: each value is a number", "policy"),
]


@pytest.mark.parametrize(("training", "words", "by"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_params_over_a_bound_are_refused_at_admission_naming_the_field(
    params_policy: Cluster, namespace: str, training: dict[str, Any], words: str, by: str
) -> None:
    # The policy takes effect a moment after it is created: its first refusal is waited for.
    refused = wait_for(lambda: _create(params_policy, namespace, f"bad-{uuid.uuid4().hex[:6]}", training),
                       f"the API server to refuse {training}", timeout=30)
    assert words in refused and ("ValidatingAdmissionPolicy" in refused) == (by == "policy"), refused
    with pytest.raises(SpecError, match=r"spec\.training\.(params|validateEvery)"):
        parse_run(run_doc("bad", namespace, {"training": training}))  # dtr render refuses it too


def test_params_and_validate_every_reach_the_trainer_and_an_early_stop_is_told(
    control_plane: Cluster, namespace: str, operator: Operator
) -> None:
    create_run(control_plane, namespace, "loop", {"training": {"dataset": "digits", "params": PARAMS,
                                                               "validateEvery": 2}})  # fmt: skip
    wait_status(control_plane, namespace, "loop", "children created", tfJob="loop")
    job = get(control_plane, namespace, "tfjob", "loop")
    assert job is not None
    (container,) = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    args = container["args"]
    assert json.loads(args[args.index(flags.PARAMS) + 1]) == PARAMS
    assert args[args.index(flags.VALIDATE_EVERY) + 1] == "2"

    pods = worker_pods(control_plane, namespace, "loop", 2)
    for pod in pods:
        set_pod_state(control_plane, namespace, pod, "Running")
    wait_status(control_plane, namespace, "loop", "running", phase="Running")
    reason = "EarlyStopping: val_loss did not improve for 1 epoch(s); best 0.3100 at epoch 1 (its weights restored)"
    summary = {"loss": 0.3, "accuracy": 0.9, "epochs": 3, "examplesPerSecond": 100.0,
               "modelPath": "/mnt/dtr/models/loop/1", "modelVersion": 1, "metric": "accuracy",
               "metrics": {"accuracy": 0.9, "loss": 0.3},
               "stoppedEarly": {"epoch": 2, "epochs": 3, "reason": reason}}  # fmt: skip
    set_pod_state(control_plane, namespace, pods[1], "Succeeded")
    set_pod_state(control_plane, namespace, pods[0], "Succeeded", message=json.dumps(summary))
    st = wait_status(control_plane, namespace, "loop", "succeeded", phase="Succeeded")
    assert st["message"].endswith(f"; stopped early at epoch 2 of 3: {reason}"), st["message"]
    assert st["progress"]["epochsDone"] == "2/3"
