"""dtr_client's local backend end to end: a run from a dict, two workers on the bundled digits data, no cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from dtr_client import TrainingClient

from support.runs import digits_run, saved_models


def test_a_dict_trains_locally_with_one_progress_item_per_epoch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)  # no cluster involved
    client = TrainingClient("local", local_dir=tmp_path / ".dtr")
    run = digits_run("client-local", workers=2, epochs=3, steps=10)
    name = client.create({"metadata": run["metadata"], "spec": run["spec"]})  # no apiVersion and kind needed

    seen = list(client.progress(name, timeout=900))
    assert [(p.epoch, p.epochs) for p in seen] == [(1, 3), (2, 3), (3, 3)]
    assert all("loss" in p.metrics and "accuracy" in p.metrics for p in seen), seen

    final = client.wait(name, timeout=120)
    assert (final.phase, final.reason) == ("Succeeded", "TrainingSucceeded"), final.status
    assert final.metrics["epochs"] == 3 and 0 <= final.metrics["accuracy"] <= 1
    assert final.model_path == "/mnt/dtr/models/client-local/1"
    assert final.model_uri == "pvc://client-local-data/models/client-local"
    volume = tmp_path / ".dtr" / "volumes" / "client-local-data"
    assert saved_models(volume) == [Path(final.local_model_path)] == [volume / "models" / "client-local" / "1"]
    assert final.progress is not None and final.progress.epoch == 3
    assert final.progress.metrics == seen[-1].metrics  # the last epoch's figures, kept in the final status

    lines = list(client.logs(name))
    assert any(ln.startswith("[worker-1] ") for ln in lines) and any(ln.startswith("[worker-0] ") for ln in lines)
    assert [r.name for r in client.list()] == [name]
    client.delete(name)
    assert client.list() == []
