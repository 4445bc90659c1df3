"""A real S3 server for the tests, `dtr run` and the dev cluster: SeaweedFS's `weed mini`, built from source.

`weed` comes from `devcluster/build_node.sh seaweedfs` (`make s3-build`; docs/cluster.md#an-s3-server). One
`weed mini` process holds a master, a volume server, a filer and the S3 gateway, and creates the bucket
itself before it reports ready (`-bucket`): on this machine (`up`, or `S3Server` in a test) and as a pod on
the real node (`manifests`, applied by node.py). Every port is chosen here, and every part but S3's listens
on loopback only; no WebDAV, no admin UI, no Iceberg or Lance catalogue, no telemetry (upstream's default
reports to telemetry.seaweedfs.com).

Each start makes a new access key and secret key, written into DIR/s3.json (SeaweedFS's identities file) and
DIR/s3.env (for other tools: `set -a; . DIR/s3.env; set +a`). With --tls-ca-dir (a directory with ca.crt and
ca.key, such as a control plane's DIR/pki) S3 is served over HTTPS with a certificate that CA signs.

    python -m devcluster.s3 up --dir DIR [--bucket NAME] [--tls-ca-dir PKI]
    python -m devcluster.s3 down --dir DIR [--purge]

Python 3.11 standard library.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import string
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from devcluster import controlplane as cp

HERE = Path(__file__).resolve().parent
BUILD_NODE_SH = HERE / "build_node.sh"
DEFAULT_DIR = cp.REPO / ".dtr" / "s3"
BINARY = "weed"
DEFAULT_BUCKET = "dtr"
# SeaweedFS ignores the region; clients sign with one, and us-east-1 is what they assume without one.
REGION = "us-east-1"
IDENTITY = "dtr"
# What the one identity may do: everything, in every bucket (SeaweedFS's action names).
ACTIONS = ("Admin", "Read", "List", "Tagging", "Write")
# Letters and digits only: the keys go into a shell-sourced env file and a YAML Secret unquoted.
KEY_ALPHABET = string.ascii_letters + string.digits
ACCESS_KEY_LENGTH, SECRET_KEY_LENGTH = 20, 40  # AWS's own lengths

# The pod on the node (manifests): its namespace, every object's name, the S3 port.
NAMESPACE = "dtr-s3"
NAME = "dtr-s3"
POD_S3_PORT = 8333  # SeaweedFS's default
POD_UID = 65532  # distroless's nonroot, as the node's other images (build_node.sh)
CONFIG_HASH = "distml.dev/s3-config-sha256"  # the pod template's annotation: its identities file's hash

START_TIMEOUT = 60.0  # a cold start here: about 4 s
STOP_TIMEOUT = 15.0  # mini stops in about 3 s (its volume server waits 1 s)


class S3Error(cp.ControlPlaneError):
    """A failure with a one-line explanation for a person."""


# ---------------------------------------------------------------- pure parts


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str


def new_credentials(choice: Callable[[str], str] = secrets.choice) -> Credentials:
    def key(length: int) -> str:
        return "".join(choice(KEY_ALPHABET) for _ in range(length))

    return Credentials(key(ACCESS_KEY_LENGTH), key(SECRET_KEY_LENGTH))


def s3_config(creds: Credentials) -> dict[str, Any]:
    """SeaweedFS's -s3.config: one identity with these keys and every action; no anonymous identity, so an
    unsigned request is refused."""
    return {
        "identities": [
            {
                "name": IDENTITY,
                "credentials": [{"accessKey": creds.access_key, "secretKey": creds.secret_key}],
                "actions": list(ACTIONS),
            }
        ]
    }


def valid_bucket(name: str) -> bool:
    """S3's rule for a bucket name as SeaweedFS checks it: 3-63 lower-case letters, digits, dots and hyphens,
    a letter or digit at each end."""
    allowed = set(string.ascii_lowercase + string.digits + ".-")
    return 3 <= len(name) <= 63 and set(name) <= allowed and name[0].isalnum() and name[-1].isalnum()


@dataclass(frozen=True)
class Ports:
    """Every port `weed mini` listens on (each gRPC port given too: upstream's default, port + 10000, would
    land in Linux's ephemeral range)."""

    s3: int
    s3_grpc: int
    master: int
    master_grpc: int
    volume: int
    volume_grpc: int
    filer: int
    filer_grpc: int
    admin: int
    admin_grpc: int


# Upstream's defaults, for the pod (a network namespace of its own); only S3's is reachable from outside it.
POD_PORTS = Ports(POD_S3_PORT, 18333, 9333, 19333, 9340, 19340, 8888, 18888, 12535, 22535)


@dataclass(frozen=True)
class Tls:
    cert: Path
    key: Path
    ca: Path


def mini_args(binary: str | Path, data: str | Path, config: str | Path, ports: Ports, bucket: str,
              bind: str = "127.0.0.1", tls: Tls | None = None) -> list[str]:  # fmt: skip
    """`weed mini` as it runs here and in the pod. bind: every listener's address (the pod: all interfaces,
    its NetworkPolicy lets in only S3's port)."""
    args = [
        str(binary),
        "-logtostderr",  # everything to the caller's log (weed.log, the pod's log), no files in /tmp
        "mini",
        f"-dir={data}",
        "-ip=127.0.0.1",  # how the parts name each other: one process, so loopback
        f"-ip.bind={bind}",
        f"-s3.config={config}",
        f"-bucket={bucket}",
        "-master.telemetry=false",  # upstream reports to telemetry.seaweedfs.com by default: nothing leaves here
        "-webdav=false",
        "-admin.ui=false",
        "-admin.port.legacy=0",  # a second, fixed admin port (23646) otherwise
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.port={ports.s3}",
        f"-s3.port.grpc={ports.s3_grpc}",
        f"-master.port={ports.master}",
        f"-master.port.grpc={ports.master_grpc}",
        f"-volume.port={ports.volume}",
        f"-volume.port.grpc={ports.volume_grpc}",
        f"-filer.port={ports.filer}",
        f"-filer.port.grpc={ports.filer_grpc}",
        f"-admin.port={ports.admin}",
        f"-admin.port.grpc={ports.admin_grpc}",
    ]
    if tls is not None:  # then the S3 port serves HTTPS only
        args += [f"-s3.cert.file={tls.cert}", f"-s3.key.file={tls.key}"]
    return args


def endpoint(host: str, port: int, tls: bool) -> str:
    return f"{'https' if tls else 'http'}://{host}:{port}"


def env_file(url: str, creds: Credentials, bucket: str, ca: Path | None = None) -> str:
    """KEY=value lines for `set -a; . FILE`, `docker --env-file` and systemd alike (no value needs quoting).
    AWS_ENDPOINT_URL and AWS_CA_BUNDLE are read by boto3 and the AWS CLI themselves; S3_ENDPOINT and
    S3_BUCKET name the same for tools that want them spelled out."""
    values = {
        "AWS_ACCESS_KEY_ID": creds.access_key,
        "AWS_SECRET_ACCESS_KEY": creds.secret_key,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL": url,
        "S3_ENDPOINT": url,
        "S3_BUCKET": bucket,
    }
    if ca is not None:
        values["AWS_CA_BUNDLE"] = str(ca)
    return "".join(f"{k}={v}\n" for k, v in values.items())


@dataclass(frozen=True)
class Layout:
    """Where one server's files live under its directory."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def config(self) -> Path:
        return self.root / "s3.json"

    @property
    def env(self) -> Path:
        return self.root / "s3.env"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def log(self) -> Path:
        return self.root / "weed.log"

    @property
    def tls(self) -> Path:
        return self.root / "tls"


@dataclass(frozen=True)
class State:
    """What `down` and other tools need of a running server (DIR/state.json)."""

    pid: int
    binary: str
    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    ca: str | None
    ports: Ports

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @staticmethod
    def from_json(text: str) -> State:
        raw = json.loads(text)
        return State(**{**{f.name: raw[f.name] for f in fields(State)}, "ports": Ports(**raw["ports"])})


def manifests(creds: Credentials, bucket: str, image: str) -> list[dict[str, Any]]:
    """The S3 server as a pod on the node: namespace, Secret, Deployment, Service, NetworkPolicy.

    Data in an emptyDir: the dev cluster's etcd, and with it these keys, starts empty at every `up`, so data
    kept longer would belong to keys nobody has; the kubelet makes an emptyDir writable by the pod's fsGroup
    (a hostPath stays root's) and Pod Security `restricted` admits it (not a hostPath). It outlives a
    container's restart, not the pod. The bucket is `weed mini -bucket`'s: made before the server reports
    ready, at each start, so a new pod has it too (a Job would need the filer's unauthenticated gRPC reachable
    from another pod).
    """
    labels = {"app.kubernetes.io/name": NAME}
    secret = {"AWS_ACCESS_KEY_ID": creds.access_key, "AWS_SECRET_ACCESS_KEY": creds.secret_key, "S3_BUCKET": bucket,
              "s3.json": json.dumps(s3_config(creds))}
    config_hash = hashlib.sha256(secret["s3.json"].encode()).hexdigest()
    meta = {"name": NAME, "namespace": NAMESPACE, "labels": labels}
    data_dir, config_dir = "/data", "/etc/dtr-s3"
    container = {
        "name": "s3",
        "image": image,
        "imagePullPolicy": "Never",  # imported with ctr, never pulled
        "args": mini_args("/weed", data_dir, f"{config_dir}/s3.json", POD_PORTS, bucket, bind="0.0.0.0")[1:],
        "ports": [{"name": "s3", "containerPort": POD_PORTS.s3}],
        # /healthz answers without a signature once the S3 gateway runs, after the bucket exists.
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "s3"}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "50m", "memory": "192Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": data_dir},
            {"name": "tmp", "mountPath": "/tmp"},  # the parts' unix sockets
            {"name": "config", "mountPath": config_dir, "readOnly": True},
        ],
    }
    pod_spec = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": POD_UID,
            "runAsGroup": POD_UID,
            "fsGroup": POD_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "data", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
            {"name": "config", "secret": {"secretName": NAME, "items": [{"key": "s3.json", "path": "s3.json"}]}},
        ],
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
        # The keys for clients (envFrom), the identities file for the server; `data`, what the apiserver stores
        # (stringData is a write-only alias of it), so what is applied is what is read back.
        {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque",
         "data": {k: base64.b64encode(v.encode()).decode() for k, v in secret.items()}},
        # weed reads its identities once, at start: new keys (a second install) change the template, so a new pod
        # starts with them (Recreate: the data's emptyDir goes with the old one).
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels, "annotations": {CONFIG_HASH: config_hash}},
                               "spec": pod_spec}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"selector": labels, "ports": [{"name": "s3", "port": POD_S3_PORT, "targetPort": "s3"}]}},
        # Master, volume server and filer answer without credentials: only S3's port may be reached.
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta,
         "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"],
                  "ingress": [{"ports": [{"port": POD_S3_PORT, "protocol": "TCP"}]}]}},
    ]  # fmt: skip


def service_endpoint() -> str:
    """The pod's S3 endpoint as other pods reach it."""
    return endpoint(f"{NAME}.{NAMESPACE}.svc.cluster.local", POD_S3_PORT, tls=False)


# ---------------------------------------------------------------- host I/O


def binary(cache: Path | None = None) -> Path:
    """The built `weed` (build_node.sh seaweedfs), or S3Error saying how to build it."""
    path = cp.default_cache(cache) / "bin" / BINARY
    if not os.access(path, os.X_OK):
        raise S3Error(f"{path} is missing; run `make s3-build` (bash devcluster/build_node.sh seaweedfs)")
    return path


def make_tls(layout: Layout, ca_dir: Path) -> Tls:
    """A serving certificate for 127.0.0.1 and localhost, signed by ca_dir's ca.crt and ca.key."""
    ca = (ca_dir / "ca").resolve()
    if not ca.with_suffix(".crt").is_file() or not ca.with_suffix(".key").is_file():
        raise S3Error(f"{ca_dir} has no ca.crt and ca.key")
    shutil.rmtree(layout.tls, ignore_errors=True)
    layout.tls.mkdir(mode=0o700, parents=True)
    cp.make_leaf(layout.tls, str(ca), "s3", "/CN=dtr-s3", "serverAuth", ["DNS:localhost", "IP:127.0.0.1"])
    return Tls(layout.tls / "s3.crt", layout.tls / "s3.key", ca.with_suffix(".crt"))


def write_private(path: Path, text: str) -> None:
    """A file only its owner reads (it holds a secret key), written whole or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(text)
    tmp.replace(path)


def answers(url: str, ca: Path | None) -> bool:
    """The S3 gateway's /healthz says 200 (no signature needed)."""
    context = None
    if ca is not None:
        import ssl  # only for HTTPS

        context = ssl.create_default_context(cafile=str(ca))
    return cp.http_get(f"{url}/healthz", context, timeout=2)[0] == 200


def has_bucket(ports: Ports, bucket: str) -> bool:
    """The filer (loopback, unauthenticated) has the bucket's directory: mini made it."""
    status, _ = cp.http_get(f"http://127.0.0.1:{ports.filer}/buckets/{bucket}/?limit=1")
    return status == 200


def stop_group(pid: int, binary_path: str, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM the server's process group, SIGKILL it after `timeout`; only while pid still runs weed."""
    if not cp.pid_runs(pid, binary_path):
        cp.reap(pid)
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)  # its own session (start_new_session): the group is the pid
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            cp.reap(pid)
            if not cp.pid_alive(pid):
                return
            time.sleep(0.05)


class S3Server:
    """One `weed mini` with its files in `workdir`: `start()` returns once the bucket exists and S3 answers.

    stop_at_exit=True (tests) ties the process to the caller: stopped at interpreter exit, and killed by the
    kernel if the caller dies. The CLI's `up` detaches it.
    """

    def __init__(self, workdir: str | os.PathLike[str], bucket: str = DEFAULT_BUCKET, tls_ca_dir: Path | None = None,
                 cache: Path | None = None, stop_at_exit: bool = True,
                 log: Callable[[str], None] | None = None) -> None:  # fmt: skip
        if not valid_bucket(bucket):
            raise S3Error(f"{bucket!r} is no S3 bucket name (3-63 of a-z, 0-9, '.', '-')")
        self.layout = Layout(Path(workdir).resolve())
        self.bucket = bucket
        self.tls_ca_dir = tls_ca_dir
        self.cache = cache
        self.stop_at_exit = stop_at_exit
        self.log = log or (lambda msg: None)
        self._proc: subprocess.Popen[bytes] | None = None

    def state(self) -> State | None:
        try:
            return State.from_json(self.layout.state.read_text())
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def running(self) -> bool:
        state = self.state()
        return state is not None and cp.pid_runs(state.pid, state.binary)

    def start(self) -> State:
        if self.running():
            raise S3Error(f"an S3 server already runs in {self.layout.root}; run `down --dir {self.layout.root}`")
        weed = binary(self.cache)
        self.stop()
        self.layout.data.mkdir(parents=True, exist_ok=True)
        tls = make_tls(self.layout, self.tls_ca_dir) if self.tls_ca_dir is not None else None
        creds = new_credentials()
        write_private(self.layout.config, json.dumps(s3_config(creds), indent=2) + "\n")
        t0 = time.monotonic()
        for attempt in range(1, 4):
            try:
                state = self._start(weed, creds, tls)
                break
            except S3Error:
                # Ports are picked before weed binds them; another process may take one meanwhile.
                taken = "not available" in cp.tail(self.layout.log, 40)
                self.stop()
                if attempt == 3 or not taken:
                    raise
                self.log("a picked port was taken meanwhile; starting again on new ports")
        write_private(self.layout.state, state.to_json())
        write_private(self.layout.env, env_file(state.endpoint, creds, self.bucket, tls.ca if tls else None))
        self.log(f"S3 at {state.endpoint}, bucket {self.bucket}, ready in {time.monotonic() - t0:.1f} s")
        if self.stop_at_exit:
            atexit.register(self.stop)
        return state

    def _start(self, weed: Path, creds: Credentials, tls: Tls | None) -> State:
        ports = Ports(*cp.free_ports(len(fields(Ports))))
        url = endpoint("127.0.0.1", ports.s3, tls is not None)
        argv = mini_args(weed, self.layout.data, self.layout.config, ports, self.bucket, tls=tls)
        with open(self.layout.log, "ab") as log:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.layout.root,
                start_new_session=True,  # its own process group, which stop() signals; a Ctrl-C elsewhere misses it
                preexec_fn=cp.die_with_parent if self.stop_at_exit else None,
            )  # fmt: skip
        state = State(self._proc.pid, str(weed), url, creds.access_key, creds.secret_key, self.bucket,
                      str(tls.ca) if tls else None, ports)  # fmt: skip
        # Written before it is ready: a `down` meanwhile (or after a failed start) finds the process.
        write_private(self.layout.state, state.to_json())
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise S3Error(f"weed exited with code {self._proc.returncode}; log {self.layout.log}:\n"
                              f"{cp.tail(self.layout.log)}")  # fmt: skip
            if answers(url, tls.ca if tls else None) and has_bucket(ports, self.bucket):
                return state
            time.sleep(0.2)
        raise S3Error(f"S3 not ready after {START_TIMEOUT:.0f} s; log {self.layout.log}:\n{cp.tail(self.layout.log)}")

    def stop(self) -> None:
        """Stop the server of this directory (this object's or a detached one's); its data stays."""
        state = self.state()
        if state is not None:
            stop_group(state.pid, state.binary)
        if self._proc is not None:
            stop_group(self._proc.pid, str(self._proc.args[0]))  # type: ignore[index]
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=1)
            self._proc = None
        for path in (self.layout.state, self.layout.env):
            path.unlink(missing_ok=True)


# ---------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.s3", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down"))
    parser.add_argument("--dir", default=str(DEFAULT_DIR), help=f"working directory (default {DEFAULT_DIR})")
    parser.add_argument("--bucket", default=DEFAULT_BUCKET, help=f"created at start (default {DEFAULT_BUCKET})")
    parser.add_argument("--tls-ca-dir", type=Path,
                        help="serve HTTPS with a certificate signed by this directory's ca.crt and ca.key")
    parser.add_argument("--purge", action="store_true", help="down: then remove the data and the TLS files")
    args = parser.parse_args(argv)
    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"[s3 {time.monotonic() - t0:5.1f}s] {msg}", file=sys.stderr)

    server = S3Server(args.dir, args.bucket, args.tls_ca_dir, stop_at_exit=False, log=say)
    try:
        if args.command == "up":
            server.start()
            say(f"logs in {server.layout.log}")
            print(f"set -a; . {server.layout.env}; set +a")
            return 0
        server.stop()
        if args.purge:
            for path in (server.layout.data, server.layout.tls):
                shutil.rmtree(path, ignore_errors=True)
        say("down")
        return 0
    except cp.ControlPlaneError as err:
        say(f"error: {err}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
