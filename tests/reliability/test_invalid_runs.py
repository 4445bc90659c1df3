"""The invalid-run corpus (invalid_runs.yaml) against the real kube-apiserver: every manifest is
refused with a message naming the field, through `kubectl apply` (what users type) and `kubectl
create`; spec edits after creation are refused; nothing is stored. Also: what each client really
does with unknown fields (the server rejects them under strict field validation, prunes them
otherwise), recorded as observed. No operator runs here.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ledger import Ledger, Record

from support.cluster import Cluster
from support.runs import run_doc

CORPUS = Path(__file__).resolve().parent / "invalid_runs.yaml"
CASES: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text())["cases"]
GROUPS = ("name", "type", "range", "enum", "storage", "path", "unknown", "scheduling", "edit")


def deep_merge(base: Any, patch: Any) -> Any:
    if not (isinstance(base, dict) and isinstance(patch, dict)):
        return copy.deepcopy(patch)
    out = copy.deepcopy(base)
    for key, value in patch.items():
        out[key] = deep_merge(out.get(key), value)
    return out


def test_the_corpus_is_well_formed() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate ids"
    assert len(CASES) >= 40
    for case in CASES:
        assert case["group"] in GROUPS, case
        assert case["field"], case
        assert ("edit" in case) == (case["group"] == "edit"), case
    assert {c["group"] for c in CASES} == set(GROUPS)


@pytest.fixture(scope="module")
def corpus_ns(control_plane: Cluster) -> Iterator[str]:
    name = f"t-invalid-runs-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def stored(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    proc = cluster.kubectl("get", "dtr", name, "-n", namespace, "-o", "json", "--ignore-not-found", check=False)
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def refused_naming(proc: Any, case: dict[str, Any]) -> tuple[bool, str]:
    """(refused with the field and every word in the message, the message's first line)"""
    message = server_message(proc.stderr)
    ok = proc.returncode != 0 and case["field"] in message and all(w in message for w in case.get("words", []))
    return ok, message if proc.returncode != 0 else f"(accepted: {proc.stdout.strip()})"


def server_message(stderr: str) -> str:
    """kubectl's stderr as one line, without its client/server version-skew notice."""
    lines = [ln.strip() for ln in stderr.splitlines()
             if ln.strip() and not ln.startswith("WARNING: version difference")]
    return " ".join(lines)


def send_new(cluster: Cluster, namespace: str, case: dict[str, Any], index: int) -> dict[str, tuple[bool, str]]:
    """The manifest through kubectl apply and kubectl create: client -> (refused as required, message)."""
    name = case.get("name") or f"bad-{index}"
    doc = json.dumps(run_doc(name, namespace, case["spec"], top=case.get("top")))
    seen = {}
    for client in ("apply", "create"):
        proc = cluster.kubectl(client, "-f", "-", input=doc, check=False)
        ok, message = refused_naming(proc, case)
        if proc.returncode == 0:  # stored: keep the next client's attempt independent of this one
            cluster.kubectl("delete", "dtr", name, "-n", namespace, "--wait=false", check=False)
        seen[client] = (ok, message)
    return seen


def send_edit(cluster: Cluster, namespace: str, case: dict[str, Any], index: int) -> dict[str, tuple[bool, str]]:
    """Create the valid run (with kubectl apply, so apply can diff later), then try the edit."""
    name = f"edit-{index}"
    original = run_doc(name, namespace, case["spec"])
    cluster.kubectl("apply", "-f", "-", input=json.dumps(original))
    before = stored(cluster, namespace, name)
    assert before is not None
    edit = case["edit"]
    via = edit["via"]
    if via in ("merge", "json"):
        proc = cluster.kubectl(
            "patch", "dtr", name, "-n", namespace, f"--type={via}", "-p", json.dumps(edit["patch"]), check=False
        )
    else:
        changed = run_doc(name, namespace, deep_merge(case["spec"], edit["patch"]))
        if via == "replace":
            changed["metadata"]["resourceVersion"] = before["metadata"]["resourceVersion"]
        proc = cluster.kubectl(via, "-f", "-", input=json.dumps(changed), check=False)
    ok, message = refused_naming(proc, case)
    after = stored(cluster, namespace, name)
    unchanged = after is not None and after["spec"] == before["spec"]
    return {via: (ok and unchanged, message)}


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c["id"] for c in CASES])
def test_each_invalid_run_is_refused_naming_the_field(
    control_plane: Cluster, corpus_ns: str, ledger: Ledger, index: int
) -> None:
    case = CASES[index]
    send = send_edit if "edit" in case else send_new
    seen = send(control_plane, corpus_ns, case, index)
    first = next(iter(seen.values()))[1]
    ledger.add(
        Record(
            area="invalid-input",
            case=f"{case['group']}/{case['id']}",
            tried=len(seen),
            correct=sum(ok for ok, _ in seen.values()),
            user_sees=first,
            detail={"field": case["field"], "clients": {c: ok for c, (ok, _) in seen.items()}},
        )
    )
    for client, (ok, message) in seen.items():
        assert ok, (f"kubectl {client}: expected a refusal naming {case['field']} {case.get('words', [])}, "
                    f"got: {message}")


def test_no_refused_run_was_stored(control_plane: Cluster, corpus_ns: str) -> None:
    """After the whole corpus, the namespace holds only the runs the edit cases created (unchanged)."""
    names = control_plane.kubectl("get", "dtr", "-n", corpus_ns, "-o", "name").stdout.split()
    expected = {f"disttrainingrun.distml.dev/edit-{i}" for i, c in enumerate(CASES) if "edit" in c}
    assert set(names) == expected


# ---- unknown fields: what each client really does -------------------------------------------------

UNKNOWN = {"replicas": 3, "training": {"optimizer": "sgd"}}
STRICT_WORDS = ('unknown field "spec.replicas"', 'unknown field "spec.training.optimizer"')


def _python_client_create(namespace: str, doc: dict[str, Any]) -> tuple[bool, list[str]]:
    """The kubernetes Python client (what a program calls), no fieldValidation parameter: (created, warnings)."""
    import os

    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(config_file=os.environ["KUBECONFIG"]))
    _, code, headers = api.create_namespaced_custom_object_with_http_info(
        "distml.dev", "v1alpha1", namespace, "disttrainingruns", doc
    )
    return code == 201, [v for k, v in (headers or {}).items() if k.lower() == "warning"]


def test_unknown_fields_per_client(control_plane: Cluster, corpus_ns: str, ledger: Ledger) -> None:
    """kubectl 1.32 sends fieldValidation=Strict with apply/create (refused); --validate=warn and
    --validate=false, and API clients that send no fieldValidation, get the object stored with the
    unknown fields pruned (a warning, or silence). Recorded as observed, asserted as documented."""
    observed: dict[str, str] = {}

    def attempt(label: str, *args: str) -> Any:
        name = f"unk-{len(observed)}"
        proc = control_plane.kubectl(*args, "-f", "-", input=json.dumps(run_doc(name, corpus_ns, UNKNOWN)), check=False)
        got = stored(control_plane, corpus_ns, name)
        if got is None:
            observed[label] = "refused: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
        else:
            kept = [k for k in ("replicas",) if k in got["spec"]] + [
                k for k in ("optimizer",) if k in got["spec"].get("training", {})
            ]
            warned = "unknown field" in proc.stderr
            observed[label] = (f"stored, unknown fields {'kept' if kept else 'pruned'}, "
                               f"{'warning' if warned else 'no warning'}")
        return proc, got

    proc, got = attempt("kubectl apply", "apply")
    assert got is None and all(w in proc.stderr for w in STRICT_WORDS), proc.stderr
    proc, got = attempt("kubectl create", "create")
    assert got is None and all(w in proc.stderr for w in STRICT_WORDS), proc.stderr
    proc, got = attempt("kubectl apply --server-side", "apply", "--server-side")
    assert got is None and ".spec.replicas: field not declared in schema" in proc.stderr, proc.stderr
    proc, got = attempt("kubectl create --validate=warn", "create", "--validate=warn")
    assert got is not None and "replicas" not in got["spec"] and "optimizer" not in got["spec"]["training"]
    assert 'Warning: unknown field "spec.replicas"' in proc.stderr, proc.stderr
    proc, got = attempt("kubectl create --validate=false", "create", "--validate=false")
    assert got is not None and "replicas" not in got["spec"]
    assert "unknown field" not in proc.stderr, proc.stderr

    name = "unk-python"
    created, warned = _python_client_create(corpus_ns, run_doc(name, corpus_ns, UNKNOWN))
    got = stored(control_plane, corpus_ns, name)
    observed["python kubernetes client (no fieldValidation)"] = (
        f"stored, unknown fields {'pruned' if got and 'replicas' not in got['spec'] else 'kept'}, "
        f"{'warning header' if any('unknown field' in w for w in warned) else 'no warning'}"
    )
    assert created and got is not None and "replicas" not in got["spec"]
    # The server's default for a request without fieldValidation is Warn: a Warning header.
    assert any("unknown field" in w and "spec.replicas" in w for w in warned), warned

    ledger.add(
        Record(
            area="unknown-fields",
            case="client behaviour",
            tried=len(observed),
            correct=len(observed),
            user_sees="; ".join(f"{k}: {v}" for k, v in observed.items()),
            detail=observed,
        )
    )


def test_the_boundaries_are_accepted(control_plane: Cluster, corpus_ns: str) -> None:
    """The rules are not too broad: the extreme valid values next to the refused ones are stored."""
    specs = {
        "a" * 52: {"workers": 64, "training": {"epochs": 1000, "batchSizePerWorker": 4096, "seed": 2147483647,
                                                "learningRate": 10, "stepsPerEpoch": 1000000}},
        "b1": {"workers": 1, "training": {"epochs": 1, "batchSizePerWorker": 1, "seed": 0, "learningRate": 1e-9,
                                          "dataset": "sets/v1.2/my-data_x.npz"}},
        "c-1": {"export": {"modelName": "m" * 63}, "storage": {"claimName": "shared.vol-1"}, "backoffLimit": 100,
                "activeDeadlineSeconds": 1, "ttlSecondsAfterFinished": 60},
    }  # fmt: skip
    for name, spec in specs.items():
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(run_doc(name, corpus_ns, spec)))
        assert stored(control_plane, corpus_ns, name) is not None
