"""The operator under test, two ways:

- `Operator`: in this process through kopf.testing.KopfRunner (the integration tier): quick to start
  and stop, its output checked for tracebacks;
- `OperatorProcess`: `dtr operator` as its own process, as the Deployment runs it: its /metrics, and
  SIGKILL and restart at will (the reliability tier's faults).

No kubelet runs beside them: no pod ever pulls IMAGE.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kopf.testing import KopfRunner

from devcluster.controlplane import die_with_parent, free_port

from .wait import poll

IMAGE = "localhost/distml/trainer:0.1.0-test"
DTR = Path(sys.executable).parent / "dtr"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Operator:
    """The operator for one namespace, in this process; start/stop as often as a test needs (restart: stop, start)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.runner: KopfRunner | None = None
        self.outputs: list[str] = []

    def start(self) -> None:
        assert self.runner is None
        os.environ["DTR_TRAINER_IMAGE"] = IMAGE
        args = ["run", "--standalone", "--namespace", self.namespace, "-m", "dtr_operator.handlers"]
        self.runner = KopfRunner(args, timeout=60)
        self.runner.__enter__()

    def stop(self) -> None:
        if self.runner is None:
            return
        runner, self.runner = self.runner, None
        runner.__exit__(None, None, None)
        self.outputs.append(runner.output)
        assert runner.exit_code == 0, runner.output[-3000:]
        assert "Traceback" not in runner.output, runner.output[-5000:]


def healthy(port: int) -> bool:
    try:
        with _NO_PROXY.open(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def scrape(port: int) -> dict[str, float] | None:
    """Samples of dtr_* metrics ('name{labels}' -> value), or None while the endpoint is not up."""
    try:
        with _NO_PROXY.open(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    samples = {}
    for line in text.splitlines():
        m = re.match(r"^(dtr_\S+) (\S+)$", line)
        if m:
            samples[m.group(1)] = float(m.group(2))
    return samples


@dataclass
class OperatorProcess:
    """`dtr operator --namespace NS` in its own process group; SIGKILL and restart it at will."""

    namespace: str
    log: Path
    kubeconfig: Path
    metrics_port: int = 0  # 0: no /metrics endpoint
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    exits: list[int] = field(default_factory=list)  # exit codes of the runs that ended on their own

    def start(self, wait_healthy: bool = True, timeout: float = 60) -> None:
        assert self.proc is None or self.proc.poll() is not None
        if self.proc is not None and self.proc.returncode not in (None, -signal.SIGKILL):
            self.exits.append(self.proc.returncode)
        port = free_port()
        argv = [str(DTR), "operator", "--namespace", self.namespace, "--trainer-image", IMAGE,
                "--liveness-port", str(port), "--metrics-port", str(self.metrics_port)]  # fmt: skip
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        with open(self.log, "ab") as out:
            # Its own group, which kill() signals; and it dies with the test process: a run stopped mid-way (CI's
            # first failure stops the steps running) left one serving its namespace for hours.
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self.starts += 1
        if wait_healthy and not poll(lambda: healthy(port) or not self.alive(), timeout, 0.1):
            raise AssertionError(f"the operator did not become healthy:\n{self.tail()}")
        if not self.alive():
            raise AssertionError(f"the operator exited at start:\n{self.tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def metrics(self) -> dict[str, float]:
        assert self.alive(), f"dtr operator exited ({self.proc and self.proc.returncode}): {self.tail()}"
        return scrape(self.metrics_port) or {}

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


@contextlib.contextmanager
def operator_with(namespace: str, **settings: str) -> Iterator[Operator]:
    """An operator serving `namespace` with settings given as their environment twins (`kopf run` reads settings
    from the environment, e.g. DTR_USER_CODE), set for its life only."""
    os.environ.update(settings)
    op = Operator(namespace)
    try:
        op.start()
        yield op
    finally:
        op.stop()
        for key in settings:
            os.environ.pop(key, None)

