"""A cluster without the Kubeflow training-operator: the run says so, how to fix it, retries with
backoff, and proceeds once the TFJob CRD appears.

The shared control plane has the TFJob CRD (and other tests rely on it), so this test brings up
its own bare etcd + kube-apiserver from the same binaries and the same helpers
(devcluster/controlplane.py), with only the DistTrainingRun CRD installed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kopf.testing import KopfRunner

from devcluster.controlplane import (
    Api,
    Layout,
    Ports,
    apiserver_args,
    die_with_parent,
    etcd_args,
    free_ports,
    http_get,
    kubeconfig_doc,
    make_cluster_pki,
    terminate,
)
from support.cluster import Cluster
from support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("DTR_CACHE") or Path.home() / ".cache" / "dtr")


def _established(cluster: Cluster) -> bool:
    crd = cluster.kubectl_json("get", "crd", "disttrainingruns.distml.dev")
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """etcd + kube-apiserver only: no controllers, no training-operator, no TFJob CRD."""
    binaries = {name: CACHE / "bin" / name for name in ("etcd", "kube-apiserver")}
    for path in binaries.values():
        if not os.access(path, os.X_OK):
            pytest.fail(f"{path} is missing; run `bash devcluster/build.sh`", pytrace=False)
    layout = Layout(tmp_path_factory.mktemp("bare-apiserver"))
    for sub in ("logs", "apiserver"):
        (layout.root / sub).mkdir()
    layout.etcd_data.mkdir(mode=0o700)
    make_cluster_pki(layout.pki)
    ports = Ports(*free_ports(len(dataclasses.fields(Ports))))
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(name: str, argv: list[str]) -> None:
        with open(layout.log_file(name), "ab") as log:
            # die_with_parent only calls prctl(2): safe between fork and exec even with threads around.
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=layout.root,
                                          preexec_fn=die_with_parent))  # fmt: skip

    try:
        spawn("etcd", etcd_args(binaries["etcd"], layout, ports))
        wait_for(lambda: b'"true"' in http_get(f"http://127.0.0.1:{ports.etcd}/health")[1], "etcd", timeout=60)
        spawn("kube-apiserver", apiserver_args(binaries["kube-apiserver"], layout, ports))
        api = Api(ports.apiserver, layout.pki)
        wait_for(lambda: http_get(f"{api.base}/readyz", api.context)[0] == 200, "kube-apiserver", timeout=90)
        pki = layout.pki
        doc = kubeconfig_doc(
            f"https://127.0.0.1:{ports.apiserver}",
            (pki / "ca.crt").read_bytes(), (pki / "admin.crt").read_bytes(), (pki / "admin.key").read_bytes(),
        )  # fmt: skip
        layout.kubeconfig.write_text(json.dumps(doc))
        layout.kubeconfig.chmod(0o600)
        cluster = Cluster(layout.kubeconfig, layout.root)
        cluster.kubectl("apply", "-f", str(REPO / "crds" / "disttrainingrun.yaml"))
        # Polled, not `kubectl wait`: that fails at once while the new CRD has no status.conditions yet
        # (a race that a larger schema, such as the bounded affinity's, made frequent).
        wait_for(lambda: _established(cluster), "the DistTrainingRun CRD to be Established", timeout=60)
        yield cluster
    finally:
        for proc in reversed(procs):
            terminate(proc.pid, str(proc.args[0]))  # type: ignore[index]


@pytest.fixture
def bare_kubeconfig(bare_cluster: Cluster) -> Iterator[Cluster]:
    """KUBECONFIG points at the bare cluster for the test (the operator logs in with it)."""
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(bare_cluster.kubeconfig)
    try:
        yield bare_cluster
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous


def run_status(cluster: Cluster, namespace: str, name: str) -> dict:
    return cluster.kubectl_json("get", "dtr", name, "-n", namespace).get("status") or {}


def _condition(cluster: Cluster, crd: str, kind: str) -> str | None:
    found = cluster.kubectl_json("get", "crd", crd)
    return next((c.get("status") for c in (found.get("status") or {}).get("conditions") or [] if c["type"] == kind),
                None)  # fmt: skip


def clashing_crd(tfjobs: dict) -> dict:
    """A CRD of the TFJob CRD's group that claims its kind under another plural: the API server accepts the names of
    whichever came first, and keeps the other from being Established until the clash goes."""
    spec = tfjobs["spec"]
    version = next(v for v in spec["versions"] if v.get("storage"))
    anything = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"clashing.{spec['group']}"},
        "spec": {
            "group": spec["group"], "scope": "Namespaced",
            "names": {"plural": "clashing", "singular": "clashing", "kind": spec["names"]["kind"],
                      "listKind": "ClashingList"},
            "versions": [{"name": version["name"], "served": True, "storage": True, "schema": anything}],
        },
    }  # fmt: skip


def test_missing_tfjob_crd_is_explained_and_retried(bare_kubeconfig: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    cluster = bare_kubeconfig
    ns = "no-tfjob"
    cluster.kubectl("create", "namespace", ns)
    cluster.create({
        "apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun",
        "metadata": {"name": "early", "namespace": ns}, "spec": {},
    })  # fmt: skip
    args = ["run", "--standalone", "--namespace", ns, "-m", "dtr_operator.handlers"]
    with KopfRunner(args, timeout=60) as runner:
        st = wait_for(
            lambda: (s := run_status(cluster, ns, "early")).get("reason") == "TFJobCRDMissing" and s,
            "the run to say the TFJob CRD is missing",
            timeout=60,
        )
        assert st["phase"] == "Pending"
        assert "tfjobs.kubeflow.org) is not installed" in st["message"]
        assert "training-operator" in st["message"] and "kubectl apply --server-side -k" in st["message"]
        created = next(c for c in st["conditions"] if c["type"] == "Created")
        assert created["status"] == "False" and created["reason"] == "TFJobCRDMissing"
        events = cluster.kubectl_json("get", "events", "-n", ns)["items"]
        assert [e["type"] for e in events if e["reason"] == "TFJobCRDMissing"] == ["Warning"]

        # Retrying with backoff does not rewrite the status or repeat the event.
        time.sleep(8)
        assert run_status(cluster, ns, "early") == st
        events = cluster.kubectl_json("get", "events", "-n", ns)["items"]
        assert [e.get("count", 1) for e in events if e["reason"] == "TFJobCRDMissing"] == [1]

        # The training-operator's CRD installed but not served (not Established): the run still waits, it does not
        # fail for a refused TFJob. Made to last by a CRD of the group that took its kind first (a name clash); in a
        # real install the window is the moment between the CRD's creation and its Established condition.
        tfjob_crd = CACHE / "crds" / "kubeflow.org_tfjobs.yaml"
        docs = [d for d in yaml.safe_load_all(tfjob_crd.read_text()) if d]
        clash = clashing_crd(docs[0])
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(clash))
        wait_for(lambda: _condition(cluster, clash["metadata"]["name"], "Established") == "True", "the clashing CRD")
        caplog.clear()
        cluster.kubectl("apply", "--server-side", "-f", "-", input="\n---\n".join(yaml.safe_dump(d) for d in docs))
        wait_for(lambda: _condition(cluster, "tfjobs.kubeflow.org", "NamesAccepted") == "False", "the name clash")
        wait_for(lambda: any("waits (attempt" in r.getMessage() for r in caplog.records)
                 or run_status(cluster, ns, "early").get("reason") != "TFJobCRDMissing",
                 "an attempt while the TFJob CRD is not served", timeout=60)  # fmt: skip
        st = run_status(cluster, ns, "early")
        assert (st["phase"], st["reason"]) == ("Pending", "TFJobCRDMissing"), st

        # Served at last: the next attempt goes through (backoff 5 s, 10 s, 20 s ...).
        cluster.kubectl("delete", "crd", clash["metadata"]["name"])
        st = wait_for(
            lambda: (s := run_status(cluster, ns, "early")).get("tfJob") and s.get("reason") == "TFJobSubmitted" and s,
            "the TFJob to be created once its CRD exists",
            timeout=90,
        )
        job = cluster.kubectl_json("get", "tfjob", "early", "-n", ns)
        assert job["metadata"]["ownerReferences"][0]["name"] == "early"
        assert next(c for c in st["conditions"] if c["type"] == "Created")["status"] == "True"
    assert runner.exit_code == 0 and "Traceback" not in runner.output
