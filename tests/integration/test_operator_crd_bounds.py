"""The CRD's bounds on the real API server: the largest run the schema admits is stored as sent, and a run over
any bound is refused (422 Invalid) naming the field, as `dtr render` refuses it (spec.parse_run); H2 of the
security review. No operator runs. The largest size itself: tests/unit/operator/test_crd_bounds.py."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from dtr_operator.api import GROUP, PLURAL, SWEEP_KIND, SWEEP_PLURAL, VERSION
from dtr_operator.spec import SpecError, parse_run

from support.cluster import Cluster
from support.maximal import key, max_name, maximal_spec
from support.runs import run_doc
from support.wait import wait_for

NODE_TERM = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def _values(count: int) -> dict[str, Any]:
    requirement = {"key": "pool", "operator": "In", "values": [f"v{i}" for i in range(count)]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [requirement]}]}}}  # fmt: skip


# (id, spec, words the API server's answer must contain)
OVERSIZED = [
    ("annotation-value", {"podAnnotations": {"note": "a" * 1025}}, ["spec.podAnnotations.note", "1024"]),
    ("annotations-count", {"podAnnotations": {f"k{i}": "v" for i in range(9)}}, ["spec.podAnnotations", "8"]),
    ("label-key-prefix", {"podLabels": {"a" * 254 + "/k": "v"}}, ["spec.podLabels", "at most 253"]),
    ("label-key-long", {"nodeSelector": {key(0) + "x": "v"}}, ["spec.nodeSelector", "at most 317"]),
    ("tolerations-count", {"tolerations": [{"key": f"k{i}"} for i in range(9)]}, ["spec.tolerations", "8"]),
    ("affinity-values", {"affinity": _values(5)}, [f"{NODE_TERM}[0].matchExpressions[0].values", "4"]),
    ("resource-name", {"resources": {"limits": {"k" * 318: "1"}}}, ["spec.resources.limits", "at most 317"]),
    ("quantity-long", {"resources": {"limits": {"cpu": "1" * 65}}}, ["spec.resources.limits.cpu", "64"]),
    # A label value on the TFJob: one character more than a label value may hold.
    ("workload-priority-class", {"queueName": "q", "workloadPriorityClass": "a" * 64},
     ["spec.workloadPriorityClass", "63"]),
]


def test_the_largest_run_is_stored_as_sent(control_plane: Cluster, namespace: str) -> None:
    spec = maximal_spec()
    doc = run_doc(max_name(), namespace, spec)
    parse_run(doc)  # dtr render admits it too
    control_plane.create(doc)
    stored = control_plane.kubectl_json("get", "dtr", max_name(), "-n", namespace)["spec"]
    assert _holds(stored, spec), "stored as sent, defaults added"


def _holds(stored: Any, sent: Any) -> bool:
    """stored has everything sent (and maybe defaults beside it)."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(k in stored and _holds(stored[k], v) for k, v in sent.items())
    return bool(stored == sent)


# The review's payload (H2): a megabyte under affinity, which the schema kept whole before it had one.
UNKNOWN = {"affinity": {"nodeAffinity": {"x": ["a" * 1000] * 1000}}}


def test_an_unknown_affinity_field_is_refused_or_pruned(control_plane: Cluster, namespace: str) -> None:
    proc = control_plane.create(run_doc("big", namespace, UNKNOWN), check=False)  # kubectl: strict validation
    assert proc.returncode != 0 and 'unknown field "spec.affinity.nodeAffinity.x"' in proc.stderr, proc.stderr
    control_plane.kubectl("create", "--validate=false", "-f", "-", input=json.dumps(run_doc("big", namespace, UNKNOWN)))
    stored = control_plane.kubectl_json("get", "dtr", "big", "-n", namespace)["spec"]
    assert stored["affinity"] == {"nodeAffinity": {}}, "pruned: nothing of it is stored"


@pytest.mark.parametrize(("spec", "words"), [r[1:] for r in OVERSIZED], ids=[r[0] for r in OVERSIZED])
def test_an_oversized_run_is_refused_naming_the_field(
    control_plane: Cluster, namespace: str, spec: dict[str, Any], words: list[str]
) -> None:
    proc = control_plane.create(run_doc("big", namespace, spec), check=False)
    assert proc.returncode != 0 and "is invalid" in proc.stderr, proc.stderr  # 422 Invalid
    for word in words:
        assert word in proc.stderr, proc.stderr
    with pytest.raises(SpecError, match=words[0].split(".")[1].split("[")[0].strip('"')):
        parse_run(run_doc("big", namespace, spec))


# ---- a run's own metadata: deploy/base/admission.yaml (a ValidatingAdmissionPolicy), not the CRD

ADMISSION = Path(__file__).resolve().parents[2] / "deploy" / "base" / "admission.yaml"


@pytest.fixture(scope="module")
def metadata_policy(control_plane: Cluster) -> Cluster:
    control_plane.kubectl("apply", "-f", str(ADMISSION))
    return control_plane


def _create_with(cluster: Cluster, namespace: str, name: str, **metadata: Any) -> str:
    """'' when created, else the API server's answer. Sent as it is (`kubectl create` would rewrite a
    last-applied-configuration it finds to the object's own)."""
    proc = cluster.kubectl("create", "--raw", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}", "-f", "-",
                           input=json.dumps(run_doc(name, namespace, {}, **metadata)), check=False)
    return "" if proc.returncode == 0 else proc.stderr


SWEEP_SPEC = {"template": {"spec": {}}, "space": {"width": {"choice": [8, 16]}},
              "objective": {"metric": "val_accuracy"}}  # fmt: skip


def _create_sweep_with(cluster: Cluster, namespace: str, name: str, **metadata: Any) -> str:
    """As _create_with, a DistTrainingSweep: its metadata is held to the same bounds (the operator holds it too)."""
    doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": SWEEP_KIND, "metadata": {"name": name, **metadata},
           "spec": SWEEP_SPEC}  # fmt: skip
    proc = cluster.kubectl("create", "--raw", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{SWEEP_PLURAL}",
                           "-f", "-", input=json.dumps(doc), check=False)  # fmt: skip
    return "" if proc.returncode == 0 else proc.stderr


KOPF = "kopf.zalando.org/"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _owner(i: int) -> dict[str, str]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": f"owner-{i}", "uid": str(uuid.UUID(int=i + 1))}


# (what, over the bound, at the bound, words of the refusal)
METADATA = [
    ("labels", {"labels": {f"l{i}": "v" for i in range(33)}}, {"labels": {f"l{i}": "v" for i in range(32)}},
     "at most 32 labels"),
    ("annotations", {"annotations": {f"a{i}": "v" * 1000 for i in range(17)}},
     {"annotations": {f"a{i}": "v" * 1000 for i in range(16)}}, "at most 16 KiB"),
    # kopf's and kubectl's own have bounds of their own, not counted in the 16 KiB
    ("kopf-annotations", {"annotations": {f"{KOPF}a": "v" * 8200}},
     {"annotations": {f"{KOPF}a": "v" * 8000, "a": "v" * 16000}}, "at most 8 KiB"),
    ("last-applied", {"annotations": {LAST_APPLIED: "v" * 98400}},
     {"annotations": {LAST_APPLIED: "v" * 98000, f"{KOPF}a": "v" * 8000}}, "at most 96 KiB"),
    ("finalizers", {"finalizers": [f"example.com/f{i}" for i in range(9)]},
     {"finalizers": [f"example.com/f{i}" for i in range(8)]}, "at most 8 finalizers"),
    ("owner-references", {"ownerReferences": [_owner(i) for i in range(9)]},
     {"ownerReferences": [_owner(i) for i in range(8)]}, "at most 8 ownerReferences"),
]


def _let_go(cluster: Cluster, namespace: str, name: str) -> None:
    """Finalizers off, so that the run (and its namespace) can go."""
    cluster.kubectl("patch", "disttrainingrun", name, "-n", namespace, "--type=merge",
                    "-p", '{"metadata": {"finalizers": null}}', check=False)


@pytest.mark.parametrize("what, over, at, words", METADATA, ids=[m[0] for m in METADATA])
def test_a_runs_own_metadata_is_bounded_by_the_admission_policy(
    metadata_policy: Cluster, namespace: str, what: str, over: dict[str, Any], at: dict[str, Any], words: str
) -> None:
    # The policy takes effect a moment after it is created: the first refusal is waited for.
    refused = wait_for(lambda: _create_with(metadata_policy, namespace, f"big-{what}-{uuid.uuid4().hex[:4]}",
                                            **over), f"the admission policy to refuse {what}", timeout=30)
    assert words in refused and "ValidatingAdmissionPolicy" in refused, refused
    assert _create_with(metadata_policy, namespace, f"ok-{what}", **at) == ""
    _let_go(metadata_policy, namespace, f"ok-{what}")


@pytest.mark.parametrize("what, over, at, words", METADATA, ids=[m[0] for m in METADATA])
def test_a_sweeps_own_metadata_is_bounded_as_a_runs(
    metadata_policy: Cluster, namespace: str, what: str, over: dict[str, Any], at: dict[str, Any], words: str
) -> None:
    refused = wait_for(lambda: _create_sweep_with(metadata_policy, namespace, f"big-{what}-{uuid.uuid4().hex[:4]}",
                                                  **over), f"the admission policy to refuse {what}", timeout=30)
    assert words in refused and f"a {SWEEP_KIND}" in refused, refused
    assert _create_sweep_with(metadata_policy, namespace, f"ok-{what}", **at) == ""
    metadata_policy.kubectl("patch", "disttrainingsweep", f"ok-{what}", "-n", namespace, "--type=merge",
                            "-p", '{"metadata": {"finalizers": null}}', check=False)  # fmt: skip


def _binding(cluster: Cluster, verb: str) -> None:
    docs = [d for d in ADMISSION.read_text().split("\n---\n") if "kind: ValidatingAdmissionPolicyBinding" in d]
    cluster.kubectl(verb, "-f", "-", input=docs[0], check=verb == "apply")


def test_a_run_stored_before_a_bound_may_be_updated_while_that_part_does_not_grow(
    metadata_policy: Cluster, namespace: str
) -> None:
    """As a run whose kopf diff base an older operator wrote (the whole spec, up to ~68 KiB): kopf patches it
    smaller, any other update leaves it as it is; neither may be refused, but nothing may grow it."""
    big = {f"{KOPF}last-handled-configuration": "v" * 60000}
    _binding(metadata_policy, "delete")
    try:
        wait_for(lambda: _create_with(metadata_policy, namespace, f"old-{uuid.uuid4().hex[:4]}", annotations=big)
                 == "", "the policy's binding to be gone", timeout=30)
        assert _create_with(metadata_policy, namespace, "old", annotations=big) == ""
    finally:
        _binding(metadata_policy, "apply")
    wait_for(lambda: _create_with(metadata_policy, namespace, f"new-{uuid.uuid4().hex[:4]}", annotations=big),
             "the policy to refuse again", timeout=30)

    def patch(annotations: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return metadata_policy.kubectl("patch", "disttrainingrun", "old", "-n", namespace, "--type=merge",
                                       "-p", json.dumps({"metadata": {"annotations": annotations}}), check=False)

    assert patch({"team": "a"}).returncode == 0, "an update that leaves kopf's annotations alone was refused"
    grown = patch({f"{KOPF}more": "v"})
    assert grown.returncode != 0 and "at most 8 KiB" in grown.stderr, grown.stderr
    smaller = patch({f"{KOPF}last-handled-configuration": '{"spec": {}}'})
    assert smaller.returncode == 0, smaller.stderr
