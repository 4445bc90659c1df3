"""The client's local backend: each run is a `dtr run` process (runner.py), its workers local processes.

`dtr run` plays the training-operator and the kubelet and computes the run's status with the operator's own
status code; it writes that status to DIR/runs/<name>/status.json (runner.STATUS_FILE), which this backend
reads as the cluster backend reads the API server. Its output (the workers' lines, merged and prefixed as
`dtr logs` shows them) goes to DIR/runs/<name>/console.log. A separate process, not threads in the caller:
`dtr run` moves itself into a network namespace of its own (docs/local.md#network), which a notebook's kernel
must not do. What create() was given is kept in DIR/runs/<name>/submitted/, so resume() starts the same run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import yaml
from dtr_contract import flags, layout, objectstore, published
from dtr_contract.history import MAX_FILE
from dtr_contract.progress import parse_epoch_end_line

from dtr_operator.api import KIND
from dtr_operator.reasons import FAILED, PENDING, SUSPENDED, TERMINAL
from dtr_operator.spec import SpecError, created_pvc_name, parse_run
from dtr_operator.status.progress import progress_of

from .. import bucket, models, submit
from .. import tensorboard as board
from ..curves import history_of
from ..results import InvalidRun, NoModel, Progress, RunNotFound, RunStatus
from . import runner, source

CONSOLE = "console.log"
SUBMITTED = "submitted"
RUN_FILE = "run.yaml"
CHIEF = "[worker-0] "
STARTING = "LocalRunStarting"  # no status written yet: `dtr run` is reading the run and starting its workers
ENDED = "LocalRunEnded"  # `dtr run` exited without a final status (bad input it found, a crash)
STOP_SECONDS = 30.0  # dtr run stops its workers within runner.STOP_GRACE_SECONDS, then reports


# ---- pure -------------------------------------------------------------------------------------


def local_status(written: Mapping[str, Any], exit_code: int | None, last_line: str) -> dict[str, Any]:
    """The run's status: what `dtr run` wrote, unless it exited (exit_code) without writing an end."""
    if exit_code is None or written.get("phase") in (*TERMINAL, SUSPENDED):
        return dict(written) or {"phase": PENDING, "reason": STARTING, "message": "dtr run is starting the workers"}
    message = f"dtr run exited with code {exit_code}" + (f": {last_line}" if last_line else "")
    return {**written, "phase": FAILED, "reason": ENDED, "message": message}


def chief_epochs(lines: list[str], now: str) -> list[Progress]:
    """Every epoch the chief finished, from its epoch-end lines (what status.progress is made of)."""
    found = []
    for line in lines:
        if line.startswith(CHIEF) and (end := parse_epoch_end_line(line[len(CHIEF):])) is not None:
            found.append(Progress.from_status(progress_of(end, now)))
    return found


def worker_lines(lines: list[str], worker: int | None, tail: int | None) -> list[str]:
    """The workers' lines of a console log (not dtr run's own), of one worker when asked, the last `tail`."""
    prefix = "[worker-" if worker is None else f"[worker-{worker}] "
    chosen = [line for line in lines if line.startswith(prefix)]
    return chosen[len(chosen) - tail:] if tail is not None and tail < len(chosen) else chosen


def file_tail(path: Path, limit: int = MAX_FILE) -> str:
    """The last `limit` bytes of a file as text ('' when there is none): its newest lines."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def model_on_disk(volumes: Path, model: Mapping[str, Any]) -> str | None:
    """Where a local run's model is on this machine: its claim's directory, then its path inside the volume."""
    inside = layout.in_volume(str(model.get("path") or ""))
    return None if inside is None or not model.get("claim") else str(volumes / str(model["claim"]) / inside)


# ---- the backend ------------------------------------------------------------------------------


class LocalBackend:
    poll_seconds = 0.5

    def __init__(self, base_dir: str | Path | None = None, python: str | None = None, host_network: bool = False):
        self.base_dir = Path(base_dir if base_dir is not None else runner.default_base_dir()).resolve()
        self.python = python or runner.default_python()
        self.host_network = host_network
        self.procs: dict[str, subprocess.Popen[bytes]] = {}  # the runs this client started, by name

    def _dir(self, name: str) -> Path:
        return self.base_dir / "runs" / name

    def _live(self, name: str) -> subprocess.Popen[bytes] | None:
        proc = self.procs.get(name)
        return proc if proc is not None and proc.poll() is None else None

    def create(self, doc: Mapping[str, Any], code: submit.CodeFile | None) -> str:
        name = str(doc["metadata"]["name"])
        if self._live(name) is not None:
            raise InvalidRun(f"{KIND} {name} is running here already: delete() it first, or choose another name")
        try:
            source.admit(source.with_local_code(dict(doc), code, name), name)
        except source.RunError as err:
            raise InvalidRun(str(err)) from None
        submitted = self._dir(name) / SUBMITTED
        submitted.mkdir(parents=True, exist_ok=True)
        (submitted / RUN_FILE).write_text(yaml.safe_dump(dict(doc), sort_keys=False))
        for old in submitted.glob("*.py"):
            old.unlink()
        if code is not None:
            (submitted / code.key).write_bytes(code.content)
        (self._dir(name) / runner.STATUS_FILE).unlink(missing_ok=True)  # an earlier run's of the same name
        self._start(name)
        return name

    def _start(self, name: str) -> None:
        submitted = self._dir(name) / SUBMITTED
        argv = [sys.executable, "-m", "dtr_cli", "run", str(submitted / RUN_FILE), "--dir", str(self.base_dir),
                "--python", self.python]  # fmt: skip
        argv += [arg for code in submitted.glob("*.py") for arg in (flags.CODE, str(code))]
        argv += ["--host-network"] if self.host_network else []
        with open(self._dir(name) / CONSOLE, "ab") as console:
            self.procs[name] = subprocess.Popen(argv, stdout=console, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip

    def _lines(self, name: str) -> list[str]:
        try:
            return (self._dir(name) / CONSOLE).read_text(errors="replace").splitlines()
        except OSError:
            return []

    def _status(self, name: str) -> dict[str, Any]:
        try:
            written = json.loads((self._dir(name) / runner.STATUS_FILE).read_text())
        except (OSError, ValueError):
            written = {}
        proc = self.procs.get(name)
        if proc is None and not written and not (self._dir(name) / SUBMITTED).exists():
            raise RunNotFound(f"no {KIND} {name} in {self.base_dir}")
        lines = self._lines(name)
        return local_status(written, None if proc is None else proc.poll(), lines[-1] if lines else "")

    def status(self, name: str) -> dict[str, Any]:
        """The run's status as the operator would write it (a local sweep folds it: dtr_client.local.sweeps)."""
        return self._status(name)

    def get(self, name: str) -> RunStatus:
        found = self._status(name)
        return RunStatus.from_status(name, found, model_on_disk(self.base_dir / "volumes", found.get("model") or {}))

    def list(self) -> list[RunStatus]:
        runs = self.base_dir / "runs"
        on_disk = {d.name for d in runs.iterdir() if (d / SUBMITTED).is_dir()} if runs.is_dir() else set()
        return [self.get(name) for name in sorted(on_disk | set(self.procs))]

    def _stop(self, name: str, sig: int) -> None:
        proc = self._live(name)
        if proc is not None:
            os.kill(proc.pid, sig)
            proc.wait(STOP_SECONDS)

    def delete(self, name: str) -> None:
        """Stop the run's processes and forget it; its volume (DIR/volumes/<claim>) is kept."""
        self._status(name)  # RunNotFound
        self._stop(name, signal.SIGTERM)
        self.procs.pop(name, None)
        shutil.rmtree(self._dir(name), ignore_errors=True)

    def set_suspend(self, name: str, suspend: bool) -> None:
        phase = self._status(name).get("phase")
        if suspend:
            self._stop(name, runner.SUSPEND_SIGNAL)
        elif phase == SUSPENDED and self._live(name) is None:
            self._start(name)

    def _claims(self, name: str) -> list[str]:
        """The run's claim as create() was given the run, else every local volume's (a `dtr run` run)."""
        try:
            doc = yaml.safe_load((self._dir(name) / SUBMITTED / RUN_FILE).read_text())
            return [parse_run(doc).pvc_name]
        except (OSError, SpecError):
            volumes = self.base_dir / "volumes"
            return sorted(d.name for d in volumes.iterdir()) if volumes.is_dir() else []

    def tensorboard(self, name: str, port: int | None, timeout: float, wait: bool) -> board.TensorBoardHandle:
        """TensorBoard from the trainer's Python (dtr run's) on the run's log dir under DIR/volumes/<claim>."""
        self._status(name)  # RunNotFound
        found = board.local_log_dirs(self.base_dir / "volumes", name, self._claims(name))
        if not found:
            raise board.TensorBoardError(f"no TensorBoard logs of {KIND} {name} under {self.base_dir / 'volumes'} "
                                         "(yet: the chief writes them from its first epoch)")  # fmt: skip
        newest = max(found, key=lambda d: d.stat().st_mtime)
        return board.start_local(name, self.python, newest, port, timeout, wait)

    def fetch_model(self, name: str, dest: Path) -> Path:
        found = self.get(name)
        if found.model_path and objectstore.is_s3_uri(found.model_path):  # published in a bucket
            models.empty_destination(dest)
            base, version = published.split_version_uri(found.model_path)
            bucket.get(base, version, dest, os.environ)
            return dest
        if found.local_model_path is None or not Path(found.local_model_path).is_dir():
            raise NoModel(f"{KIND} {name} has exported no model (yet): it is {found.phase}")
        return models.copy_model(Path(found.local_model_path), dest)

    def epochs(self, name: str, now: RunStatus) -> list[Progress]:
        """Every epoch the chief has finished (its console lines; status.progress keeps the last one)."""
        return chief_epochs(self._lines(name), runner.now_rfc3339())

    def _submitted(self, name: str) -> dict[str, Any]:
        """The run document create() was given ({} for a run `dtr run` started by itself)."""
        try:
            doc = yaml.safe_load((self._dir(name) / SUBMITTED / RUN_FILE).read_text())
        except (OSError, yaml.YAMLError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def _claim(self, name: str) -> str:
        """The run's claim: its document's, else its status's, else the one the operator would create."""
        try:
            return parse_run(self._submitted(name)).pvc_name
        except (SpecError, KeyError, TypeError, AttributeError):
            return str((self._status(name).get("model") or {}).get("claim") or created_pvc_name(name))

    def spec(self, name: str) -> dict[str, Any]:
        self._status(name)  # RunNotFound
        return dict(self._submitted(name).get("spec") or {})

    def history(self, name: str) -> list[Progress]:
        """Every finished epoch: the history file on the run's volume, else the chief's epoch-end lines."""
        self._status(name)  # RunNotFound
        inside = layout.in_volume(layout.history_file(layout.logs_dir(name))) or ""
        found = history_of(file_tail(self.base_dir / "volumes" / self._claim(name) / inside))
        return found or chief_epochs(self._lines(name), runner.now_rfc3339())

    def logs(self, name: str, follow: bool, worker: int | None, tail: int | None, previous: bool) -> Iterator[str]:
        if previous:
            raise ValueError(f"a local run's {CONSOLE} holds every attempt's lines: logs() without previous")
        self._status(name)  # RunNotFound
        if not follow:
            yield from worker_lines(self._lines(name), worker, tail)
            return
        with open(self._dir(name) / CONSOLE, errors="replace") as console:
            yield from self._follow(name, console, worker, tail)

    def _follow(self, name: str, console: IO[str], worker: int | None, tail: int | None) -> Iterator[str]:
        """Whole lines as dtr run writes them (the last `tail` of those already there), until it exits."""
        partial = ""
        while True:
            running = self._live(name) is not None  # before reading: the lines of its last moments are read
            partial += console.read()
            *lines, partial = partial.split("\n")
            yield from worker_lines(lines, worker, tail)
            tail = None
            if not running:
                return
            time.sleep(self.poll_seconds)
