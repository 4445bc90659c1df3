"""`dtr dev-cluster up|down|status`: the whole local stack in the background, from a source checkout.

    control plane (tests/cluster/controlplane.py: etcd, kube-apiserver, kube-controller-manager,
                   training-operator, the project's CRDs)
    + the process node (python -m dtr_operator.local.node)
    + this operator (dtr operator)

Everything lives in one directory (default ./.dtr/dev-cluster): the control plane's files, the
node's volumes and logs (node/), the pid and log files of the node and the operator. `up` prints
the `export KUBECONFIG=...` line; `down` stops everything it started, by pid.
Development tooling: the control plane comes from the repository's tests/cluster, not the package.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[3]
DEFAULT_DIR = Path(".dtr") / "dev-cluster"
NODE_NAME = "dtr-local"
READY_TIMEOUT = 60.0


class DevClusterError(RuntimeError):
    """One line for the user."""


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def node_state(self) -> Path:
        return self.root / "node"

    def pid_file(self, name: str) -> Path:
        return self.root / "dev" / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.root / "dev" / f"{name}.log"


def controlplane_module() -> ModuleType:
    """tests/cluster/controlplane.py from the source tree (the stack is a development tool)."""
    path = REPO / "tests" / "cluster" / "controlplane.py"
    if not path.exists():
        raise DevClusterError(f"{path} not found: dev-cluster runs from a source checkout of the project")
    spec = importlib.util.spec_from_file_location("dtr_controlplane", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("dtr_controlplane", module)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dtr_command() -> list[str]:
    """The `dtr` of this environment (the console script beside this Python)."""
    script = Path(sys.executable).parent / "dtr"
    return [str(script)] if script.exists() else [sys.executable, "-m", "dtr_operator.cli"]


def node_argv(kubeconfig: Path, state_dir: Path, name: str = NODE_NAME, extra: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "dtr_operator.local.node", "--kubeconfig", str(kubeconfig),
            "--name", name, "--state-dir", str(state_dir), *extra]  # fmt: skip


def operator_argv(liveness_port: int, namespaces: Sequence[str] = ()) -> list[str]:
    """`dtr operator` on this liveness port, for these namespaces (all when none), no metrics port."""
    scope = [a for ns in namespaces for a in ("--namespace", ns)] or ["--all-namespaces"]
    return [*dtr_command(), "operator", *scope, "--liveness-port", str(liveness_port), "--metrics-port", "0"]


def spawn(
    argv: Sequence[str], log: Path, env: dict[str, str] | None = None, die_with_parent: bool = False
) -> subprocess.Popen[bytes]:
    """A background process in its own session (a Ctrl-C in the shell does not reach it), logging to a
    file. With die_with_parent (tests) the kernel kills it when the starting thread dies, so a killed
    pytest leaves nothing running."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, preexec_fn=_pdeathsig if die_with_parent else None,
        )  # fmt: skip


def _pdeathsig() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def wait_for(what: str, check: Callable[[], bool], timeout: float, alive: Callable[[], bool], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise DevClusterError(f"{what} exited; see {log}:\n{_tail(log)}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.5)
    raise DevClusterError(f"{what} not ready after {timeout:.0f}s; see {log}:\n{_tail(log)}")


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


def http_ok_quiet(url: str) -> bool:
    """http_ok, with any connection error meaning "not yet"."""
    try:
        return http_ok(url)
    except Exception:
        return False


def node_ready(kubeconfig: Path, name: str) -> bool:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    node = api.read_node(name)
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def stop_pid(pid: int, marker: str, timeout: float = 15.0) -> bool:
    """SIGTERM (then SIGKILL) the process group of pid, if pid still runs a command containing marker."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    if marker not in cmdline:
        return False  # the pid was reused by something else: leave it alone
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and not _zombie(pid):
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists() and not _zombie(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    return True


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


BACKGROUND = (("operator", "operator"), ("node", "dtr_operator.local.node"))  # (name, cmdline marker), stop order


def up(root: Path, say: Callable[[str], None]) -> Path:
    layout = Layout(root.resolve())
    cp = controlplane_module()
    plane = cp.ControlPlane(layout.root, stop_at_exit=False, log=say)
    if any(_running(layout, name, marker) for name, marker in BACKGROUND):
        raise DevClusterError(f"a dev cluster already runs in {layout.root}; `dtr dev-cluster down` first")
    try:
        state = plane.start()
    except cp.ControlPlaneError as exc:
        raise DevClusterError(f"control plane: {exc}") from None
    say(f"control plane up in {state.ready_seconds}s")
    kubeconfig = plane.kubeconfig
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    try:
        node_log = layout.log_file("node")
        node = spawn(node_argv(kubeconfig, layout.node_state), node_log, env)
        layout.pid_file("node").write_text(str(node.pid))
        wait_for("the process node", lambda: node_ready(kubeconfig, NODE_NAME), READY_TIMEOUT,
                 lambda: node.poll() is None, node_log)  # fmt: skip
        say(f"node {NODE_NAME} Ready (pid {node.pid}; volumes under {layout.node_state / 'volumes'})")
        port = free_port()
        op_log = layout.log_file("operator")
        op = spawn(operator_argv(port), op_log, env)
        layout.pid_file("operator").write_text(str(op.pid))
        wait_for("the operator", lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), READY_TIMEOUT,
                 lambda: op.poll() is None, op_log)  # fmt: skip
        say(f"operator running (pid {op.pid}; log {op_log})")
    except BaseException:
        down(layout.root, say)
        raise
    return kubeconfig


def _running(layout: Layout, name: str, marker: str) -> bool:
    try:
        pid = int(layout.pid_file(name).read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError):
        return False
    return marker in cmdline and not _zombie(pid)


def down(root: Path, say: Callable[[str], None]) -> None:
    layout = Layout(root.resolve())
    for name, marker in BACKGROUND:
        pid_file = layout.pid_file(name)
        with contextlib.suppress(OSError, ValueError):
            if stop_pid(int(pid_file.read_text()), marker):
                say(f"stopped {name}")
        pid_file.unlink(missing_ok=True)
    cp = controlplane_module()
    cp.ControlPlane(layout.root, stop_at_exit=False, build=False, log=say).stop()
    say(f"control plane stopped ({layout.root})")


def status(root: Path) -> dict[str, bool]:
    layout = Layout(root.resolve())
    cp = controlplane_module()
    out = dict(cp.ControlPlane(layout.root, stop_at_exit=False, build=False).status())
    for name, marker in BACKGROUND:
        out[name] = _running(layout, name, marker)
    return out


def main(command: str, root: Path | None = None) -> int:
    root = root or DEFAULT_DIR

    def say(msg: str) -> None:
        print(f"[dev-cluster] {msg}", file=sys.stderr, flush=True)

    try:
        if command == "up":
            kubeconfig = up(root, say)
            print(f"export KUBECONFIG={kubeconfig}")
            return 0
        if command == "down":
            down(root, say)
            return 0
        states = status(root)
        for name, running in states.items():
            print(f"{name:24} {'running' if running else 'stopped'}")
        return 0 if all(states.values()) else 1
    except DevClusterError as exc:
        say(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
