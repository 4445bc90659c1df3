"""dtr_client's local backend end to end: a run from a dict, two workers on the bundled digits data, no cluster.

One run for every call (TensorFlow's start costs ~10 s of the tier's budget each time): create, progress,
suspend, resume, wait, logs, list, delete."""

from __future__ import annotations

from pathlib import Path

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
    assert [r.name for r in client.list()] == [name]
    client.delete(name)
    assert client.list() == []
