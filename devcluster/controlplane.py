#!/usr/bin/env python3
"""A real Kubernetes control plane as local processes, on 127.0.0.1 only.

etcd, kube-apiserver (RBAC, local CA, service-account token signing), kube-controller-manager
(garbage collector, PV binder, service accounts, namespaces, ...) and the Kubeflow
training-operator (TFJob controller and its validating webhook), then the project's CRDs.
The binaries come from devcluster/build.sh (a cache hit once built).

    python -m devcluster.controlplane up|down|status [--dir DIR]

Python 3.11 standard library; PyYAML only to read CRD files.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import ctypes
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BUILD_SH = HERE / "build.sh"
DEFAULT_DIR = REPO / ".dtr" / "cluster"
PROJECT_CRDS = REPO / "crds"
# kubectl for everything that talks to a cluster from here: node.py, the tests, bench/.
KUBECTL = os.environ.get("DTR_KUBECTL") or shutil.which("kubectl") or "kubectl"

# Start order; teardown runs in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "training-operator")

# Controllers the tests and the operator rely on. The protection controllers must run because the
# StorageObjectInUseProtection admission plugin puts finalizers on every PVC/PV that only they remove;
# the aggregation controller fills the admin/edit/view roles.
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "persistentvolume-binder-controller",
    "persistentvolume-protection-controller",
    "persistentvolumeclaim-protection-controller",
    # Quota admission enforces only what this controller has written into a quota's status.
    "resourcequota-controller",
    # The Eviction API decides from what this controller writes into a PodDisruptionBudget's status (a protected
    # run's, spec.disruption.protect); without it every eviction of a pod a budget selects is refused for good.
    "disruption-controller",
)
# With a real node (devcluster/node.py), what it and its pods need: its taints managed,
# Deployments (the operator, CoreDNS, local-path, training-operator), EndpointSlices (kube-proxy,
# CoreDNS), finished pods collected.
NODE_CONTROLLERS = (
    # Lifts the not-ready taint kubelet registers the node with (and taints a node that stops posting).
    "node-lifecycle-controller",
    "deployment-controller",
    "replicaset-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "pod-garbage-collector-controller",
    "ttl-after-finished-controller",
    "job-controller",
)

# With several nodes (devcluster/cluster.py): each node's pod subnet allocated from the cluster's pod
# network (flannel leases it), and a stopped node's pods evicted from its NotReady taint.
MULTI_NODE_CONTROLLERS = ("node-ipam-controller", "taint-eviction-controller")

SERVICE_CIDR = "10.0.0.0/24"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

# The training-operator's cert rotator (open-policy-agent/cert-controller) is hard-wired to these:
# a Secret it reads in the operator namespace, a fixed on-disk cert dir (where a pod would mount
# that Secret), and the webhook configuration whose caBundle it keeps current.
OPERATOR_NAMESPACE = "kubeflow"
WEBHOOK_SECRET = "training-operator-webhook-cert"
WEBHOOK_SERVICE_DNS = f"training-operator.{OPERATOR_NAMESPACE}.svc"
WEBHOOK_CA_NAME = "training-operator-ca"
WEBHOOK_CONFIG = "validator.training-operator.kubeflow.org"
WEBHOOK_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
WEBHOOK_SECRET_KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")

START_TIMEOUT = 90.0
STOP_TIMEOUT = 10.0


class ControlPlaneError(RuntimeError):
    """A failure with a one-line explanation for a person."""


# ---------------------------------------------------------------- pure parts


@dataclass(frozen=True)
class Ports:
    etcd: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    operator_metrics: int
    operator_probe: int
    operator_webhook: int


@dataclass(frozen=True)
class Layout:
    """Where everything of one control plane lives under its directory."""

    root: Path

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    def log_file(self, component: str) -> Path:
        return self.logs / f"{component}.log"


def etcd_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    client, peer = f"http://127.0.0.1:{ports.etcd}", f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=dtr",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=dtr={peer}",
        "--unsafe-no-fsync=true",  # throw-away data; fsync is most of etcd's latency
        "--log-level=warn",
    ]


def apiserver_args(
    binary: Path, layout: Layout, ports: Ports, node_ip: str | None = None, pod_network: str | None = None
) -> list[str]:
    """node_ip: a real node's address; pods reach the apiserver there (the `kubernetes` Service's
    endpoint, which may not be a loopback address), and the apiserver reaches the kubelet.
    pod_network: nodes in network namespaces of their own; the host runs no kube-proxy, so the apiserver
    reaches webhooks at their pods' addresses, not their Services' (the host routes to each node's pods)."""
    pki = layout.pki
    if node_ip:
        where = [
            "--bind-address=0.0.0.0",
            f"--advertise-address={node_ip}",
            f"--kubelet-client-certificate={pki / 'admin.crt'}",
            f"--kubelet-client-key={pki / 'admin.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            *(["--enable-aggregator-routing=true"] if pod_network else []),
            # A NotReady node's pods are evicted after 20 s, not 300 s: node faults are tested (a test cluster).
            *(["--default-not-ready-toleration-seconds=20", "--default-unreachable-toleration-seconds=20"]
              if pod_network else []),
        ]
    else:
        # Without --advertise-address the apiserver looks for a host interface with a default route.
        where = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"]
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
        *where,
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={layout.root / 'apiserver'}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--authorization-mode=Node,RBAC",
        # Beside the defaults, as OpenShift and hardened clusters run it: blockOwnerDeletion on an owner
        # reference needs `update` on the owner's finalizers (the operator's RBAC must grant it).
        "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki / 'sa.key'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        # The front-proxy (aggregation) trust, as kubeadm sets it up; without it every delegating
        # component (controller-manager, webhooks) logs a missing requestheader CA forever.
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--profiling=false",
    ]


def loopback_component_args(binary: Path, kubeconfig: Path, port: int) -> list[str]:
    """What the controller-manager and the scheduler share: one kubeconfig for all, HTTPS on loopback, no
    leader election (one replica), no profiling."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def controller_manager_args(
    binary: Path, layout: Layout, ports: Ports, node: bool = False, pod_network: str | None = None
) -> list[str]:
    pki = layout.pki
    controllers = CONTROLLERS + (NODE_CONTROLLERS if node else ()) + (MULTI_NODE_CONTROLLERS if pod_network else ())
    several = [
        "--allocate-node-cidrs=true",
        f"--cluster-cidr={pod_network}",
        "--node-cidr-mask-size=24",
        # NotReady 20 s after a node's last heartbeat (every 4 s, node.py), not 50 s: faults are tested.
        "--node-monitor-grace-period=20s",
        "--node-monitor-period=2s",
    ]
    return [
        *loopback_component_args(binary, layout.kubeconfig, ports.controller_manager),
        f"--cert-dir={layout.root / 'controller-manager'}",
        f"--controllers={','.join(controllers)}",
        *(several if pod_network else []),
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        "--use-service-account-credentials=false",
    ]


def training_operator_args(binary: Path, ports: Ports) -> list[str]:
    return [
        str(binary),
        "--enable-scheme=tfjob",
        f"--metrics-bind-address=127.0.0.1:{ports.operator_metrics}",
        f"--health-probe-bind-address=127.0.0.1:{ports.operator_probe}",
        # The webhook server has no host flag: it listens on all interfaces at this port.
        f"--webhook-server-port={ports.operator_webhook}",
        "--leader-elect=false",
        "--kube-api-qps=100",
        "--kube-api-burst=200",
    ]


def training_operator_env(layout: Layout) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBEFLOW_NAMESPACE",)}
    env["KUBECONFIG"] = str(layout.kubeconfig)
    env["MY_POD_NAMESPACE"] = OPERATOR_NAMESPACE
    # The rotator writes to /tmp/k8s-webhook-server, the webhook server reads os.TempDir()/...
    env["TMPDIR"] = "/tmp"
    return env


def kubeconfig_doc(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> dict[str, Any]:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dtr", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": "admin",
                   "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": "dtr", "context": {"cluster": "dtr", "user": "admin", "namespace": "default"}}],
        "current-context": "dtr",
    }


def tfjob_webhook_doc(port: int, ca_pem: bytes) -> dict[str, Any]:
    """The upstream TFJob validating webhook (manifests/base/webhook), reached by URL.

    Upstream points it at the Service training-operator.kubeflow; there is no service network here,
    so the apiserver calls the operator's webhook server on loopback instead.
    """
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIG},
        "webhooks": [
            {
                "name": "validator.tfjob.training-operator.kubeflow.org",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/validate-kubeflow-org-v1-tfjob",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "rules": [
                    {
                        "apiGroups": ["kubeflow.org"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["tfjobs"],
                    }
                ],
            }
        ],
    }


def crd_established(crd: dict[str, Any]) -> tuple[bool, str]:
    """(established, why not) from a CRD's status conditions."""
    conditions = {c.get("type"): c for c in (crd.get("status") or {}).get("conditions") or []}
    names = conditions.get("NamesAccepted", {})
    if names.get("status") == "False":
        return False, f"names not accepted: {names.get('message', '')}"
    if conditions.get("Established", {}).get("status") == "True":
        return True, ""
    return False, "not established yet"


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# ---------------------------------------------------------------- small I/O helpers


# Below Linux's ephemeral range (32768-60999): a port picked there cannot be taken, between this pick and
# the bind, by the source port of some outgoing connection (a fresh-clone run lost a TF worker that way,
# "Address already in use", while the integration lane ran beside it). dtr run does the same (local/ports.py).
LOW_PORT, HIGH_PORT = 20000, 32000
# "I/N": the I-th of N equal blocks of those (0-based). tests/tiers.py gives each step a block of its own, so a port
# one step picked and has not bound yet cannot be another step's pick (a run of 9e7541d lost an mlflow test's worker
# to a port taken before it bound it, "Could not start gRPC server", while the s3 step's workers, which pick theirs
# here too, ran beside it).
PORT_BLOCK_ENV = "DTR_PORT_BLOCK"


def port_range(environ: Mapping[str, str] = os.environ) -> range:
    spec = environ.get(PORT_BLOCK_ENV, "")
    if not spec:
        return range(LOW_PORT, HIGH_PORT)
    index, _, count = spec.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count) <= (HIGH_PORT - LOW_PORT) // 16):
        raise ControlPlaneError(f"{PORT_BLOCK_ENV}={spec!r}: want I/N, block I of N (0 <= I < N) of the ports "
                                f"{LOW_PORT}-{HIGH_PORT}")  # fmt: skip
    size = (HIGH_PORT - LOW_PORT) // int(count)
    return range(LOW_PORT + int(index) * size, LOW_PORT + (int(index) + 1) * size)


class _PortCursor:
    """A range's ports in turn from a random start: this process hands a port out again only after going round the
    whole range, so a port it gave one run is not another's while the first may not have bound it yet."""

    def __init__(self) -> None:
        self.next: dict[range, int] = {}

    def take(self, ports: range) -> int:
        at = self.next.get(ports, random.randrange(len(ports)))
        self.next[ports] = (at + 1) % len(ports)
        return ports[at]


_cursor = _PortCursor()


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports of `port_range()` (all held open at once so they differ)."""
    ports = port_range()
    with contextlib.ExitStack() as stack:
        picked: list[int] = []
        for _ in range(len(ports)):
            if len(picked) == count:
                return picked
            port = _cursor.take(ports)
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            stack.enter_context(sock)
            picked.append(port)
        if len(picked) == count:
            return picked
    raise ControlPlaneError(f"no {count} free loopback ports in {ports.start}..{ports.stop}")


def run_build(script: Path, cache: Path, *components: str) -> None:
    """devcluster/build.sh or build_node.sh into `cache` (a cache hit once built): its default components, or these."""
    env = dict(os.environ, DTR_CACHE=str(cache))
    proc = subprocess.run(["bash", str(script), *components], env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-5:]
        raise ControlPlaneError(f"{script.relative_to(REPO)} failed: " + " | ".join(last))


def built_binary(bin_dir: Path, name: str, script: Path) -> Path:
    path = bin_dir / name
    if not os.access(path, os.X_OK):
        raise ControlPlaneError(f"{path} is missing; run `bash {script.relative_to(REPO)}`")
    return path


def free_port() -> int:
    return free_ports(1)[0]


def stop_child(proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """SIGTERM a process this one started, SIGKILL it after `timeout`, and reap it."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, context: ssl.SSLContext | None = None, timeout: float = 3.0) -> tuple[int, bytes]:
    """(status, body); status 0 when nothing answers."""
    opener = _NO_PROXY
    if context is not None:
        handlers = (urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
        opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed: {proc.stderr.strip().splitlines()[-1:]}")


def write_ext(path: Path, lines: Sequence[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def make_ca(pki: Path, name: str, cn: str, rsa_pkcs1: bool = False, san: str | None = None) -> None:
    """A self-signed CA: <name>.crt/<name>.key (EC P-256, or PKCS#1 RSA where a consumer requires it)."""
    if rsa_pkcs1:
        openssl("genrsa", "-traditional", "-out", f"{name}.key", "2048", cwd=pki)
    else:
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key", cwd=pki)
    extra = ["-addext", f"subjectAltName={san}"] if san else []
    openssl(
        "req", "-x509", "-new", "-key", f"{name}.key", "-out", f"{name}.crt", "-days", "3650", "-subj", f"/CN={cn}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        *extra, cwd=pki,
    )  # fmt: skip


def make_leaf(pki: Path, ca: str, name: str, subject: str, usage: str, sans: Sequence[str] = ()) -> None:
    """A certificate signed by <ca>: serverAuth or clientAuth, EC P-256."""
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key", cwd=pki)
    openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=pki)
    ext = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
           f"extendedKeyUsage={usage}"]
    if sans:
        ext.append("subjectAltName=" + ",".join(sans))
    write_ext(pki / f"{name}.ext", ext)
    openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-set_serial",
        str(int.from_bytes(os.urandom(8), "big")), "-days", "3650", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
        cwd=pki,
    )  # fmt: skip
    (pki / f"{name}.csr").unlink()
    (pki / f"{name}.ext").unlink()


def make_cluster_pki(pki: Path, node_ip: str | None = None) -> None:
    """CA, apiserver serving cert, admin client cert (system:masters), front-proxy pair, service-account key."""
    pki.mkdir(parents=True, exist_ok=True)
    make_ca(pki, "ca", "dtr-local-ca")
    make_leaf(
        pki, "ca", "apiserver", "/CN=kube-apiserver", "serverAuth",
        ["DNS:localhost", "IP:127.0.0.1", "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
         "DNS:kubernetes.default.svc.cluster.local", "IP:10.0.0.1", *([f"IP:{node_ip}"] if node_ip else [])],
    )  # fmt: skip
    make_leaf(pki, "ca", "admin", "/O=system:masters/CN=admin", "clientAuth")
    make_ca(pki, "front-proxy-ca", "dtr-front-proxy-ca")
    make_leaf(pki, "front-proxy-ca", "front-proxy-client", "/CN=front-proxy-client", "clientAuth")
    # ES256 service-account tokens: the apiserver accepts EC keys, and they are quick to make.
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def default_cache(cache: str | os.PathLike[str] | None = None) -> Path:
    """Where build.sh and build_node.sh put what they build: `cache`, else DTR_CACHE, else ~/.cache/dtr."""
    return Path(cache or os.environ.get("DTR_CACHE") or Path.home() / ".cache" / "dtr")


def webhook_pki(home: Path = WEBHOOK_CERT_DIR.parent) -> Path:
    """One webhook CA + serving cert per machine, shared by every control plane on it.

    The operator's cert dir is a fixed path in /tmp, so concurrent control planes must agree on its
    content; they do when they all pre-seed the rotator's Secret with this same valid pair. It lives
    beside that fixed path, not in DTR_CACHE: two caches on one machine once held two pairs, and a
    second control plane's files broke the first one's webhook ("crypto/rsa: verification error").
    """
    pki = home / "dtr-webhook-pki"
    home.mkdir(parents=True, exist_ok=True)
    with file_lock(home / ".dtr-webhook-pki.lock"):
        if not (pki / "tls.crt").exists():
            tmp = Path(tempfile.mkdtemp(dir=home, prefix="dtr-webhook-pki."))
            make_ca(tmp, "ca", WEBHOOK_CA_NAME, rsa_pkcs1=True, san=f"DNS:{WEBHOOK_CA_NAME}")
            make_leaf(tmp, "ca", "tls", f"/CN={WEBHOOK_SERVICE_DNS}", "serverAuth",
                      [f"DNS:{WEBHOOK_SERVICE_DNS}", "DNS:localhost", "IP:127.0.0.1"])  # fmt: skip
            shutil.rmtree(pki, ignore_errors=True)
            tmp.rename(pki)
    return pki


def webhook_secret(pki: Path) -> dict[str, Any]:
    """The Secret the training-operator's cert rotator reads, holding `pki`'s pair: a valid pair there is kept, and
    a pod mounting the Secret has it from its start (else the rotator writes one and the kubelet brings it into the
    pod at its next sync, up to a minute or two later: the operator is not ready until then)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": WEBHOOK_SECRET, "namespace": OPERATOR_NAMESPACE},
        "data": {n: base64.b64encode((pki / n).read_bytes()).decode() for n in WEBHOOK_SECRET_KEYS},
    }


def install_webhook_certs(pki: Path) -> None:
    """Put the pair where a pod would have the Secret mounted (atomic writes: other clusters may read)."""
    with file_lock(WEBHOOK_CERT_DIR.parent / ".dtr.lock"):
        WEBHOOK_CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("ca.crt", "tls.crt", "tls.key"):
            data = (pki / name).read_bytes()
            target = WEBHOOK_CERT_DIR / name
            if target.exists() and target.read_bytes() == data:
                continue
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(target)


# ---------------------------------------------------------------- processes


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def pid_runs(pid: int, binary: str) -> bool:
    """True when pid is alive and still runs our binary (guards against a recycled pid)."""
    if not pid_alive(pid):
        return False
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except OSError:
        return False
    return argv0 == binary


def die_with_parent() -> None:
    """In the child before exec: the kernel kills it when the starting thread dies.

    atexit does not run when pytest is killed (a CI timeout's SIGTERM, SIGKILL); this still stops
    the control plane then. SIGKILL, because all four die at once: a SIGTERMed apiserver whose etcd
    is gone hangs in its shutdown.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def enter_netns(name: str) -> None:
    """In the child before exec: move into the network namespace /run/netns/<name> (`ip netns add`).

    Not `nsenter` in front of the command: the pid file's binary must be the process's own argv[0]
    (pid_runs). Not `ip netns exec` either: it also unshares the mount namespace, and a kubelet's
    volume mounts must be seen by its containerd's runc.
    """
    clone_newnet = 0x40000000
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, clone_newnet) != 0:
            raise OSError(ctypes.get_errno(), f"setns into network namespace {name}")
    finally:
        os.close(fd)


def reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def terminate(pid: int, binary: str, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM, wait, then SIGKILL; only if the pid still runs our binary."""
    if not pid_runs(pid, binary):
        reap(pid)
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap(pid)
        if not pid_alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and pid_alive(pid):
        reap(pid)
        time.sleep(0.05)


class Supervisor:
    """The processes of one part of the local cluster (the control plane, the node).

    Each logs to ROOT/logs/<component>.log and has ROOT/pids/<component> ("<pid> <binary>"), so a
    later `down` finds it; `wait` polls a readiness probe and fails fast, with the log's tail, when
    the process exits. stop_at_exit: the kernel kills the processes when the caller dies. netns: the
    network namespace every process starts in (one node of several, devcluster/cluster.py).
    """

    def __init__(
        self, root: Path, stop_at_exit: bool, log: Callable[[str], None], netns: str | None = None
    ) -> None:
        self.root = root
        self.stop_at_exit = stop_at_exit
        self.log = log
        self.netns = netns
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: dict[str, tuple[list[str], dict[str, str] | None]] = {}

    def log_file(self, component: str) -> Path:
        return self.root / "logs" / f"{component}.log"

    def spawn(self, component: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        with open(self.log_file(component), "ab") as logf:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                env=env, cwd=self.root, start_new_session=True,  # a Ctrl-C in the shell does not kill it
                preexec_fn=self._preexec(),  # safe here: started from one thread
            )  # fmt: skip
        self.children[component] = proc
        self.commands[component] = (list(argv), env)
        (self.root / "pids" / component).write_text(f"{proc.pid} {argv[0]}\n")
        # For a later process's respawn: a node shared by several test tiers is started by one process
        # (tests/tiers.py) and faulted by another (tests/reliability/test_node_faults.py).
        command = self.root / "pids" / f"{component}.command"
        command.write_text(json.dumps({"argv": list(argv), "env": env}))
        command.chmod(0o600)
        self.log(f"{component} started (pid {proc.pid})")
        return proc.pid

    def _preexec(self) -> Callable[[], None] | None:
        netns, parent = self.netns, self.stop_at_exit
        if netns is None:
            return die_with_parent if parent else None

        def enter() -> None:
            if parent:
                die_with_parent()
            enter_netns(netns)

        return enter

    def respawn(self, component: str) -> int:
        """Start a component again, as it was started (after it died or was killed)."""
        if component not in self.commands:
            saved = json.loads((self.root / "pids" / f"{component}.command").read_text())
            self.commands[component] = (saved["argv"], saved["env"])
        argv, env = self.commands[component]
        return self.spawn(component, argv, env)

    def wait(
        self, component: str, ready: Callable[[], bool | str], timeout: float = START_TIMEOUT, what: str = ""
    ) -> None:
        """Poll `ready` until true; fail fast with the log tail when `component`'s process dies."""
        deadline = time.monotonic() + timeout
        why: bool | str = False
        log = self.log_file(component)
        while time.monotonic() < deadline:
            proc = self.children.get(component)
            if proc is not None and proc.poll() is not None:
                raise ControlPlaneError(f"{component} exited with code {proc.returncode}; log {log}:\n{tail(log)}")
            why = ready()
            if why is True:
                self.log(f"{what or component} ready")
                return
            time.sleep(0.1)
        reason = f" ({why})" if isinstance(why, str) else ""
        raise ControlPlaneError(f"{what or component} not ready after {timeout:.0f}s{reason}; log {log}:\n{tail(log)}")


# ---------------------------------------------------------------- the API, just enough


class Api:
    """A minimal admin client for the few calls bring-up needs (no kubernetes package)."""

    def __init__(self, port: int, pki: Path) -> None:
        self.base = f"https://127.0.0.1:{port}"
        self.context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=self.context)
        )

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with self._opener.open(req, timeout=15) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        except (urllib.error.URLError, OSError) as err:
            raise ControlPlaneError(f"{method} {path}: {err}") from None
        try:
            return status, json.loads(raw) if raw else {}
        except ValueError:
            return status, {"raw": raw.decode(errors="replace")}

    def ok(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        status, doc = self.call(method, path, body, content_type)
        if status >= 300:
            raise ControlPlaneError(f"{method} {path}: HTTP {status}: {doc.get('message', doc)}")
        return doc

    def apply(self, path: str, doc: dict[str, Any]) -> Any:
        """Server-side apply (JSON is YAML, so the apply-patch+yaml type takes it)."""
        return self.ok("PATCH", f"{path}?fieldManager=dtr-controlplane&force=true", doc, "application/apply-patch+yaml")

    def create_if_missing(self, path: str, doc: dict[str, Any]) -> None:
        status, body = self.call("POST", path, doc)
        if status >= 300 and status != 409:
            raise ControlPlaneError(f"POST {path}: HTTP {status}: {body.get('message', body)}")


def read_crd_docs(path: Path) -> list[dict[str, Any]]:
    try:
        import yaml
    except ImportError:
        raise ControlPlaneError("PyYAML is needed to read CRD files (pip install pyyaml)") from None
    try:
        # The TFJob CRD is 8000 lines: libyaml reads it in 0.2 s, pure Python in 2.5 s.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        docs = [d for d in yaml.load_all(path.read_text(), Loader=loader) if d]
    except yaml.YAMLError as err:
        raise ControlPlaneError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from None
    for doc in docs:
        if doc.get("kind") != "CustomResourceDefinition":
            raise ControlPlaneError(
                f"{path}: only CustomResourceDefinitions belong in crds/, found {doc.get('kind')!r}"
            )
    return docs


def project_crd_files(crd_dir: Path) -> list[Path]:
    if not crd_dir.is_dir():
        return []
    return sorted(p for p in crd_dir.iterdir() if p.suffix in (".yaml", ".yml", ".json"))


# ---------------------------------------------------------------- the control plane


@dataclass
class State:
    ports: Ports
    pids: dict[str, int]
    binaries: dict[str, str]
    started_at: float
    ready_seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @staticmethod
    def from_json(text: str) -> State:
        raw = json.loads(text)
        return State(Ports(**raw["ports"]), raw["pids"], raw["binaries"], raw["started_at"],
                     raw.get("ready_seconds", 0.0))


class ControlPlane:
    """One local control plane living in `workdir` (kubeconfig, logs, pids, certs, etcd data).

    stop_at_exit=True (the test fixture) ties the processes to the calling thread's process: stopped
    at interpreter exit, and by the kernel if that process is killed. The CLI's `up` detaches them.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        cache: str | os.PathLike[str] | None = None,
        crd_dir: str | os.PathLike[str] = PROJECT_CRDS,
        build: bool = True,
        stop_at_exit: bool = True,
        log: Callable[[str], None] | None = None,
        node_ip: str | None = None,
        pod_network: str | None = None,
    ) -> None:
        """node_ip: serve a real node (devcluster/node.py) at that address. The training-operator
        then runs as a pod from its own manifests (the node applies them), not as a host process.
        pod_network: serve several nodes (devcluster/cluster.py), each given a subnet of it."""
        self.layout = Layout(Path(workdir).resolve())
        self.node_ip = node_ip
        self.pod_network = pod_network
        self.components = COMPONENTS if node_ip is None else COMPONENTS[:-1]
        self.cache = default_cache(cache)
        self.crd_dir = Path(crd_dir)
        self.build = build
        self.stop_at_exit = stop_at_exit
        self.log = log or (lambda msg: None)
        self._procs = Supervisor(self.layout.root, stop_at_exit, self.log)

    # -- public

    @property
    def dir(self) -> Path:
        return self.layout.root

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def bin(self) -> Path:
        return self.cache / "bin"

    def state(self) -> State | None:
        try:
            return State.from_json(self.layout.state.read_text())
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def status(self) -> dict[str, bool]:
        """component -> running (False for every component when it was never started)."""
        state = self.state()
        if state is None:
            return {c: False for c in self.components}
        return {c: c in state.pids and pid_runs(state.pids[c], state.binaries[c]) for c in self.components}

    def start(self) -> State:
        running = [c for c, up in self.status().items() if up]
        if running:
            raise ControlPlaneError(
                f"a control plane already runs in {self.dir} ({', '.join(running)}); run `down --dir {self.dir}` first"
            )
        self.stop()  # leftovers of a crashed run
        if self.build:
            self._build()
        t0 = time.monotonic()
        attempts = 3
        for attempt in range(1, attempts + 1):
            try:
                state = self._start_all()
                break
            except ControlPlaneError:
                # Free ports are picked before the components bind them; another process may win one.
                retry = attempt < attempts and self._port_was_taken()
                self.stop()
                if not retry:
                    raise
                self.log("a picked port was taken meanwhile; starting again on new ports")
            except BaseException:
                self.stop()
                raise
        state.ready_seconds = round(time.monotonic() - t0, 2)
        self._save(state)
        if self.stop_at_exit:
            atexit.register(self.stop)
        return state

    def stop(self) -> None:
        state = self.state()
        pids = dict(state.pids) if state else {}
        binaries = dict(state.binaries) if state else {}
        for name, proc in self._procs.children.items():
            pids.setdefault(name, proc.pid)
            binaries.setdefault(name, proc.args[0])  # type: ignore[index]
        for pid_file in self.layout.pids.glob("*") if self.layout.pids.is_dir() else []:
            with contextlib.suppress(ValueError, OSError):
                pids.setdefault(pid_file.name, int(pid_file.read_text().split()[0]))
                binaries.setdefault(pid_file.name, pid_file.read_text().split(maxsplit=1)[1].strip())
        for component in reversed(COMPONENTS):
            if component in pids:
                terminate(pids[component], binaries.get(component, ""))
        for proc in self._procs.children.values():
            with contextlib.suppress(OSError):
                proc.wait(timeout=1)
        self._procs.children.clear()
        with contextlib.suppress(FileNotFoundError):
            self.layout.state.unlink()
        if self.layout.pids.is_dir():
            shutil.rmtree(self.layout.pids, ignore_errors=True)

    # -- steps

    def _build(self) -> None:
        self.log("build.sh (cached when built)")
        run_build(BUILD_SH, self.cache)

    def _binary(self, component: str) -> Path:
        return built_binary(self.bin, component, BUILD_SH)

    def _prepare_dir(self) -> None:
        for sub in ("etcd", "pki", "apiserver", "controller-manager", "logs", "pids"):
            shutil.rmtree(self.layout.root / sub, ignore_errors=True)
        for sub in ("logs", "pids", "apiserver", "controller-manager"):
            (self.layout.root / sub).mkdir(parents=True)
        self.layout.etcd_data.mkdir(mode=0o700)

    def _port_was_taken(self) -> bool:
        return any("address already in use" in tail(log, 40).lower() for log in self.layout.logs.glob("*.log"))

    def _start_all(self) -> State:
        binaries = {c: self._binary(c) for c in self.components}
        tfjob_crd = self.cache / "crds" / "kubeflow.org_tfjobs.yaml"
        if not tfjob_crd.exists():
            raise ControlPlaneError(f"{tfjob_crd} is missing; run `bash devcluster/build.sh`")
        project_docs = [doc for path in project_crd_files(self.crd_dir) for doc in read_crd_docs(path)]
        self._prepare_dir()
        ports = Ports(*free_ports(7))
        layout, pki = self.layout, self.layout.pki
        state = State(ports, {}, {c: str(b) for c, b in binaries.items()}, time.time())

        self._procs.spawn("etcd", etcd_args(binaries["etcd"], layout, ports))
        # etcd needs no certificates: make them while it starts.
        make_cluster_pki(pki, self.node_ip)
        hook_pki = webhook_pki()
        install_webhook_certs(hook_pki)
        self._procs.wait("etcd", lambda: http_get(f"http://127.0.0.1:{ports.etcd}/health")[1].find(b'"true"') >= 0)

        self._procs.spawn("kube-apiserver", apiserver_args(binaries["kube-apiserver"], layout, ports, self.node_ip,
                                                             self.pod_network))
        api = Api(ports.apiserver, pki)
        self._procs.wait("kube-apiserver", lambda: http_get(f"{api.base}/readyz", api.context)[0] == 200)
        server = f"https://127.0.0.1:{ports.apiserver}"
        kubeconfig = kubeconfig_doc(
            server, (pki / "ca.crt").read_bytes(), (pki / "admin.crt").read_bytes(), (pki / "admin.key").read_bytes()
        )
        layout.kubeconfig.write_text(json.dumps(kubeconfig, indent=2) + "\n")
        layout.kubeconfig.chmod(0o600)

        self._procs.spawn(
            "kube-controller-manager",
            controller_manager_args(binaries["kube-controller-manager"], layout, ports, node=self.node_ip is not None,
                                    pod_network=self.pod_network),
        )
        if self.node_ip is not None:
            return self._finish_without_training_operator(api, state, project_docs, ports)

        # What the training-operator needs before it starts: its CRD, its namespace, the Secret its
        # cert rotator reads (pre-seeded with the shared pair), the webhook configuration.
        crd_names = [self._apply_crd(api, doc) for doc in read_crd_docs(tfjob_crd)]
        # The project's CRDs do not depend on the operator; they get established meanwhile.
        project_names = [self._apply_crd(api, doc) for doc in project_docs]
        operator_namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}}
        api.create_if_missing("/api/v1/namespaces", operator_namespace)
        api.create_if_missing(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets", webhook_secret(hook_pki))
        api.apply(
            f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{WEBHOOK_CONFIG}",
            tfjob_webhook_doc(ports.operator_webhook, (hook_pki / "ca.crt").read_bytes()),
        )
        self._wait_established(api, crd_names)

        env = training_operator_env(layout)
        self._procs.spawn("training-operator", training_operator_args(binaries["training-operator"], ports), env)

        self._wait_established(api, project_names)

        self._procs.wait("kube-controller-manager", lambda: self._controllers_ready(api, ports))
        operator_ready = f"http://127.0.0.1:{ports.operator_probe}/readyz"
        self._procs.wait("training-operator", lambda: http_get(operator_ready)[0] == 200)
        state.pids = {c: p.pid for c, p in self._procs.children.items()}
        return state

    def _finish_without_training_operator(
        self, api: Api, state: State, project_docs: list[dict[str, Any]], ports: Ports
    ) -> State:
        self._wait_established(api, [self._apply_crd(api, doc) for doc in project_docs])
        self._procs.wait("kube-controller-manager", lambda: self._controllers_ready(api, ports))
        state.pids = {c: p.pid for c, p in self._procs.children.items()}
        return state

    def _controllers_ready(self, api: Api, ports: Ports) -> bool | str:
        if http_get(f"https://127.0.0.1:{ports.controller_manager}/healthz", _insecure())[0] != 200:
            return "healthz not ok"
        # The serviceaccount controller at work: every namespace gets `default`.
        if api.call("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] != 200:
            return "no default ServiceAccount yet"
        return True

    def _apply_crd(self, api: Api, doc: dict[str, Any]) -> str:
        name = doc.get("metadata", {}).get("name")
        if not name:
            raise ControlPlaneError("a CRD without metadata.name")
        api.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", doc)
        self.log(f"CRD {name} applied")
        return name

    def _wait_established(self, api: Api, names: Sequence[str]) -> None:
        for name in names:

            def established(name: str = name) -> bool | str:
                status, crd = api.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                if status != 200:
                    return f"HTTP {status}"
                ok, why = crd_established(crd)
                if why.startswith("names not accepted"):
                    raise ControlPlaneError(f"CRD {name}: {why}")
                return ok or why

            self._procs.wait("kube-apiserver", established, timeout=60, what=f"CRD {name} (Established)")

    def _save(self, state: State) -> None:
        tmp = self.layout.state.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.layout.state)


def _insecure() -> ssl.SSLContext:
    """For a loopback health probe of a self-signed component endpoint only."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


# ---------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.controlplane", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--dir", default=str(DEFAULT_DIR), help=f"working directory (default {DEFAULT_DIR})")
    parser.add_argument("--crds", default=str(PROJECT_CRDS),
                        help="directory of CRDs applied after the training-operator")
    args = parser.parse_args(argv)

    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"[controlplane {time.monotonic() - t0:5.1f}s] {msg}", file=sys.stderr)

    plane = ControlPlane(args.dir, crd_dir=args.crds, stop_at_exit=False, log=say)
    try:
        if args.command == "up":
            state = plane.start()
            say(f"up in {state.ready_seconds}s; logs in {plane.layout.logs}")
            print(f"export KUBECONFIG={plane.kubeconfig}")
            return 0
        if args.command == "down":
            plane.stop()
            say(f"down ({plane.dir})")
            return 0
        status = plane.status()
        state = plane.state()
        for component, up in status.items():
            pid = state.pids.get(component, "-") if state else "-"
            print(f"{component:24} {'running' if up else 'stopped':8} pid {pid}")
        if state:
            print(f"apiserver https://127.0.0.1:{state.ports.apiserver}  KUBECONFIG={plane.kubeconfig}")
        return 0 if all(status.values()) else 1
    except ControlPlaneError as err:
        say(f"error: {err}")
        return 1
    except KeyboardInterrupt:
        plane.stop()
        return 130


if __name__ == "__main__":
    sys.exit(main())
