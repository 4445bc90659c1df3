"""DistTrainingRun documents, as a user writes them, for every tier; and the models a run leaves.

`run_doc` builds each one. `make_run` is the unit tier's stored run (namespace `ml`, any metadata such
as a uid); `digits_run` a small run that really trains on the bundled digits data.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dtr_operator.api import GROUP, VERSION

KIND = "DistTrainingRun"
UNIT_NAMESPACE = "ml"
_EMPTY_SPEC: Any = object()  # run_doc's default: `spec: {}` (None means no spec field at all)
# A run's own model whose epochs sleep instead of training (ctx.params epoch_seconds): for tests that need a run to
# last, not to compute (`dtr submit SLOW_EPOCHS_MODEL ... --param epoch_seconds=N`).
SLOW_EPOCHS_MODEL = Path(__file__).resolve().parent / "slow_epochs_model.py"


def run_doc(
    name: str,
    namespace: str | None = None,
    spec: Any = _EMPTY_SPEC,
    *,
    top: Mapping[str, Any] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    """A DistTrainingRun named `name`; the namespace only when given (kubectl -n supplies it otherwise).

    `spec` is copied as it is, so a test may send any value; its default is an empty spec and None
    leaves the field out. `top` adds top-level keys (say, an unknown root field); `metadata` adds
    metadata keys (a uid, labels)."""
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace is not None else {}), **metadata}
    doc: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": meta}
    if spec is not None:
        doc["spec"] = {} if spec is _EMPTY_SPEC else copy.deepcopy(spec)
    doc.update(copy.deepcopy(dict(top or {})))
    return doc


def make_run(spec: Mapping[str, Any] | None = None, name: str = "mnist-cnn", **metadata: Any) -> dict[str, Any]:
    """A run as the operator's pure functions get it from the API: in namespace `ml`, spec {} by default."""
    return run_doc(name, UNIT_NAMESPACE, {} if spec is None else spec, **metadata)


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
    return run_doc(name, spec={
        "workers": workers,
        "training": {"model": "cnn", "dataset": "digits", "epochs": epochs, "batchSizePerWorker": 32,
                     "stepsPerEpoch": steps, "learningRate": 0.002},
        "storage": {"size": "64Mi", "reclaimPolicy": reclaim},
        "restartPolicy": restart,
        "backoffLimit": backoff,
    })  # fmt: skip


def slow_epochs_run(name: str, epochs: int, epoch_seconds: float, **digits: Any) -> dict[str, Any]:
    """digits_run's run (its workers, policies, storage) training SLOW_EPOCHS_MODEL instead: its epochs after the
    first sleep `epoch_seconds`, for tests of a run's life on a node, not of its training. Its code is the ConfigMap
    <name>-code, key model.py, which the caller creates (as `dtr submit` would, as whom the test says)."""
    doc = digits_run(name, **digits)
    doc["spec"]["training"] = {"code": {"configMap": f"{name}-code", "key": "model.py"}, "epochs": epochs,
                               "batchSizePerWorker": 16, "params": {"epoch_seconds": epoch_seconds}}  # fmt: skip
    return doc


def saved_models(root: Path) -> list[Path]:
    """Every SavedModel directory under root (a directory holding saved_model.pb)."""
    return sorted(p.parent for p in root.rglob("saved_model.pb"))
