"""Fault injection helpers: an API server restart, a kubelet stand-in for worker pods (the suite writes
their status, as a kubelet would). `dtr operator` as a killable subprocess: support.operator."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from devcluster.controlplane import KUBECTL, die_with_parent
from support.api import Api
from support.wait import poll

# ---- the API server ------------------------------------------------------------------------------------


def plane_dir(kubeconfig: Path, known: Path | None) -> Path:
    """The control plane's directory (devcluster/controlplane.py layout: state.json beside kubeconfig)."""
    root = known or kubeconfig.parent
    if not (root / "state.json").exists():
        raise AssertionError(f"no control-plane state in {root}: "
                             "the API server restart needs a plane this suite can reach")
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
                                start_new_session=True, preexec_fn=die_with_parent if die_with_test else None)
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
