"""Helpers for the end-to-end tests of `dtr run`: small digits runs and the models they leave."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def digits_run(
    name: str,
    *,
    workers: int = 2,
    epochs: int = 3,
    steps: int = 10,
    restart: str = "OnFailure",
    reclaim: str = "Retain",
    backoff: int = 3,
) -> dict[str, Any]:
    """A tiny run on the bundled digits data: a few epochs of a few steps (2 cores, CI minutes)."""
    return {
        "apiVersion": "distml.dev/v1alpha1",
        "kind": "DistTrainingRun",
        "metadata": {"name": name},
        "spec": {
            "workers": workers,
            "training": {"model": "cnn", "dataset": "digits", "epochs": epochs, "batchSizePerWorker": 32,
                         "stepsPerEpoch": steps, "learningRate": 0.002},
            "storage": {"size": "64Mi", "reclaimPolicy": reclaim},
            "restartPolicy": restart,
            "backoffLimit": backoff,
        },
    }  # fmt: skip


def saved_models(root: Path) -> list[Path]:
    """Every SavedModel directory under root (a directory holding saved_model.pb)."""
    return sorted(p.parent for p in root.rglob("saved_model.pb"))
