"""dtr sweep plot's data: each trial's curves, its run's whole history while it is there, the objective the sweep
recorded for a stopped trial (whose run the operator deleted), drawn as `dtr plot` draws runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dtr_client.results import Progress, RunNotFound
from dtr_client.sweeps import SweepClient, recorded_curve, trial_label

from support.fake_kube import FakeKube

NS = "ml"
TRIALS = [
    {"index": 0, "run": "lr-0", "phase": "Succeeded", "curve": [[1, 0.5], [2, 0.8]], "final": 0.8},
    {"index": 1, "run": "lr-1", "phase": "Stopped", "curve": [[1, 0.2], [2, 0.3]], "reason": "worse"},
    {"index": 2, "run": "lr-2", "phase": "Succeeded", "curve": [[1, 0.6]], "final": 0.7},  # its run deleted since
    {"index": 3, "run": "lr-3", "phase": ""},  # made, no epoch yet
]


def sweep_client() -> SweepClient:
    kube = FakeKube(NS)
    kube.create({"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingSweep",
                 "metadata": {"name": "lr", "namespace": NS},
                 "spec": {"objective": {"metric": "val_accuracy"}}, "status": {"trials": TRIALS}})  # fmt: skip
    return SweepClient(namespace=NS, kube=kube)


def history(run: str) -> list[Progress]:
    if run == "lr-0":
        return [Progress(e, 2, {"loss": 1.0 / e, "val_accuracy": v, "accuracy": v}) for e, v in ((1, 0.5), (2, 0.8))]
    if run == "lr-3":
        return []
    raise RunNotFound(run)


def test_a_trial_whose_run_is_there_brings_its_whole_history_a_stopped_or_gone_one_its_recorded_objective():
    histories = sweep_client().histories("lr", history)
    assert list(histories) == ["lr-0", "lr-1 (stopped at epoch 2)", "lr-2"], "lr-3 has no epoch yet"
    assert histories["lr-0"] == history("lr-0")
    assert histories["lr-1 (stopped at epoch 2)"] == [Progress(1, 2, {"val_accuracy": 0.2}),
                                                      Progress(2, 2, {"val_accuracy": 0.3})]  # fmt: skip
    assert histories["lr-2"] == recorded_curve(TRIALS[2], "val_accuracy")


def test_the_labels_say_which_trials_stopped_and_where():
    assert [trial_label(t) for t in TRIALS] == ["lr-0", "lr-1 (stopped at epoch 2)", "lr-2", "lr-3"]


def test_dtr_sweep_plot_draws_every_trial_into_one_png(tmp_path: Path, monkeypatch: Any) -> None:
    from dtr_cli import sweep as cli

    client = sweep_client()
    monkeypatch.setattr(cli, "_client", lambda args: client)

    class Runs:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        history = staticmethod(history)

    monkeypatch.setattr("dtr_client.TrainingClient", Runs)
    out = tmp_path / "trials.png"
    args = type("Args", (), {"sweep": "lr", "namespace": NS, "output": str(out), "only": None})()
    cli._plot(args)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
