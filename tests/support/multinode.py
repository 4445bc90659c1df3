"""Several real nodes (devcluster/cluster.py) as the multi-node tier uses them: bring-up, the tier's fixture,
pods pinned to nodes, and a node's power cut. Imported as `support.multinode`."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dtr_contract.progress import parse_epoch_end_line
from minio import Minio

from devcluster import cluster as dc
from devcluster import controlplane as cp
from devcluster import node as realnode
from devcluster import s3

from . import s3 as support_s3
from .cluster import Cluster, kubeconfig_set, namespace_name
from .node import RealNode, score_model
from .runs import saved_models
from .wait import wait_for

NODES = 3
BUSYBOX = realnode.pinned(realnode.HERE / "versions.env")["BUSYBOX_IMAGE"]


@dataclass
class MultiNode:
    cluster: Cluster
    nodes: dc.Cluster
    last_probe: str = "none yet"

    @property
    def real(self) -> RealNode:
        """The run helpers of the single-node tier (apply, run_status, wait_terminal, logs ...)."""
        return RealNode(self.cluster, self.nodes.nodes[0])

    def node_of(self, namespace: str, pod: str) -> str:
        return self.real.pod(namespace, pod)["spec"].get("nodeName", "")

    def pod_on(self, namespace: str, name: str, node: str, command: str, labels: dict[str, str] | None = None) -> str:
        """A busybox pod on `node` running `command`; returns its address once it runs."""
        doc = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                "command": ["sh", "-c", command]}],
            },
        }  # fmt: skip
        self.cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))

        def running() -> str | None:
            pod = self.real.pod(namespace, name)
            status = pod.get("status") or {}
            return status.get("podIP") if status.get("phase") == "Running" else None

        return wait_for(running, timeout=120, what=f"pod {name} running on {node}")

    def connects(self, namespace: str, pod: str, host: str, port: int) -> bool:
        """Whether `pod` gets an HTTP answer from host:port within 4 s (what the last try said: last_probe)."""
        probe = f'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 4 {host} {port} | head -1'
        proc = self.cluster.kubectl("exec", "-n", namespace, pod, "--", "sh", "-c", probe, check=False, timeout=30)
        said = f"exit {proc.returncode} {proc.stdout.strip()!r} {proc.stderr.strip()!r}"
        self.last_probe = f"{pod} -> {host}:{port}: {said}"
        return proc.stdout.startswith("HTTP/")

    def network(self) -> str:
        """Each node's routes, neighbours on the pods' bridge, the addresses its policy engine holds, and the
        tails of its flanneld and kube-network-policies logs: what a failed connection needs to be explained."""
        parts = [f"last probe: {self.last_probe}"]
        for node in self.nodes.nodes:
            netns = node.in_netns()
            for argv in (["ip", "route"], ["ip", "neigh", "show", "dev", "cni0"],
                         ["nft", "list", "set", "inet", realnode.NFT_TABLE, "podips-v4"]):  # fmt: skip
                proc = realnode.run([*netns, *argv], check=False)
                parts.append(f"[{node.spec.name}] $ {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
            for component in ("flanneld", "kube-network-policies"):
                parts.append(f"[{node.spec.name}] {component} log\n{cp.tail(node.log_file(component), 15)}")
        return "\n".join(parts)

    def node_ready(self, name: str) -> str:
        node = self.cluster.kubectl_json("get", "node", name)
        ready = [c for c in node["status"].get("conditions", []) if c["type"] == "Ready"]
        return ready[0]["status"] if ready else "Unknown"


@contextlib.contextmanager
def start_multinode(workdir: Path) -> Iterator[MultiNode]:
    """The tier's cluster: DTR_CLUSTER_DIR's (`python -m devcluster.cluster up --dir DIR`), else one of its own."""
    existing = os.environ.get("DTR_CLUSTER_DIR")
    root = Path(existing).resolve() if existing else workdir
    count = len(list((root / "nodes").glob("n*"))) if existing else NODES
    nodes = dc.Cluster(root, count, stop_at_exit=existing is None)
    try:
        if existing is None:
            try:
                nodes.start()
            except cp.ControlPlaneError as err:
                pytest.fail(f"the cluster did not start: {err}", pytrace=False)
        cluster = Cluster(nodes.kubeconfig, nodes.plane.dir)
        with kubeconfig_set(cluster.kubeconfig):
            try:
                installed = nodes.install()
            except cp.ControlPlaneError as err:
                pytest.fail(str(err), pytrace=False)
            if installed.returncode != 0:
                pytest.fail(f"deploy/install.sh failed:\n{installed.stdout[-3000:]}\n{installed.stderr[-3000:]}",
                            pytrace=False)  # fmt: skip
            yield MultiNode(cluster, nodes)
    finally:
        if existing is None:
            nodes.stop()


@pytest.fixture(scope="session")
def multinode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiNode]:
    with start_multinode(tmp_path_factory.mktemp("multinode")) as cluster:
        yield cluster


@pytest.fixture
def plain_namespace(multinode: MultiNode, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace without Pod Security (busybox test pods run as root), deleted after."""
    name = namespace_name(request.node.name)
    multinode.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        multinode.cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture
def namespace(multinode: MultiNode, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace that enforces Pod Security `restricted`, as the runs' namespaces do."""
    from .node import restricted_namespace

    with restricted_namespace(multinode.real, request.node.name) as name:
        yield name


@dataclass(frozen=True)
class S3:
    """The S3 server on the several nodes (Cluster.install_s3): its keys and bucket, `endpoint` as pods reach it
    (the Service's name, the one the operator allows), `local` as this machine does (the pod's address)."""

    endpoint: str
    local: str
    access_key: str
    secret_key: str
    bucket: str

    def client(self) -> Minio:
        return support_s3.client(self.local, self.access_key, self.secret_key)


@pytest.fixture(scope="module")
def s3_server(multinode: MultiNode) -> Iterator[S3]:
    """The S3 server as a pod (devcluster/cluster.py install_s3), installed for the module and removed after it.
    Skipped, saying why, when its image was not built (`make s3-build`); DTR_S3_REQUIRED=1 (CI) fails instead."""
    support_s3.require(multinode.nodes.plane.cache / "images" / "optional" / "seaweedfs.tar")
    t0 = time.monotonic()
    try:
        env_file = multinode.nodes.install_s3()
    except cp.ControlPlaneError as err:
        pytest.fail(f"the S3 server did not install: {err}", pytrace=False)
    print(f"S3 server installed on {len(multinode.nodes.nodes)} nodes in {time.monotonic() - t0:.0f} s")
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    try:
        yield S3(s3.service_endpoint(), env["AWS_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"],
                 env["S3_BUCKET"])  # fmt: skip
    finally:
        multinode.cluster.kubectl("delete", "namespace", s3.NAMESPACE, "--timeout=120s", check=False, timeout=150)
        env_file.unlink(missing_ok=True)


S3_SECRET = "s3-keys"


def s3_secret(multinode: MultiNode, namespace: str, access_key: str, secret_key: str, name: str = S3_SECRET) -> str:
    """A Secret with the keys as spec.objectStore.credentialsSecret reads them; its name."""
    multinode.cluster.create({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": name, "namespace": namespace},
        "stringData": {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key},
    })  # fmt: skip
    return name


@pytest.fixture
def s3_keys(multinode: MultiNode, namespace: str, s3_server: S3) -> str:
    """The S3 server's keys in a Secret of the test's namespace (S3_SECRET); its name."""
    return s3_secret(multinode, namespace, s3_server.access_key, s3_server.secret_key)


def wait_node_ready(multinode: MultiNode, name: str, want: str, timeout: float = 120) -> float:
    """Seconds until the node's Ready condition is `want` ("True", "Unknown" ...)."""
    t0 = time.monotonic()
    wait_for(lambda: multinode.node_ready(name) == want or None, timeout=timeout, what=f"node {name} Ready={want}")
    return time.monotonic() - t0


def _example_run(example: str, name: str, epochs: int) -> dict[str, Any]:
    """examples/<example>'s run under another name, training `epochs` epochs."""
    import yaml

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / example).read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["training"]["epochs"] = epochs
    return doc


def spread_run(name: str, epochs: int = 8, **spec: Any) -> dict[str, Any]:
    """examples/digits-spread.yaml's run under another name (its workers on different nodes, shared-path)."""
    doc = _example_run("digits-spread.yaml", name, epochs)
    doc["spec"]["export"]["modelName"] = name
    term = doc["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    term["labelSelector"]["matchLabels"]["distml.dev/run"] = name
    doc["spec"].update(spec)
    return doc


def one_node_run(name: str, epochs: int = 8) -> dict[str, Any]:
    """examples/digits.yaml's run under another name: the default ReadWriteOnce claim, so its workers share a node."""
    return _example_run("digits.yaml", name, epochs)


def worker_nodes(multinode: MultiNode, namespace: str, name: str, workers: int = 2) -> list[str]:
    """The nodes of the run's workers once all of them run."""

    def placed() -> list[str] | None:
        pods = multinode.cluster.read("pod", namespace, labelSelector=f"distml.dev/run={name}")["items"]
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return [p["spec"]["nodeName"] for p in sorted(running, key=lambda p: p["metadata"]["name"])] \
            if len(running) == workers else None  # fmt: skip

    return wait_for(placed, timeout=300, interval=0.5, what=f"every worker of {name} running")


def claim_dir(multinode: MultiNode, namespace: str, claim: str) -> Path:
    """Where local-path put the claim: on its node (local-path) or in the directory every node mounts."""
    pvc = multinode.cluster.kubectl_json("get", "pvc", claim, "-n", namespace)
    pv = pvc["spec"]["volumeName"]
    if pvc["spec"].get("storageClassName") == "shared-path":
        return multinode.nodes.shared / f"{pv}_{namespace}_{claim}"
    node = pv_node(multinode, pv)
    return multinode.nodes.node(node).storage / f"{pv}_{namespace}_{claim}"


def pv_node(multinode: MultiNode, pv: str) -> str:
    terms = multinode.cluster.kubectl_json("get", "pv", pv)["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    return terms[0]["matchExpressions"][0]["values"][0]


OUT_OF_SERVICE = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"  # an admin's: the node is down


def finish(multinode: MultiNode, namespace: str, name: str) -> tuple[dict[str, Any], int, bool | None]:
    """The run's final status, how many models it left, and whether they load and score."""
    st = multinode.real.wait_terminal(namespace, name, timeout=600)
    claim = st.get("pvc") or f"{name}-data"
    models = saved_models(claim_dir(multinode, namespace, claim) / "models")
    return st, len(models), (all(score_model(m) > 0.5 for m in models) if models else None)


def epochs_ended(multinode: MultiNode, namespace: str, name: str, claim: str | None = None) -> list[int]:
    """Each epoch-end line of the chief's log on the run's volume, across every attempt, in order."""
    log = claim_dir(multinode, namespace, claim or f"{name}-data") / "logs" / name / "worker-0.log"
    lines = [line.split(" ", 1)[-1] for line in log.read_text().splitlines()]
    return [end.epoch for line in lines if (end := parse_epoch_end_line(line)) is not None]


@pytest.fixture
def powered_back(multinode: MultiNode) -> Iterator[list[str]]:
    """The nodes a test powers off: powered on, untainted and Ready again after it."""
    off: list[str] = []
    yield off
    for name in off:
        multinode.nodes.node(name).power_on()
        multinode.cluster.kubectl("taint", "node", name, "node.kubernetes.io/out-of-service-", check=False)
        wait_node_ready(multinode, name, "True")
