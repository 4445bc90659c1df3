"""Helpers that run the real trainer as separate processes, wired by TF_CONFIG on loopback (the trainer tier;
its `volume` fixture is in tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

STARTUP_AND_RUN_TIMEOUT = 300  # seconds; the machine is shared, TF import alone can take 10 s


def tf_config(ports: Sequence[int], index: int) -> str:
    return json.dumps({
        "cluster": {"worker": [f"localhost:{p}" for p in ports]},
        "task": {"type": "worker", "index": index},
    })


@dataclass
class Volume:
    """The run's PVC as a local directory, laid out as the operator mounts it at /mnt/dtr."""

    root: Path
    tmp: Path = field(init=False)  # the workers' TMPDIR: must be empty after a run

    def __post_init__(self) -> None:
        self.tmp = self.root.parent / f"{self.root.name}-tmp"
        for sub in ("data", "models", "backup", "logs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(exist_ok=True)

    def args(self, model_name: str = "digits-cnn", run: str = "run1") -> list[str]:
        return [
            "--data-dir", str(self.root / "data"),
            "--export-dir", str(self.root / "models" / model_name),
            "--backup-dir", str(self.root / "backup" / run),
            "--tensorboard-dir", str(self.root / "logs" / run),
            "--log-dir", str(self.root / "logs" / run),
        ]


def trainer_env(volume: Volume, tf_config_text: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update({"TMPDIR": str(volume.tmp), "PYTHONUNBUFFERED": "1",
                # no test may download: any attempt fails fast on a closed local port
                "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9",
                # ...but gRPC honours the proxy variables too: peers on loopback go direct
                "no_proxy": "localhost,127.0.0.1", "NO_PROXY": "localhost,127.0.0.1"})
    if tf_config_text is not None:
        env["TF_CONFIG"] = tf_config_text
    return env


@dataclass
class Worker:
    index: int
    proc: subprocess.Popen
    log_path: Path
    termination_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stdout_lines(self) -> list[str]:
        return [ln for ln in self.log().splitlines() if ln.startswith("{")]

    def wait(self, timeout: float = STARTUP_AND_RUN_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            log = self.log()[-3000:]
            raise AssertionError(f"worker {self.index} did not finish in {timeout}s; log:\n{log}") from None


def start_workers(volume: Volume, ports: Sequence[int], args: Sequence[str], attempt: str = "a",
                  env_extra: Mapping[str, str] | None = None, indices: Sequence[int] | None = None) -> list[Worker]:
    """One process per port (or only those of `indices`: a pod each, with a volume of its own); env_extra is what
    the operator's builder would add to the pod's env."""
    workers = []
    for i in range(len(ports)) if indices is None else indices:
        log_path = volume.root.parent / f"worker{i}-{attempt}.log"
        term = volume.root.parent / f"termination{i}-{attempt}"
        cmd = [sys.executable, "-m", "dtr_trainer", *args, "--termination-message-path", str(term)]
        env = {**trainer_env(volume, tf_config(ports, i)), **(env_extra or {})}
        with open(log_path, "w") as out:  # stdout and stderr interleaved, as a pod log
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        workers.append(Worker(i, proc, log_path, term))
    return workers


def restart_to_the_end(volume: Volume, ports: Sequence[int], args: Sequence[str],
                       attempt: str = "b", env_extra: Mapping[str, str] | None = None) -> list[Worker]:
    """Every worker started again (as the kubelet restarts failed containers, same TF_CONFIG, env and volume) and
    run to its end: each must exit 0; the finished workers, for their logs."""
    workers = start_workers(volume, ports, args, attempt=attempt, env_extra=env_extra)
    try:
        codes = [w.wait() for w in workers]
    finally:
        kill_all(workers)
    assert codes == [0] * len(workers), "\n".join(w.log()[-2000:] for w in workers)
    return workers


def run_trainer(args: Sequence[str], volume: Volume, tf_config_text: str | None = None,
                timeout: float = STARTUP_AND_RUN_TIMEOUT) -> subprocess.CompletedProcess:
    """One trainer process, stdout and stderr captured apart."""
    return subprocess.run([sys.executable, "-m", "dtr_trainer", *args], env=trainer_env(volume, tf_config_text),
                          capture_output=True, text=True, timeout=timeout, check=False)


def wait_for_line(worker: Worker, text: str, timeout: float = STARTUP_AND_RUN_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in worker.log():
            return
        if worker.proc.poll() is not None:
            raise AssertionError(f"worker {worker.index} exited {worker.proc.returncode} before {text!r}:\n"
                                 f"{worker.log()[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"no {text!r} from worker {worker.index} in {timeout}s")


def kill_all(workers: Sequence[Worker]) -> None:
    for w in workers:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()


def integer_dirs(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.is_dir() and p.name.isdigit())


def all_entries(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def worker_log_file(volume: Volume, index: int, run: str = "run1") -> str:
    """A worker's log as it lands on the volume (--log-dir): every line begins with its UTC time."""
    return (volume.root / "logs" / run / f"worker-{index}.log").read_text()


def validate_lineage(version_dir: Path) -> dict:
    """The lineage beside an exported model, checked against docs/lineage.schema.json."""
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "lineage.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    doc = json.loads((version_dir / "lineage.json").read_text())
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(doc)
    return doc
