"""The client's cluster backend: runs as DistTrainingRuns on an API server, through kube.py (dtr's own calls).

Credentials as every dtr command takes them (Kube.for_cli): KUBECONFIG, ~/.kube/config, then a pod's service
account. Logs are `dtr logs`'s (dtr_operator.logs); a model file goes as `dtr submit` sends it.
"""

from __future__ import annotations

import io
import os
import queue
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dtr_operator import logs as worker_logs
from dtr_operator import submit
from dtr_operator.kube import Kube, current_namespace
from dtr_operator.spec import API_VERSION, KIND

from . import tensorboard as board
from .results import InvalidRun, Progress, RunNotFound, RunStatus

LOG_POLL_SECONDS = 0.5  # how often a follower waiting for a line wakes up (for Ctrl-C)


class ClusterBackend:
    poll_seconds = 2.0  # wait() and progress(): the operator updates a run's status every few seconds

    def __init__(self, kube: Kube | None = None, namespace: str | None = None):
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
        from dtr_operator import transfer_cli
        from dtr_operator.settings import default_trainer_image
        from dtr_operator.transfer import START_TIMEOUT

        reporter = transfer_cli.Reporter(f"get {name}", quiet=True)
        # In a thread of its own: the copy runs asyncio.run(), and a notebook's kernel already runs an event loop.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(transfer_cli.get, self.kube, self.namespace, name, dest, None,
                        default_trainer_image(os.environ), START_TIMEOUT, reporter).result()  # fmt: skip
        return dest

    def epochs(self, name: str, now: RunStatus) -> list[Progress]:
        """The last finished epoch the status shows (status.progress keeps one)."""
        return [] if now.progress is None else [now.progress]

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
