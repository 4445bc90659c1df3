"""The operator's Reconciler over the unit tier's fake API (support.fake_kube), and what the unit tests read back
from that API: the events it posts, the status patches and TFJob runPolicy patches it wrote."""

from __future__ import annotations

from typing import Any

from dtr_operator.api import API_VERSION, KIND
from dtr_operator.reconcile.reconciler import Reconciler

from support.fake_kube import FakeKube
from support.tfjobs import TFJOB_UID

IMAGE = "localhost/distml/trainer:test"
Event = tuple[str, str, str, str]  # run name, type, reason, message
# The TFJob of the unit tests' run (support.runs.make_run, uid u-1), as the operator made it: owned by the run.
TFJOB = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
         "metadata": {"name": "mnist-cnn", "namespace": "ml", "uid": TFJOB_UID, "ownerReferences": [
             {"apiVersion": API_VERSION, "kind": KIND, "name": "mnist-cnn", "uid": "u-1", "controller": True}]}}


def reconciler(kube: FakeKube, **settings: Any) -> tuple[Reconciler, list[Event]]:
    """A Reconciler on `kube` (settings: its refusals, its clock), and the events it posts, in order."""
    events: list[Event] = []

    def emit(body: Any, event_type: str, reason: str, message: str) -> None:
        events.append((body["metadata"]["name"], event_type, reason, message))

    return Reconciler(kube, emit, IMAGE, **settings), events


def status_writes(kube: FakeKube) -> list[dict[str, Any]]:
    """The merge patches of run statuses the API took, in order."""
    return [args["status"] for args in kube.succeeded("patch_run_status")]


def run_policy_patches(kube: FakeKube) -> list[tuple[str, dict[str, Any]]]:
    """(TFJob name, what was patched: runPolicy fields and annotations) for each runPolicy patch the API took."""
    return [(args["name"], {k: v for k, v in args.items() if k not in ("namespace", "name")})
            for args in kube.succeeded("patch_tfjob_run_policy")]  # fmt: skip
