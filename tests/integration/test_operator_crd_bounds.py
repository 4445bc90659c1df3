"""The CRD's bounds on the real API server: the largest run the schema admits is stored as sent, and a run over
any bound is refused (422 Invalid) naming the field, as `dtr render` refuses it (spec.parse_run); H2 of the
security review. No operator runs. The largest size itself: tests/unit/operator/test_crd_bounds.py."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
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
    """'' when created, else the API server's answer."""
    proc = cluster.create(run_doc(name, namespace, {}, **metadata), check=False)
    return "" if proc.returncode == 0 else proc.stderr


@pytest.mark.parametrize("what, metadata, words", [
    ("labels", {"labels": {f"l{i}": "v" for i in range(33)}}, "at most 32 labels"),
    ("annotations", {"annotations": {f"a{i}": "v" * 1000 for i in range(17)}}, "at most 16 KiB"),
])  # fmt: skip
def test_a_runs_own_metadata_is_bounded_by_the_admission_policy(
    metadata_policy: Cluster, namespace: str, what: str, metadata: dict[str, Any], words: str
) -> None:
    # The policy takes effect a moment after it is created: the first refusal is waited for.
    refused = wait_for(lambda: _create_with(metadata_policy, namespace, f"big-{what}-{uuid.uuid4().hex[:4]}",
                                            **metadata), f"the admission policy to refuse {what}", timeout=30)
    assert words in refused and "ValidatingAdmissionPolicy" in refused, refused
    at_bound = {k: dict(list(v.items())[:-1]) for k, v in metadata.items()}
    assert _create_with(metadata_policy, namespace, f"ok-{what}", **at_bound) == ""
