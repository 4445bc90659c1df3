"""dtr_client's local backend end to end: a run from a dict, two workers on the bundled digits data, no cluster.

One run for every call (TensorFlow's start costs ~10 s of the tier's budget each time): create, progress,
suspend, resume, wait, logs, history, list, delete; then a second, smaller run for `dtr plot` and `dtr compare`
of the two."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dtr_client import TrainingClient

from support.runs import digits_run, saved_models


def test_a_dict_trains_locally_one_progress_item_per_epoch_through_a_suspension(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)  # no cluster involved
    client = TrainingClient("local", local_dir=tmp_path / ".dtr")
    run = digits_run("client-local", workers=2, epochs=5, steps=30)
    name = client.create({"metadata": run["metadata"], "spec": run["spec"]})  # no apiVersion and kind needed
    progress = client.progress(name, timeout=900)
    seen = [next(progress), next(progress)]  # epoch 1 is in the backup once epoch 2 has ended

    client.suspend(name)
    paused = client.get(name)
    assert (paused.phase, paused.reason) == ("Suspended", "RunSuspended"), paused.status
    # The suspended status keeps the run's progress. It can lag the epoch the iterator last showed (seen once
    # in a fresh-clone run: epoch 1 after epoch 2 was seen; an open bug of the local runner's status, in the
    # closing note of session 9); the epochs after resume are checked exactly below.
    assert paused.progress is not None and paused.progress.epoch >= 1
    client.resume(name)

    seen += list(progress)  # the same iterator, on through the resumed run
    assert [(p.epoch, p.epochs) for p in seen] == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]
    assert all("loss" in p.metrics and "accuracy" in p.metrics for p in seen), seen

    final = client.wait(name, timeout=120)
    assert (final.phase, final.reason) == ("Succeeded", "TrainingSucceeded"), final.status
    assert final.metrics["epochs"] == 5 and 0 <= final.metrics["accuracy"] <= 1
    assert final.model_path == "/mnt/dtr/models/client-local/1"
    assert final.model_uri == "pvc://client-local-data/models/client-local"
    volume = tmp_path / ".dtr" / "volumes" / "client-local-data"
    assert saved_models(volume) == [Path(final.local_model_path)] == [volume / "models" / "client-local" / "1"]
    assert final.progress is not None and final.progress.metrics == seen[-1].metrics  # the last epoch's, kept

    chief = list(client.logs(name, worker=0))
    assert any("resumed from backup at epoch" in line for line in chief), "\n".join(chief[-40:])
    assert any(line.startswith("[worker-1] ") for line in client.logs(name))

    # Every epoch in the history file, each once, though the resumed chief appended again.
    history = client.history(name)
    assert [(p.epoch, p.epochs) for p in history] == [(e, 5) for e in range(1, 6)], history
    assert history[-1].metrics["loss"] == pytest.approx(seen[-1].metrics["loss"], abs=6e-5)
    assert all(p.seconds and p.seconds > 0 and p.time for p in history), history
    # The built-in model's eval split, validated every epoch (docs/experiments.md#validation): val_* curves.
    assert all({"val_loss", "val_accuracy"} <= p.metrics.keys() for p in history), history
    loss_axes = client.plot(name).axes[0]
    assert [line.get_label() for line in loss_axes.get_lines()] == [name, f"{name} (val_loss)"]
    assert [line.get_linestyle() for line in loss_axes.get_lines()] == ["-", "--"]

    other = digits_run("client-other", workers=1, epochs=2, steps=10)
    client.wait(client.create({"metadata": other["metadata"], "spec": other["spec"]}), timeout=600)
    assert sorted(r.name for r in client.list()) == ["client-local", "client-other"]
    check_dtr_plot_and_compare(tmp_path, [name, "client-other"])
    client.delete(name)
    client.delete("client-other")
    assert client.list() == []


def dtr(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The dtr command, on the local runs of this test."""
    return subprocess.run([sys.executable, "-m", "dtr_cli", *argv, "--backend", "local", "--dir",
                           str(tmp_path / ".dtr")], cwd=tmp_path, env={**os.environ, "MPLBACKEND": "Agg"},
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def check_dtr_plot_and_compare(tmp_path: Path, runs: list[str]) -> None:
    """The PNG decodes and is a picture (its size, its colours), and compare names the fields that differ."""
    from matplotlib import image

    done = dtr(tmp_path, "plot", *runs)
    assert done.returncode == 0 and done.stdout == "curves.png\n", done.stderr
    png = tmp_path / "curves.png"
    pixels = image.imread(png)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert png.stat().st_size > 20_000 and pixels.shape[0] > 300 and pixels.shape[1] > 600, pixels.shape
    assert len(colours) > 100, len(colours)  # lines of two colours, text, antialiasing: not a blank canvas

    done = dtr(tmp_path, "compare", *runs)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line.strip()}
    assert rows["phase"] == ["Succeeded", "Succeeded"] and rows["epochs"] == ["5/5", "2/2"], done.stdout
    assert rows["spec.training.epochs"] == ["5", "2"] and rows["spec.workers"] == ["2", "1"], done.stdout
    assert "spec.training.dataset" not in rows  # the same in both

    done = dtr(tmp_path, "plot", "no-such-run")  # not there: refused, as by dtr logs and dtr tensorboard
    assert (done.returncode, done.stderr.count("\n")) == (1, 1) and "no-such-run" in done.stderr, done.stderr
