"""Fault injection helpers: `dtr operator` as a killable subprocess, an API server restart, a kubelet
stand-in for worker pods (the suite writes their status, as a kubelet would)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from api import Api, poll
from controlplane import die_with_parent, free_port

DTR = Path(sys.executable).parent / "dtr"
KUBECTL = os.environ.get("DTR_KUBECTL") or shutil.which("kubectl") or "/usr/bin/kubectl"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def healthy(port: int) -> bool:
    try:
        with _NO_PROXY.open(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


@dataclass
class OperatorProcess:
    """`dtr operator --namespace NS` in its own process group; SIGKILL and restart it at will."""

    namespace: str
    log: Path
    kubeconfig: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    exits: list[int] = field(default_factory=list)  # exit codes of the runs that ended on their own

    def start(self, wait_healthy: bool = True, timeout: float = 60) -> None:
        assert self.proc is None or self.proc.poll() is not None
        if self.proc is not None and self.proc.returncode not in (None, -signal.SIGKILL):
            self.exits.append(self.proc.returncode)
        port = free_port()
        argv = [str(DTR), "operator", "--namespace", self.namespace, "--liveness-port", str(port), "--metrics-port", "0"]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "DTR_TRAINER_IMAGE": "distml/trainer:0.1.0-test"}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
        self.starts += 1
        if wait_healthy and not poll(lambda: healthy(port) or not self.alive(), timeout, 0.1):
            raise AssertionError(f"the operator did not become healthy:\n{self.tail()}")
        if not self.alive():
            raise AssertionError(f"the operator exited at start:\n{self.tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole group: no cleanup, as an OOM kill or a node loss would end it."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.kills += 1

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(10)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


# ---- the API server ------------------------------------------------------------------------------------


def plane_dir(kubeconfig: Path, known: Path | None) -> Path:
    """The control plane's directory (tests/cluster/controlplane.py layout: state.json beside kubeconfig)."""
    root = known or kubeconfig.parent
    if not (root / "state.json").exists():
        raise AssertionError(f"no control-plane state in {root}: the API server restart needs a plane this suite can reach")
    return root


def _cmdline(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def restart_apiserver(root: Path, kubeconfig: Path, down_seconds: float = 2.0, die_with_test: bool = False) -> float:
    """SIGKILL kube-apiserver, wait, start it again with the same arguments; seconds until ready again.

    The control plane's state.json and pid file are updated, so its teardown stops the new process.
    die_with_test: the plane was started by this test process (the session fixture), whose processes
    die with it (PR_SET_PDEATHSIG); the new apiserver must too. Not for a reused (DTR_KUBECONFIG) plane.
    (A small method on ControlPlane would be the better home for this; see the report.)
    """
    state_file = root / "state.json"
    state = json.loads(state_file.read_text())
    pid = int(state["pids"]["kube-apiserver"])
    argv = _cmdline(pid)
    if not argv or Path(argv[0]).name != "kube-apiserver":
        raise AssertionError(f"pid {pid} is not the kube-apiserver: {argv[:1]}")
    os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    poll(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), 10, 0.05)
    time.sleep(down_seconds)
    started = time.monotonic()
    with open(root / "logs" / "kube-apiserver.log", "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=root,
                                start_new_session=True, preexec_fn=die_with_parent if die_with_test else None)  # noqa: PLW1509
    state["pids"]["kube-apiserver"] = proc.pid
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_file)
    with contextlib.suppress(OSError):
        (root / "pids" / "kube-apiserver").write_text(f"{proc.pid} {argv[0]}\n")

    def ready() -> bool:
        try:
            proc = subprocess.run([KUBECTL, f"--kubeconfig={kubeconfig}", "get", "--raw", "/readyz"],
                                  capture_output=True, text=True, check=False, timeout=10)  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0 and proc.stdout.strip() == "ok"

    if not poll(ready, 90, 0.2):
        raise AssertionError("kube-apiserver did not come back within 90 s")
    return time.monotonic() - started


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


# ---- the kubelet's part ---------------------------------------------------------------------------------

SUMMARY = {"loss": 0.09, "accuracy": 0.973, "epochs": 2, "examplesPerSecond": 800.0, "modelVersion": 1}


def summary_for(name: str) -> str:
    return json.dumps({**SUMMARY, "modelPath": f"/mnt/dtr/models/{name}/1"})


def worker_pods(api: Api, namespace: str, name: str, count: int, timeout: float = 60) -> list[Any]:
    pods = poll(lambda: len(p := api.pods(namespace, name)) == count and p, timeout)
    if not pods:
        raise AssertionError(f"TFJob {namespace}/{name}: {count} worker pods did not appear")
    return pods


def pods_running(api: Api, namespace: str, name: str, count: int) -> None:
    for pod in worker_pods(api, namespace, name, count):
        api.set_pod_running(namespace, pod.metadata.name)


def pods_succeeded(api: Api, namespace: str, name: str, count: int) -> None:
    for index, pod in enumerate(worker_pods(api, namespace, name, count)):
        api.set_pod_terminated(namespace, pod.metadata.name, 0, summary_for(name) if index == 0 else None)


def bind_pods(api: Api, namespace: str, name: str, count: int, node: str = "reliability-node") -> None:
    """Bind the worker pods to a node name, as the scheduler would (PVC protection then counts them as users)."""
    from kubernetes import client

    for pod in worker_pods(api, namespace, name, count):
        if pod.spec.node_name:
            continue
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=pod.metadata.name),
            target=client.V1ObjectReference(kind="Node", name=node, api_version="v1"),
        )
        api.core.create_namespaced_binding(namespace, body, _preload_content=False)
