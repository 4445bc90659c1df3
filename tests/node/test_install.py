"""deploy/install.sh on a cluster that already runs a training-operator (the real node, after the tier's own
install): it says what it will create cluster-wide before it acts, leaves the training-operator alone unless
told to install, refuses a user who is not cluster-admin before touching anything, and trains an example only
when asked, in the namespace named: examples/digits.yaml as kubectl applies it, its model scored on the host."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from support.node import RealNode, dtr, score_model, tensorflow_status
from support.runs import saved_models


def training_operator(real_node: RealNode) -> tuple[str, str]:
    """The training-operator Deployment's and the TFJob CRD's resourceVersions: any write changes them."""
    kubectl = real_node.cluster.kubectl
    deploy = kubectl("-n", "kubeflow", "get", "deployment", "training-operator", "-o",
                     "jsonpath={.metadata.resourceVersion}").stdout  # fmt: skip
    crd = kubectl("get", "crd", "tfjobs.kubeflow.org", "-o", "jsonpath={.metadata.resourceVersion}").stdout
    return deploy, crd


def install(real_node: RealNode, **settings: Any) -> Any:
    return real_node.node.install({k: str(v) for k, v in settings.items()}, check=False)


def test_an_existing_training_operator_is_left_alone_and_the_plan_comes_first(real_node: RealNode) -> None:
    before = training_operator(real_node)
    proc = install(real_node)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    print(f"\n{out[: out.index('==> both images')]}")
    assert "found kubeflow/training-operator ghcr.io/kubeflow/training-v1/training-operator:" in out, out
    assert "TFJob served as v1: left alone" in out
    assert "Kubeflow training-operator: left as it is" in out
    for obj in ("CustomResourceDefinition/disttrainingruns.distml.dev",
                "CustomResourceDefinition/disttrainingsweeps.distml.dev", "ClusterRole/dtr-operator",
                "ClusterRole/dtr-run-author", "ClusterRoleBinding/dtr-operator", "Namespace/dtr-system",
                "PriorityClass/dtr-operator"):  # fmt: skip
        assert obj in out, obj
    assert "CustomResourceDefinition/tfjobs.kubeflow.org" not in out, "nothing of the training-operator's is planned"
    assert "no example run" in out
    assert out.index("==> plan") < out.index("==> both images") < out.index("==> the CRDs and the operator")
    assert training_operator(real_node) == before, "the training-operator was written to"


def test_told_to_install_it_plans_the_training_operators_objects_too(real_node: RealNode) -> None:
    proc = install(real_node, DTR_TRAINING_OPERATOR="install")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = "DTR_TRAINING_OPERATOR=install: v1.9.4 is applied over what is there (kubeflow/training-operator"
    assert said in proc.stdout, proc.stdout[:3000]
    assert "CustomResourceDefinition/tfjobs.kubeflow.org" in proc.stdout
    assert "==> Kubeflow training-operator v1.9.4" in proc.stdout


def test_bad_settings_and_a_user_without_cluster_admin_stop_before_anything_changes(
    real_node: RealNode, namespace: str, tmp_path: Path
) -> None:
    before = training_operator(real_node)
    proc = install(real_node, DTR_TRAINING_OPERATOR="sometimes")
    assert proc.returncode == 1 and "DTR_TRAINING_OPERATOR must be auto, install or skip" in proc.stderr
    proc = install(real_node, DTR_EXAMPLE=str(Path(__file__).parents[2] / "examples" / "digits.yaml"))
    assert proc.returncode == 1 and "DTR_EXAMPLE needs DTR_EXAMPLE_NAMESPACE" in proc.stderr

    # A namespace admin (the built-in `admin` role there), not a cluster admin.
    kubectl = real_node.cluster.kubectl
    kubectl("create", "serviceaccount", "lead", "-n", namespace)
    kubectl("create", "rolebinding", "lead-admin", "-n", namespace, "--clusterrole=admin",
            f"--serviceaccount={namespace}:lead")  # fmt: skip
    token = kubectl("create", "token", "lead", "-n", namespace, "--duration=10m").stdout.strip()
    lead = real_node.cluster.as_token(token, tmp_path)
    proc = real_node.node.install(check=False, kubeconfig=lead.kubeconfig)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "needs cluster-admin" in proc.stderr and "==> plan" in proc.stdout, proc.stderr
    assert "==> both images" not in proc.stdout, "it acted before it refused"
    assert training_operator(real_node) == before


def test_an_example_trains_only_when_asked_in_the_namespace_named(real_node: RealNode, namespace: str) -> None:
    example = Path(__file__).parents[2] / "examples" / "digits.yaml"
    proc = install(real_node, DTR_EXAMPLE=example, DTR_EXAMPLE_NAMESPACE=namespace, DTR_TIMEOUT=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"the example examples/digits.yaml in {namespace}" in proc.stdout
    assert "model (in the pods):" in proc.stdout
    check_the_digits_example(real_node, namespace, "digits-cnn")


def check_the_digits_example(real_node: RealNode, namespace: str, name: str) -> None:
    """The example's run Succeeded: its status and its row in `kubectl get distrainingruns`, the one model on its
    volume scoring on the host as the status says, its pods' exits and no ServiceAccount token in them."""
    st = real_node.run_status(namespace, name)
    assert st["phase"] == "Succeeded", st
    assert st["model"]["path"] == f"/mnt/dtr/models/{name}/1"
    assert st["workers"] == {"active": 0, "succeeded": 2, "failed": 0}

    table = real_node.cluster.kubectl("get", "distrainingruns", "-n", namespace).stdout
    row = next(line for line in table.splitlines() if line.startswith(name))
    form = rf"{name}\s+Succeeded\s+2/2\s+8/8\s+0\.\d+\s+/mnt/dtr/models/{name}/1\s+accuracy=0\.\d{{4}}\s"
    assert re.match(form, row), table

    volume = real_node.volume(namespace, st["model"]["claim"])
    model = volume / "models" / name / "1"
    assert saved_models(volume) == [model], "exactly one model on the volume, where the status says"
    accuracy = score_model(model)
    assert accuracy >= 0.85, accuracy
    assert abs(accuracy - st["metrics"]["accuracy"]) < 0.02, (accuracy, st["metrics"])

    for i in range(2):
        pod = real_node.pod(namespace, f"{name}-worker-{i}")
        assert pod["status"]["phase"] == "Succeeded"
        assert tensorflow_status(pod)["state"]["terminated"]["exitCode"] == 0
        assert pod["spec"]["automountServiceAccountToken"] is False
        mounts = [m["mountPath"] for c in pod["spec"]["containers"] for m in c.get("volumeMounts", [])]
        assert not any("serviceaccount" in m for m in mounts), mounts


def test_render_cluster_says_what_the_deployed_operator_would_refuse(
    real_node: RealNode, namespace: str, tmp_path: Path
) -> None:
    """`dtr render --cluster` reads the running operator's settings (its Deployment, as `dtr namespaces` does)."""
    example = Path(__file__).parents[2] / "examples" / "digits.yaml"
    ok = dtr(real_node, namespace, "render", str(example), "--cluster")
    assert ok.returncode == 0, ok.stderr
    assert f"{namespace}/digits-cnn: the operator dtr-system/dtr-operator would accept it" in ok.stderr, ok.stderr
    assert "kind: TFJob" in ok.stdout
    foreign = tmp_path / "foreign.yaml"
    foreign.write_text(example.read_text().replace("spec:\n", "spec:\n  image: docker.io/someone/trainer:1\n", 1))
    refused = dtr(real_node, namespace, "render", str(foreign), "--cluster")
    assert refused.returncode == 1, refused.stderr
    assert "would fail it: ImageNotAllowed: spec.image docker.io/someone/trainer:1" in refused.stderr, refused.stderr
