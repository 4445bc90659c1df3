"""Helpers for the end-to-end tests: the process node and the operator as real subprocesses,
small digits runs, and a look at the node's processes and files."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cluster_fixtures import wait_for
from dtr_operator.local import devcluster

NODE_NAME = "dtr-e2e"


def digits_run(
    name: str,
    *,
    workers: int = 2,
    epochs: int = 3,
    steps: int = 10,
    restart: str = "OnFailure",
    reclaim: str = "Retain",
    backoff: int = 3,
) -> dict[str, Any]:
    """A tiny run on the bundled digits data: a few epochs of a few steps (2 cores, CI minutes)."""
    return {
        "apiVersion": "distml.dev/v1alpha1",
        "kind": "DistTrainingRun",
        "metadata": {"name": name},
        "spec": {
            "workers": workers,
            "training": {"model": "cnn", "dataset": "digits", "epochs": epochs, "batchSizePerWorker": 32,
                         "stepsPerEpoch": steps, "learningRate": 0.002},
            "storage": {"size": "64Mi", "reclaimPolicy": reclaim},
            "restartPolicy": restart,
            "backoffLimit": backoff,
        },
    }  # fmt: skip


@dataclass
class Background:
    """A subprocess in its own session (so its whole group can be signalled), logging to a file."""

    argv: list[str]
    log: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    starts: int = field(default=0)

    def start(self) -> None:
        self.proc = devcluster.spawn(
            self.argv, self.log, self.env, die_with_parent=True
        )
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup, as a crash or an OOM kill would end it."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(10)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class Operator(Background):
    """`dtr operator` scoped to one namespace, with its liveness port."""

    port: int = 0

    def start_healthy(self, timeout: float = 60) -> None:
        self.start()

        def healthy() -> bool:
            if not self.alive():
                pytest.fail(f"the operator exited:\n{self.tail()}", pytrace=False)
            return devcluster.http_ok_quiet(f"http://127.0.0.1:{self.port}/healthz")

        wait_for(healthy, "the operator's /healthz", timeout=timeout)


@dataclass
class Node(Background):
    state_dir: Path = Path()

    def volume(self, namespace: str, claim: str) -> Path:
        return self.state_dir / "volumes" / namespace / claim

    def pod_logs(self, namespace: str, pod: str) -> list[Path]:
        """The log of every container instance the node ran for this pod, oldest first."""
        files = [
            p
            for d in (self.state_dir / "pods").glob(f"{namespace}_{pod}_*")
            for p in d.glob("tensorflow.*.log")
        ]
        return sorted(files, key=lambda p: int(p.name.split(".")[1]))

    def pod_log_text(self, namespace: str, pod: str) -> str:
        return "".join(
            p.read_text(errors="replace") for p in self.pod_logs(namespace, pod)
        )


def trainer_processes(namespace: str, pod: str | None = None) -> list[int]:
    """Pids of live trainer processes the node runs in this namespace (its volumes are in their
    command line), and of this pod only when given (HOSTNAME is the pod's name)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmdline = (d / "cmdline").read_bytes()
            if (
                b"dtr_trainer" not in cmdline
                or f"/volumes/{namespace}/".encode() not in cmdline
            ):
                continue
            env = (d / "environ").read_bytes().split(b"\0")
            state = (d / "stat").read_text().split(") ", 1)[1][0]
        except (OSError, IndexError):
            continue
        if state != "Z" and (pod is None or f"HOSTNAME={pod}".encode() in env):
            out.append(int(d.name))
    return out


def saved_models(root: Path) -> list[Path]:
    """Every SavedModel directory under root (a directory holding saved_model.pb)."""
    return sorted(p.parent for p in root.rglob("saved_model.pb"))
