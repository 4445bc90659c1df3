"""Helpers shared by the operator's pure-function tests (a plain module, not a conftest)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def make_run(spec: dict[str, Any] | None = None, name: str = "mnist-cnn", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distml.dev/v1alpha1",
        "kind": "DistTrainingRun",
        "metadata": {"name": name, "namespace": "ml", **meta},
        "spec": copy.deepcopy(spec) if spec is not None else {},
    }
