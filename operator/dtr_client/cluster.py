"""The client's cluster backend: runs as DistTrainingRuns on an API server, through kube.py (dtr's own calls).

Credentials as every dtr command takes them (Kube.for_cli): KUBECONFIG, ~/.kube/config, then a pod's service
account. Logs are `dtr logs`'s (logs.py); a model file goes as `dtr submit` sends it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import queue
import sys
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dtr_contract import layout
from dtr_contract.history import MAX_FILE

from dtr_operator.api import API_VERSION, KIND
from dtr_operator.kube import Kube, current_namespace
from dtr_operator.kube_api import KubeApi

from . import logs as worker_logs
from . import submit
from . import tensorboard as board
from .curves import history_of
from .results import InvalidRun, Progress, RunNotFound, RunStatus

LOG_POLL_SECONDS = 0.5  # how often a follower waiting for a line wakes up (for Ctrl-C)
NO_FILE = 4  # READ_TAIL's exit status when the file is not there
# What history() runs in the transfer pod (the trainer image's Python): the last LIMIT bytes of PATH on stdout.
READ_TAIL = f"""import os, sys
path, limit = sys.argv[1], int(sys.argv[2])
try:
    f = open(path, "rb")
except FileNotFoundError:
    sys.exit({NO_FILE})
with f:
    f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
    sys.stdout.buffer.write(f.read(limit))
"""


class ClusterBackend:
    poll_seconds = 2.0  # wait() and progress(): the operator updates a run's status every few seconds

    def __init__(self, kube: KubeApi | None = None, namespace: str | None = None):
        self.kube = kube if kube is not None else Kube.for_cli()
        self.namespace = namespace or current_namespace()

    def create(self, doc: Mapping[str, Any], code: submit.CodeFile | None) -> str:
        namespace, name = self.namespace, doc["metadata"]["name"]
        if doc["metadata"].get("namespace", namespace) != namespace:
            raise InvalidRun(f"{KIND} {name} names namespace {doc['metadata']['namespace']}; this client works in "
                             f"{namespace} (TrainingClient(namespace=...))")  # fmt: skip
        doc = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
        if code is None:
            self.kube.create(doc)
        else:
            submit.submit(self.kube, submit.code_configmap(name, namespace, code), doc)
        return name

    def _run(self, name: str) -> dict[str, Any]:
        run = self.kube.get_run(self.namespace, name)
        if run is None:
            raise RunNotFound(f"no {KIND} {name} in namespace {self.namespace}")
        return run

    def get(self, name: str) -> RunStatus:
        return RunStatus.from_status(name, self._run(name).get("status") or {})

    def list(self) -> list[RunStatus]:
        runs = self.kube.list_runs(self.namespace)
        return [RunStatus.from_status(r["metadata"]["name"], r.get("status") or {}) for r in runs]

    def delete(self, name: str) -> None:
        self._run(name)
        self.kube.delete(API_VERSION, KIND, self.namespace, name)

    def set_suspend(self, name: str, suspend: bool) -> None:
        self._run(name)
        self.kube.patch_run_spec(self.namespace, name, {"suspend": suspend})

    def fetch_model(self, name: str, dest: Path) -> Path:
        """`dtr model get NAME DEST`: through a short-lived restricted pod that mounts the run's claim
        (docs/models.md), the version the run exported (else the latest on its volume); TransferError naming what
        went wrong."""
        from . import images, volume
        from .transfer import START_TIMEOUT

        reporter = volume.Reporter(f"get {name}", quiet=True)
        image = images.chooser(self.kube, self.namespace, run=name)  # the cluster's (DTR_TRAINER_IMAGE to choose)
        # In a thread of its own: the copy runs asyncio.run(), and a notebook's kernel already runs an event loop.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(volume.get, self.kube, self.namespace, name, dest, None, image, START_TIMEOUT,
                        reporter).result()  # fmt: skip
        return dest

    def epochs(self, name: str, now: RunStatus) -> list[Progress]:
        """The last finished epoch the status shows (status.progress keeps one)."""
        return [] if now.progress is None else [now.progress]

    def spec(self, name: str) -> dict[str, Any]:
        return dict(self._run(name).get("spec") or {})

    def history(self, name: str) -> list[Progress]:
        """Every finished epoch: the history file, read from the run's volume through a transfer pod (as `dtr model
        get` reads it); else, when the volume cannot be read or has no history, the chief's epoch-end lines in its
        pod log (while the pod is there)."""
        self._run(name)  # RunNotFound
        try:
            found = history_of(self._history_file(name))
        except Exception as err:  # any reason the volume is out of reach: the log may still have the epochs
            print(f"dtr: {name}'s history file could not be read from its volume ({err}); reading the chief's "
                  "log instead", file=sys.stderr)  # fmt: skip
            found = []
        if found:
            return found
        from .local.backend import chief_epochs
        from .local.runner import now_rfc3339

        try:
            return chief_epochs(list(self.logs(name, False, 0, None, False)), now_rfc3339())
        except worker_logs.LogsError:  # no pod any more: no epochs to be found
            return []

    def _history_file(self, name: str) -> str:
        from . import images, volume
        from . import transfer as tr

        pvc = volume.claim_of(self.kube, self.namespace, name, tr.RUN)  # the run's: never a claim of its name
        path = layout.history_file(layout.logs_dir(name))
        image = images.chooser(self.kube, self.namespace, run=name)
        with volume.transfer_pod(self.kube, self.namespace, pvc, image, True, f"get {layout.in_volume(path)}",
                                 tr.START_TIMEOUT) as pod:  # fmt: skip
            # In a thread of its own: a notebook's kernel has an event loop running in this one.
            with concurrent.futures.ThreadPoolExecutor(1) as thread:
                tail = thread.submit(asyncio.run, self._read_tail(pod, path)).result()
            return tail.decode("utf-8", "replace")

    async def _read_tail(self, pod: str, path: str) -> bytes:
        from dtr_operator.kube_streams import EXEC_STATUS, STDERR, STDOUT

        from . import transfer as tr

        argv = ["python", "-c", READ_TAIL, path, str(MAX_FILE)]
        out, err, status = bytearray(), bytearray(), None
        async with self.kube.exec_stream(self.namespace, pod, tr.CONTAINER, argv) as stream:
            while (got := await stream.read()) is not None:
                channel, data = got
                if channel == STDOUT and len(out) <= MAX_FILE:
                    out += data
                elif channel == STDERR and len(err) < 4096:
                    err += data
                elif channel == EXEC_STATUS:
                    status = data
        code, message = tr.exit_status(status) if status is not None else (-1, "the session ended without a status")
        if code not in (0, NO_FILE):
            raise tr.TransferError(tr.program_error(code, message, err.decode("utf-8", "replace")))
        return bytes(out[:MAX_FILE]) if code == 0 else b""

    def logs(self, name: str, follow: bool, worker: int | None, tail: int | None, previous: bool) -> Iterator[str]:
        if not follow:
            out = io.StringIO()
            worker_logs.show(self.kube, self.namespace, name, worker, previous, tail, out)
            yield from out.getvalue().splitlines()
            return
        yield from _followed(lambda out: worker_logs.follow(self.kube, self.namespace, name, worker, tail, out))

    def tensorboard(self, name: str, port: int | None, timeout: float, wait: bool) -> board.TensorBoardHandle:
        return board.start_in_cluster(self.kube, self.namespace, name, port, timeout, wait)


class _Lines(io.TextIOBase):
    """A stream whose whole lines go to a queue (logs.follow writes one line per write)."""

    def __init__(self, lines: queue.Queue[str | None]):
        self.lines = lines

    def write(self, text: str) -> int:
        for line in text.splitlines():
            self.lines.put(line)
        return len(text)


def _followed(follow: Any) -> Iterator[str]:
    """The lines follow(out) writes, as they come, from a thread; LogsError at the end when a worker's log could
    not be followed (follow said which, on stderr)."""
    lines: queue.Queue[str | None] = queue.Queue()
    result: list[Any] = []

    def pump() -> None:
        try:
            result.append(follow(_Lines(lines)))
        except Exception as err:  # raised in the caller's thread, below
            result.append(err)
        finally:
            lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=LOG_POLL_SECONDS)
        except queue.Empty:
            continue
        if line is None:
            break
        yield line
    if isinstance(result[0], Exception):
        raise result[0]
    if result[0] is False:
        raise worker_logs.LogsError("a worker's log could not be followed to its end (said above)")
