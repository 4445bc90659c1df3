"""Helpers for the deploy tests (test_deploy*.py): the rendered manifests, installing one mode,
replaying a Dockerfile's build stage without Docker, running the operator as the pod would, and
driving one run to Succeeded against the local control plane.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import re
import shlex
import shutil
import socket
import string
import subprocess
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import yaml

from devcluster.controlplane import stop_child
from support.cluster import KUBECTL, Cluster
from support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
SA_NAMESPACE = "dtr-system"
SA_NAME = "dtr-operator"
SA_USER = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"
SERVED_NAMESPACE = "dtr-runs"  # deploy/namespaced/
# The API's refusal names the user; in a JSON log line its quotes are escaped.
RBAC_DENIAL = re.compile(rf'User \\*"{re.escape(SA_USER)}\\*" cannot')


@dataclass(frozen=True)
class Mode:
    name: str
    kustomization: Path
    served_namespace: str | None  # None = all namespaces


CLUSTER_MODE = Mode("cluster", REPO / "deploy", None)
NAMESPACED_MODE = Mode("namespaced", REPO / "deploy" / "namespaced", SERVED_NAMESPACE)
MODES = (CLUSTER_MODE, NAMESPACED_MODE)


# ---------------------------------------------------------------- manifests


def render(kustomization: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIR` as a list of objects, in kustomize's output order."""
    proc = subprocess.run(
        [KUBECTL, "kustomize", str(kustomization)], capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, f"kubectl kustomize {kustomization} failed: {proc.stderr.strip()}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def only(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''} in the rendered manifests, found {len(found)}"
    return found[0]


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = only(docs, "Deployment", "dtr-operator")["spec"]["template"]["spec"]["containers"]
    return container


def as_yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def rbac_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a mode's teardown removes: everything but the CRD and the Namespaces."""
    return [d for d in docs if d["kind"] not in ("CustomResourceDefinition", "Namespace")]


def can_i(cluster: Cluster, verb: str, resource: str, namespace: str | None, subresource: str = "") -> bool:
    """`kubectl auth can-i ... --as=<the operator's ServiceAccount>` (None = all namespaces)."""
    where = ["--all-namespaces"] if namespace is None else ["-n", namespace]
    extra = [f"--subresource={subresource}"] if subresource else []
    proc = cluster.kubectl("auth", "can-i", verb, resource, *where, *extra, f"--as={SA_USER}", check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl auth can-i {verb} {resource}: {proc.stdout}{proc.stderr}"
    return answer == "yes"


@contextmanager
def installed_mode(cluster: Cluster, mode: Mode) -> Iterator[Mode]:
    """`kubectl apply -k` of one mode, for real; its RBAC and Deployment are removed afterwards
    (the CRD and the namespaces stay: other tests of the session use the CRD)."""
    docs = render(mode.kustomization)
    cluster.kubectl("apply", "-k", str(mode.kustomization), timeout=120)
    for quota in [d for d in docs if d["kind"] == "ResourceQuota"]:
        settle_quota(cluster, quota)
    # The RBAC authorizer's caches follow the bindings within a moment.
    wait_for(lambda: can_i(cluster, "list", "tfjobs.kubeflow.org", mode.served_namespace or "default"),
             f"the {mode.name} RBAC to take effect")  # fmt: skip
    try:
        yield mode
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=as_yaml(rbac_objects(docs)))


RUNS_COUNTED = "count/disttrainingruns.distml.dev"


def settle_quota(cluster: Cluster, quota: dict[str, Any], timeout: float = 120) -> None:
    """A run quota counted before any run is made, as deploy/install.sh's settle_run_quotas does it: made again every
    15 s until Kubernetes' quota controller, which discovered the CRD after the quota was made, counts it (else it
    would at its next full resync, 5 min, and refuse every run until then)."""
    meta = quota["metadata"]
    tries = 0

    def counted() -> bool:
        nonlocal tries
        tries += 1
        got = cluster.kubectl_json("get", "resourcequota", meta["name"], "-n", meta["namespace"])
        used = (got.get("status") or {}).get("used") or {}
        if RUNS_COUNTED in used and all(k in used for k in quota["spec"]["hard"]):  # runs and sweeps alike
            return True
        if tries % 15 == 0:
            cluster.kubectl("replace", "--force", "-f", "-", input=as_yaml([quota]))
        return False

    wait_for(counted, f"ResourceQuota {meta['namespace']}/{meta['name']} to count runs", timeout=timeout, interval=1)


def service_account_cluster(cluster: Cluster, where: Path) -> Cluster:
    """The cluster as the operator's ServiceAccount sees it: a token, no admin credentials."""
    token = cluster.kubectl("create", "token", SA_NAME, "-n", SA_NAMESPACE, "--duration=30m").stdout.strip()
    as_operator = cluster.as_token(token, where)
    whoami = json.loads(as_operator.kubectl("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == SA_USER
    return as_operator


# ---------------------------------------------------------------- Dockerfiles


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    args: str


@dataclass(frozen=True)
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[str]:
        return [i.args for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages of a Dockerfile: continuation lines joined, comments and blank lines dropped."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):  # also a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: list[Stage] = []
    global_args: dict[str, str] = {}  # ARGs before the first FROM: only FROM lines may use them
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG" and not stages:
            name, _, default = args.strip().partition("=")
            global_args[name] = string.Template(default).safe_substitute(global_args)
        elif keyword == "FROM":
            words = string.Template(args).safe_substitute(global_args).split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name, []))
        else:
            assert stages, f"instruction before FROM: {line}"
            stages[-1].instructions.append(Instruction(keyword, args.strip()))
    return stages


def env_pairs(args: str) -> dict[str, str]:
    """ENV k=v k2=v2 (the form these Dockerfiles use)."""
    return dict(word.split("=", 1) for word in shlex.split(args))


def image_python() -> Path:
    """The base image's `python` stand-in: the system's python3.11, which any user can run (the
    pod runs as uid 1000), unlike a per-user install such as pyenv's under /root."""
    system = Path("/usr/bin/python3.11")
    if system.exists():
        return system
    found = shutil.which("python3.11")
    assert found, "python3.11 is needed to replay Dockerfile.operator"
    return Path(found)


def in_opt(root: Path, command: list[str]) -> list[str]:
    """`command` in a private mount namespace whose /opt is root/opt, so that paths the image uses
    (/opt/dtr, and the shebangs pip writes there) are the same here as in the image."""
    script = 'mount --bind "$0" /opt && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(root / "opt"), *command]


def replay_build_stage(dockerfile: Path, root: Path) -> Path:
    """Runs the first stage's ENV, WORKDIR, COPY and RUN lines on this machine, /opt mapped to
    root/opt. Returns the directory that holds the image's /opt."""
    build = parse_dockerfile(dockerfile.read_text())[0]
    (root / "opt").mkdir(parents=True, exist_ok=True)
    # `python` as in the base image; a wrapper, not a symlink, so a venv records the real interpreter.
    shim = root / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "python").write_text(f'#!/bin/sh\nexec {image_python()} "$@"\n')
    (shim / "python").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "PIP_"))}
    env["PATH"] = f"{shim}:{env['PATH']}"
    cwd = root / "context"  # the image's "/" for WORKDIR and COPY; RUN commands use absolute /opt
    cwd.mkdir(parents=True, exist_ok=True)

    def here(path: str) -> Path:
        return root / "context" / path.lstrip("/") if path.startswith("/") else cwd / path

    for ins in build.instructions:
        if ins.keyword == "ENV":
            env.update(env_pairs(ins.args))
            # The image build must not keep pip's cache; a test run may reuse it (same files).
            env.pop("PIP_NO_CACHE_DIR", None)
        elif ins.keyword == "WORKDIR":
            cwd = here(ins.args)
            cwd.mkdir(parents=True, exist_ok=True)
        elif ins.keyword == "COPY":
            *sources, dest = shlex.split(ins.args)
            into_dir = dest.endswith("/")
            target = here(dest)
            (target if into_dir else target.parent).mkdir(parents=True, exist_ok=True)
            for source in sources:
                src = REPO / source
                if src.is_dir():  # as Docker does: a directory's contents, not the directory itself
                    shutil.copytree(src, target, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
                else:
                    shutil.copy2(src, target / src.name if into_dir else target)
        elif ins.keyword == "RUN":
            proc = subprocess.run(in_opt(root, ["bash", "-c", ins.args]), cwd=cwd, env=env,
                                  capture_output=True, text=True, check=False, timeout=900)  # fmt: skip
            assert proc.returncode == 0, f"RUN {ins.args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        else:
            raise AssertionError(f"{dockerfile.name} build stage: no replay for {ins.keyword} {ins.args}")
    return root / "opt"


BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # python:3.11-slim's PATH
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where the kubelet puts a pod's token


def image_command(dockerfile: Path, container: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """The final stage's ENTRYPOINT + the container's args, and the ENV the image sets + the container's env."""
    final = parse_dockerfile(dockerfile.read_text())[-1]
    env = {"PATH": BASE_PATH}
    for args in final.all("ENV"):
        env.update({k: v.replace("$PATH", env["PATH"]) for k, v in env_pairs(args).items()})
    env.update({e["name"]: e["value"] for e in container.get("env", [])})
    (entrypoint,) = final.all("ENTRYPOINT")
    return [*json.loads(entrypoint), *container.get("args", [])], env


def apiserver_address(cluster: Cluster) -> str:
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    return admin["clusters"][0]["cluster"]["server"].removeprefix("https://")


def write_pod_files(cluster: Cluster, where: Path, service_ip: str) -> Path:
    """What the kubelet gives a pod: its service-account volume (token, ca.crt, namespace) for the
    operator's ServiceAccount, and name resolution of kubernetes.default.svc (cluster DNS) to the
    `kubernetes` Service's address (here: the stand-in's; see kubernetes_service)."""
    token = cluster.kubectl("create", "token", SA_NAME, "-n", SA_NAMESPACE, "--duration=30m").stdout.strip()
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    where.mkdir(parents=True, exist_ok=True)
    (where / "token").write_text(token)
    (where / "ca.crt").write_bytes(base64.b64decode(admin["clusters"][0]["cluster"]["certificate-authority-data"]))
    (where / "namespace").write_text(SA_NAMESPACE)
    names = "kubernetes kubernetes.default kubernetes.default.svc kubernetes.default.svc.cluster.local"
    (where / "hosts").write_text(f"127.0.0.1 localhost\n{service_ip} {names}\n")
    for f in where.iterdir():
        f.chmod(0o644)
    return where


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@contextmanager
def kubernetes_service(apiserver: str) -> Iterator[str]:
    """A stand-in for the `kubernetes` Service a pod reaches the API server through: port 443 on an
    address of its own in 127.0.0.0/8, relayed to `apiserver` (host:port). Yields that address."""
    host, _, port = apiserver.rpartition(":")
    listener = socket.socket()
    for _ in range(20):
        address = f"127.{random.randrange(1, 255)}.{random.randrange(0, 255)}.{random.randrange(1, 255)}"
        try:
            listener.bind((address, 443))
            break
        except OSError:
            continue
    else:
        raise AssertionError("no free 127.x.y.z:443 for the kubernetes Service stand-in")
    listener.listen(64)
    open_sockets: list[socket.socket] = [listener]

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection((host, int(port)), timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            open_sockets.extend((client, upstream))
            threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield address
    finally:
        for sock in open_sockets:
            with contextlib.suppress(OSError):
                sock.close()


def as_the_pod(opt: Path, secrets: Path, pod_spec: dict[str, Any], argv: list[str], env: dict[str, str]) -> list[str]:
    """argv run the way the kubelet would run the operator container of `pod_spec`, in a private mount
    namespace: the image's /opt, the service-account token at its usual path, the root filesystem
    read-only, a fresh tmpfs for each emptyDir mount, the pod's user and group, no capabilities at
    all and no privilege escalation (no_new_privs)."""
    (container,) = pod_spec["containers"]
    security = {**pod_spec.get("securityContext", {}), **container.get("securityContext", {})}
    assert security.get("readOnlyRootFilesystem") is True and security.get("allowPrivilegeEscalation") is False
    assert security.get("capabilities") == {"drop": ["ALL"]} and security.get("runAsNonRoot") is True
    uid, gid = int(security["runAsUser"]), int(security.get("runAsGroup", security["runAsUser"]))
    empty_dirs = {v["name"] for v in pod_spec.get("volumes", []) if "emptyDir" in v}
    scratch = [m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in empty_dirs]
    run_dir = str(Path(SA_DIR).resolve().parents[2])  # /var/run is /run on Debian
    steps = [
        'mount --bind "$0" /opt',
        "mount -o remount,bind,ro /opt",
        f"mount -t tmpfs -o mode=0755 podrun {run_dir}",
        f"mkdir -p {SA_DIR}",
        f'cp "$1"/token "$1"/ca.crt "$1"/namespace {SA_DIR}/',
        f"mount -o remount,ro {run_dir}",
        'mount --bind "$1"/hosts /etc/hosts',  # cluster DNS for kubernetes.default.svc
        "mount -o remount,bind,ro /",  # readOnlyRootFilesystem
        *[f"mount -t tmpfs -o mode=1777,size=64m emptydir {shlex.quote(p)}" for p in scratch],
        "shift",
        'exec "$@"',
    ]
    drop = [
        "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
        "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all",
    ]  # fmt: skip
    environment = ["env", "-i", *[f"{k}={v}" for k, v in env.items()]]
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", " && ".join(steps), str(opt),
            str(secrets), *drop, *environment, *argv]  # fmt: skip


# ---------------------------------------------------------------- one run, end to end on the control plane

SUMMARY = {"loss": 0.08, "accuracy": 0.975, "epochs": 2, "examplesPerSecond": 812.5,
           "modelPath": "/mnt/dtr/models/{name}/1", "modelVersion": 1}  # fmt: skip


def operator_flags(docs: list[dict[str, Any]], liveness: int, metrics: int) -> tuple[list[str], dict[str, str]]:
    """The rendered Deployment's args for `dtr operator` (ports moved to free ones) and its env."""
    container = operator_container(docs)
    ports = {"--liveness-port": liveness, "--metrics-port": metrics}
    args = []
    for arg in container["args"]:
        flag = arg.split("=")[0]
        args.append(f"{flag}={ports[flag]}" if flag in ports else arg)
    return args, {e["name"]: e["value"] for e in container.get("env", [])}


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def finish_pod(cluster: Cluster, namespace: str, pod: str, image: str, message: str) -> None:
    """What a kubelet writes when the tensorflow container exits 0 (no kubelet runs here)."""
    terminated = {"exitCode": 0, "reason": "Completed", "message": message, "startedAt": utc_now(),
                  "finishedAt": utc_now()}
    container = {"name": "tensorflow", "image": image, "imageID": "", "restartCount": 0, "ready": False,
                 "state": {"terminated": terminated}}  # fmt: skip
    body = {"status": {"phase": "Succeeded", "startTime": utc_now(), "containerStatuses": [container]}}
    cluster.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps(body))  # fmt: skip


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def operator_completes_a_run(
    cluster: Cluster,
    start: Callable[[IO[str]], subprocess.Popen[bytes]],
    ports: tuple[int, int],
    run_ns: str,
    image: str,
    log_path: Path,
) -> str:
    """Starts the operator (start(log) -> process), checks its health and metrics endpoints, creates a
    run (as admin), waits for the TFJob and PVC, finishes the worker pods as a kubelet would, and
    waits for the run to be Succeeded with the chief's metrics. Returns the operator's log."""
    k = cluster.kubectl
    liveness, metrics = ports
    name = f"deploy-{uuid.uuid4().hex[:6]}"
    with log_path.open("w") as log:
        proc = start(log)
    try:
        wait_for(lambda: http_ok(f"http://127.0.0.1:{liveness}/healthz") or proc.poll() is not None,
                 "the operator's liveness endpoint", timeout=60)  # fmt: skip
        assert proc.poll() is None, f"the operator exited ({proc.returncode}):\n{log_path.read_text()[-4000:]}"
        assert http_ok(f"http://127.0.0.1:{metrics}/metrics")

        run_doc = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun",
                   "metadata": {"name": name, "namespace": run_ns},
                   "spec": {"workers": 2, "training": {"dataset": "digits", "epochs": 2},
                            "disruption": {"protect": True}}}  # fmt: skip
        cluster.create(run_doc)
        uid = k("get", "dtr", name, "-n", run_ns, "-o", "jsonpath={.metadata.uid}").stdout

        def children() -> tuple[dict[str, Any], dict[str, Any]] | None:
            job = k("get", "tfjob", name, "-n", run_ns, "-o", "json", "--ignore-not-found").stdout
            pvc = k("get", "pvc", f"{name}-data", "-n", run_ns, "-o", "json", "--ignore-not-found").stdout
            return (json.loads(job), json.loads(pvc)) if job.strip() and pvc.strip() else None

        job, pvc = wait_for(children, f"TFJob and PVC of {name}", timeout=60)
        assert job["metadata"]["ownerReferences"][0]["uid"] == uid
        assert pvc["metadata"]["labels"]["distml.dev/run"] == name
        (container,) = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
        assert container["image"] == image

        # The training-operator makes the worker pods; finish them as a kubelet would.
        def pods() -> list[str] | None:
            names = k("get", "pods", "-n", run_ns, "-l", f"training.kubeflow.org/job-name={name}",
                      "-o", "jsonpath={.items[*].metadata.name}").stdout.split()  # fmt: skip
            return sorted(names) if len(names) == 2 else None

        summary = json.dumps({**SUMMARY, "modelPath": SUMMARY["modelPath"].format(name=name)})
        for pod in wait_for(pods, f"the 2 worker pods of TFJob {name}", timeout=60):
            finish_pod(cluster, run_ns, pod, image, summary if pod.endswith("-worker-0") else "")

        def succeeded() -> dict[str, Any] | None:
            status = json.loads(k("get", "dtr", name, "-n", run_ns, "-o", "json").stdout).get("status") or {}
            return status if status.get("phase") == "Succeeded" else None

        status = wait_for(succeeded, f"run {name} to reach Succeeded", timeout=90)
        assert status["metrics"]["accuracy"] == SUMMARY["accuracy"]
        assert status["model"]["path"] == f"/mnt/dtr/models/{name}/1"
        assert status["tfJob"] == name and status["pvc"] == f"{name}-data"
        # Its PodDisruptionBudget (spec.disruption.protect), made and then let go as the ServiceAccount.
        budget = json.loads(k("get", "pdb", name, "-n", run_ns, "-o", "json").stdout)
        assert budget["metadata"]["ownerReferences"][0]["uid"] == uid
        wait_for(lambda: json.loads(k("get", "pdb", name, "-n", run_ns, "-o", "json").stdout)["spec"]["minAvailable"]
                 == 0, f"the budget of finished run {name} let go", timeout=30)  # fmt: skip
        reasons = k("get", "events", "-n", run_ns, "--field-selector", f"involvedObject.name={name}",
                    "-o", "jsonpath={.items[*].reason}").stdout.split()  # fmt: skip
        assert "Created" in reasons, f"no Created event on the run (the operator posts events): {reasons}"
        assert proc.poll() is None, "the operator died during the run"
    finally:
        stop_child(proc)
        k("delete", "dtr", name, "-n", run_ns, "--ignore-not-found", "--wait=false", check=False)
    output = log_path.read_text()
    denials = [line for line in output.splitlines() if RBAC_DENIAL.search(line)]
    assert not denials, "RBAC refused the operator something:\n" + "\n".join(denials[:5])
    assert "Traceback" not in output, output[-5000:]
    return output
