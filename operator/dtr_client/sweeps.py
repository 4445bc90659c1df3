"""SweepClient: start, read and wait for DistTrainingSweeps on a cluster (docs/experiments.md#sweeps), the library
under `dtr sweep`. Its trials are DistTrainingRuns: TrainingClient reads, plots and compares them.

    sweeps = SweepClient(namespace="team-a")
    name = sweeps.create("examples/sweep-wine.yaml")
    final = sweeps.wait(name)                       # SweepFailed (its message) when it fails
    final["best"]                                   # {"run", "trial", "value", "point", "model"}
    sweeps.histories(name, TrainingClient("cluster").history)  # each trial's curves, for plots.plot_histories
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from dtr_operator.api import API_VERSION, SWEEP_KIND
from dtr_operator.kube import Kube, current_namespace
from dtr_operator.kube_api import KubeApi

from .results import InvalidRun, Progress, RunNotFound

DONE = ("Succeeded", "Failed")


class SweepFailed(Exception):
    """The sweep ended Failed: its status.message."""


def sweep_document(sweep: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """A sweep from a dict or a YAML file holding one; InvalidRun for anything else."""
    if isinstance(sweep, Mapping):
        doc: Any = dict(sweep)
    else:
        try:
            doc = yaml.safe_load(Path(sweep).read_text())
        except (OSError, yaml.YAMLError) as err:
            raise InvalidRun(f"{sweep}: {err}") from None
    if not isinstance(doc, dict) or doc.get("kind") != SWEEP_KIND or not (doc.get("metadata") or {}).get("name"):
        raise InvalidRun(f"{sweep}: not a {SWEEP_KIND} with a metadata.name")
    return {**doc, "apiVersion": doc.get("apiVersion") or API_VERSION}


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _point(point: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={_value(v)}" for k, v in sorted(point.items())) or "-"


def _trial_line(trial: Mapping[str, Any], best: str | None) -> str:
    curve = trial.get("curve") or []
    epoch, last = (str(curve[-1][0]), _value(curve[-1][1])) if curve else ("-", "-")
    final = _value(trial["final"]) if "final" in trial else "-"
    mark = "*" if trial.get("run") == best else " "
    line = (f"{mark} {trial.get('run', ''):<24} {trial.get('phase') or 'Pending':<10} {epoch:>5} {last:>8} "
            f"{final:>8}  {_point(trial.get('point') or {})}")  # fmt: skip
    return line + (f"  ({trial['reason']})" if trial.get("reason") else "")


def recorded_curve(trial: Mapping[str, Any], metric: str) -> list[Progress]:
    """The objective's value at each epoch the sweep saw, as its status keeps it (status.trials[].curve): all that
    is left of a stopped trial, whose run was deleted."""
    points = [(int(e), float(v)) for e, v in trial.get("curve") or []]
    last = points[-1][0] if points else 0
    return [Progress(epoch, last, {metric: value}) for epoch, value in points]


def trial_label(trial: Mapping[str, Any]) -> str:
    curve = trial.get("curve") or []
    if trial.get("phase") == "Stopped" and curve:
        return f"{trial.get('run')} (stopped at epoch {curve[-1][0]})"
    return str(trial.get("run"))


def _run_history(trial: Mapping[str, Any], history: Callable[[str], list[Progress]]) -> list[Progress]:
    """The trial's run's history while the run is there; [] for a stopped trial (its run deleted) or one gone."""
    run = trial.get("run")
    if trial.get("phase") == "Stopped" or not isinstance(run, str):
        return []
    try:
        return history(run)
    except RunNotFound:
        return []


def trial_lines(status: Mapping[str, Any]) -> list[str]:
    """`dtr sweep status`: the sweep's phase and message, then one line per trial (its point, last epoch seen and
    value, final value, why it stopped or failed), the best marked *. Pure."""
    best = (status.get("best") or {}).get("run")
    head = f"{status.get('phase') or 'Pending'} {status.get('trialsDone') or ''}: {status.get('message') or ''}"
    columns = f"  {'RUN':<24} {'PHASE':<10} {'EPOCH':>5} {'LAST':>8} {'FINAL':>8}  POINT"
    return [head, columns, *(_trial_line(t, best) for t in status.get("trials") or [])]


class SweepClient:
    poll_seconds = 2.0

    def __init__(self, *, namespace: str | None = None, kube: KubeApi | None = None):
        self.kube = kube if kube is not None else Kube.for_cli()
        self.namespace = namespace or current_namespace()

    def create(self, sweep: str | Path | Mapping[str, Any]) -> str:
        """Start a sweep from a dict or a YAML file; its name. The API server's refusal (a field it names) raises
        kube.ApiError."""
        doc = sweep_document(sweep)
        doc["metadata"] = {**doc["metadata"], "namespace": self.namespace}
        self.kube.create(doc)
        return str(doc["metadata"]["name"])

    def get(self, name: str) -> dict[str, Any]:
        """The sweep's status ({} before the operator's first turn); RunNotFound when there is no such sweep."""
        return dict(self._sweep(name).get("status") or {})

    def _sweep(self, name: str) -> dict[str, Any]:
        found = self.kube.get(API_VERSION, SWEEP_KIND, self.namespace, name)
        if found is None:
            raise RunNotFound(f"no {SWEEP_KIND} {name} in namespace {self.namespace}")
        return found

    def wait(self, name: str, timeout: float | None = None,
             on_change: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:  # fmt: skip
        """The final status once it Succeeded; SweepFailed when it Failed; TimeoutError after timeout seconds.
        on_change gets each status that differs from the last."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last: dict[str, Any] | None = None
        while True:
            status = self.get(name)
            if status != last and on_change is not None:
                on_change(status)
            last = status
            if status.get("phase") == "Failed":
                raise SweepFailed(status.get("message") or "the sweep failed")
            if status.get("phase") == "Succeeded":
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"sweep {name} has not finished within {timeout:g}s: {status.get('trialsDone')}")
            time.sleep(self.poll_seconds)

    def histories(self, name: str, history: Callable[[str], list[Progress]]) -> dict[str, list[Progress]]:
        """Each trial's epochs by its label: its run's whole history (`history`: TrainingClient.history, train and
        validation figures), or, for a stopped trial, whose run is gone, the objective the sweep recorded."""
        sweep = self._sweep(name)
        metric = str(((sweep.get("spec") or {}).get("objective") or {}).get("metric") or "objective")
        found = {trial_label(t): _run_history(t, history) or recorded_curve(t, metric)
                 for t in (sweep.get("status") or {}).get("trials") or []}  # fmt: skip
        return {label: epochs for label, epochs in found.items() if epochs}

    def trials(self, name: str) -> list[str]:
        """The runs of the sweep's trials that are still there (a stopped trial's run is deleted)."""
        kept = [t.get("run") for t in self.get(name).get("trials") or [] if t.get("phase") != "Stopped"]
        return [run for run in kept if isinstance(run, str)]
