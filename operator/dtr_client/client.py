"""TrainingClient: DistTrainingRuns from Python, one API over two backends (docs/client.md).

    client = TrainingClient()                       # a cluster when there are credentials, else local processes
    name = client.create("wine.py", workers=2, epochs=10, dataset="wine")
    for p in client.progress(name):                 # one item per finished epoch
        print(p.epoch, p.metrics)
    board = client.tensorboard(name)                # board.url until board.stop()
    final = client.wait(name)                       # RunStatus, or RunFailed with the run's reason and message
    client.plot(name, path="curves.png")            # every epoch's loss and metrics (history())
    model = client.fetch_model(name, "model")       # the exported SavedModel, on this machine
    client.evaluate(model)                          # its accuracy on the run's held-out split
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from . import models, submit
from .results import Progress, RunStatus, new_epochs, outcome, run_document
from .tensorboard import START_TIMEOUT, TensorBoardHandle


class Backend(Protocol):
    """Where runs go: ClusterBackend (cluster.py) or LocalBackend (local.py)."""

    poll_seconds: float

    def create(self, doc: Mapping[str, Any], code: submit.CodeFile | None) -> str: ...
    def get(self, name: str) -> RunStatus: ...
    def list(self) -> list[RunStatus]: ...
    def delete(self, name: str) -> None: ...
    def set_suspend(self, name: str, suspend: bool) -> None: ...
    def epochs(self, name: str, now: RunStatus) -> list[Progress]: ...
    def logs(self, name: str, follow: bool, worker: int | None, tail: int | None,
             previous: bool) -> Iterator[str]: ...  # fmt: skip
    def tensorboard(self, name: str, port: int | None, timeout: float, wait: bool) -> TensorBoardHandle: ...
    def fetch_model(self, name: str, dest: Path) -> Path: ...
    def history(self, name: str) -> list[Progress]: ...
    def spec(self, name: str) -> dict[str, Any]: ...


def _backend(backend: str, namespace: str | None, local_dir: str | Path | None) -> Backend:
    """"cluster", "local", or "auto": the cluster when dtr's commands would find credentials (Kube.for_cli:
    KUBECONFIG, ~/.kube/config, a pod's service account), else local processes."""
    from dtr_operator.kube import NoCredentials

    from .cluster import ClusterBackend
    from .local.backend import LocalBackend

    if backend not in ("auto", "cluster", "local"):
        raise ValueError(f"backend {backend!r}: one of 'auto', 'cluster', 'local'")
    if backend == "local":
        return LocalBackend(local_dir)
    try:
        return ClusterBackend(namespace=namespace)
    except NoCredentials:
        if backend == "cluster":
            raise
        return LocalBackend(local_dir)


class TrainingClient:
    """Create, watch and manage DistTrainingRuns; the same calls on a cluster and on this machine."""

    def __init__(self, backend: str | Backend = "auto", *, namespace: str | None = None,
                 local_dir: str | Path | None = None):  # fmt: skip
        self.backend = _backend(backend, namespace, local_dir) if isinstance(backend, str) else backend

    def create(self, run: str | Path | Mapping[str, Any], *, name: str | None = None, **options: Any) -> str:
        """Start a run from a dict, a YAML file with one run, or a model file (FILE.py, with the training options
        of `dtr submit`: workers, epochs, dataset, ..., params={"width": 64}); the run's name. InvalidRun when it
        would be refused."""
        doc, code = run_document(run, name, options)
        return self.backend.create(doc, code)

    def get(self, name: str) -> RunStatus:
        return self.backend.get(name)

    def list(self) -> list[RunStatus]:
        return self.backend.list()

    def wait(self, name: str, timeout: float | None = None) -> RunStatus:
        """The run's final status once it Succeeded; RunFailed (its reason and message) when it Failed;
        TimeoutError when it is still going after timeout seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (done := outcome(self.backend.get(name))) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{name} has not finished within {timeout:g}s: {self.backend.get(name).phase}")
            time.sleep(self.backend.poll_seconds)
        return done

    def progress(self, name: str, timeout: float | None = None) -> Iterator[Progress]:
        """One item per finished epoch, in order, until the run ends (wait() then says how). On a cluster from
        status.progress, which keeps the last epoch: an epoch shorter than the poll may be passed over."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = 0
        while True:
            now = self.backend.get(name)  # before the epochs: a run that has ended has told its last one
            for item in new_epochs(seen, self.backend.epochs(name, now)):
                seen = item.epoch
                yield item
            if now.done or (deadline is not None and time.monotonic() >= deadline):
                return
            time.sleep(self.backend.poll_seconds)

    def logs(self, name: str, *, follow: bool = False, worker: int | None = None, tail: int | None = None,
             previous: bool = False) -> Iterator[str]:  # fmt: skip
        """The workers' lines, merged, each prefixed `[worker-N]`; with follow, as they come until the run ends."""
        return self.backend.logs(name, follow, worker, tail, previous)

    def tensorboard(self, name: str, *, port: int | None = None, timeout: float = START_TIMEOUT) -> TensorBoardHandle:
        """TensorBoard on the run's logs, at handle.url (http://127.0.0.1:PORT/, a free port unless given) once it
        answers; handle.stop() ends it. On a cluster a short-lived pod serves the run's volume read-only through
        a port-forward (docs/models.md#tensorboard-dtr-tensorboard). TensorBoardError when it cannot serve them."""
        return self.backend.tensorboard(name, port, timeout, True)

    def fetch_model(self, name: str, dest: str | Path) -> Path:
        """The run's exported model (a SavedModel and its lineage.json) copied into DEST, a directory that must
        not exist or be empty; DEST. On a cluster as `dtr model get` copies it (docs/models.md), locally out of
        the run's volume (NoModel when the run has exported none; on a cluster, dtr model get's TransferError)."""
        return self.backend.fetch_model(name, Path(dest))

    def evaluate(self, model_dir: str | Path, *, dataset: str | None = None, seed: int | None = None,
                 data_dir: str | Path | None = None, python: str | None = None) -> dict[str, Any]:  # fmt: skip
        """A model directory on this machine scored on its run's held-out split (dataset and seed from its
        lineage.json unless given): {"accuracy", "examples", "dataset", "seed"}. In the trainer's Python
        (TensorFlow; `python`, default DTR_TRAINER_PYTHON or the repository's .venv/trainer), as `dtr run`
        runs the workers; EvaluationFailed with the scorer's error."""
        from .local import runner

        return models.evaluate(python or runner.default_python(), model_dir, dataset, seed, data_dir)

    def history(self, name: str) -> list[Progress]:
        """Every finished epoch of the run, in order, each once (with its seconds and the time it ended), from
        the history file the chief writes on the run's volume; during the run and after it."""
        return self.backend.history(name)

    def spec(self, name: str) -> dict[str, Any]:
        """The run's spec as it was given (the API's defaults filled in on a cluster)."""
        return self.backend.spec(name)

    def params(self, name: str) -> dict[str, Any]:
        """The run's own hyperparameters, spec.training.params (docs/experiments.md#params); {} when it has none."""
        return dict((self.backend.spec(name).get("training") or {}).get("params") or {})

    def plot(self, *names: str, path: str | Path | None = None, metrics: Iterable[str] | None = None) -> Any:
        """A matplotlib Figure of the runs' curves (dtr_client.plots): loss and each metric per epoch, the runs'
        names in the legend; a notebook shows it inline. With path, also saved there as a PNG."""
        from .plots import plot_histories

        figure = plot_histories({name: self.history(name) for name in names}, metrics)
        if path is not None:
            figure.savefig(path, format="png", dpi=100)
        return figure

    def delete(self, name: str) -> None:
        self.backend.delete(name)

    def suspend(self, name: str) -> None:
        """Stop the run's workers, keeping its volume and epochs (docs/scheduling.md); resume() continues it."""
        self.backend.set_suspend(name, True)

    def resume(self, name: str) -> None:
        self.backend.set_suspend(name, False)
