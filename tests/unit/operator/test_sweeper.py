"""The sweep's turn (reconcile/sweeps.py) over the fake API: the status first, then the trials; a write that meets
another writer's is done again from what the API holds, never creating a trial twice."""

from __future__ import annotations

import copy

import pytest
from dtr_operator.kube import ApiError, Conflict
from dtr_operator.reconcile.sweeps import Sweeper

from support.fake_kube import FakeKube
from support.reconciler import reconciler

SWEEP = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingSweep",
         "metadata": {"name": "s", "namespace": "ml", "uid": "u-1", "generation": 1},
         "spec": {"template": {"spec": {"training": {"epochs": 3}}}, "space": {"width": {"choice": [8, 16, 32]}},
                  "algorithm": "grid", "trials": 3, "parallelTrials": 2, "objective": {"metric": "val_accuracy"},
                  "earlyStopping": {"median": {"warmupEpochs": 1, "minTrials": 1}}}}  # fmt: skip


def sweeper(kube: FakeKube) -> tuple[Sweeper, list]:
    rec, events = reconciler(kube)
    return Sweeper(rec.ctx), events


def made(kube: FakeKube) -> list[str]:
    return [args["manifest"]["metadata"]["name"] for args in kube.succeeded("create")]


def set_run_status(kube: FakeKube, name: str, **status) -> None:
    run = kube.stored("DistTrainingRun", name)
    kube.put({**run, "status": status, "metadata": {**run["metadata"], "resourceVersion": None}})


def sweep_status(kube: FakeKube) -> dict:
    return kube.stored("DistTrainingSweep", "s").get("status") or {}


def test_a_turn_writes_the_trials_then_makes_them_and_a_conflict_takes_another_turn():
    kube = FakeKube(namespace="ml")
    kube.put(copy.deepcopy(SWEEP))
    kube.fail("patch", Conflict(409, "Conflict", "the object has been modified"))
    turns, _ = sweeper(kube)
    turns.turn("ml", "s")
    assert made(kube) == ["s-0", "s-1"], "made once"
    done = [(c.method, c.error is None) for c in kube.calls if c.method in ("patch", "create")]
    assert done == [("patch", False), ("patch", True), ("create", True), ("create", True)], "the status first"
    assert [t["run"] for t in sweep_status(kube)["trials"]] == ["s-0", "s-1"]
    turns.turn("ml", "s")
    assert made(kube) == ["s-0", "s-1"], "a turn with nothing new makes nothing"


def test_a_weak_trial_is_stopped_its_run_deleted_and_the_sweep_ends_with_the_best():
    kube = FakeKube(namespace="ml")
    kube.put(copy.deepcopy(SWEEP))
    turns, events = sweeper(kube)
    turns.turn("ml", "s")
    progress = {"epoch": 2, "metrics": [{"name": "val_accuracy", "value": "0.9"}]}
    set_run_status(kube, "s-0", phase="Running", progress=progress)
    turns.turn("ml", "s")  # epoch 2 seen while it runs: a succeeded run's progress adds no point
    set_run_status(kube, "s-0", phase="Succeeded", progress={**progress, "epoch": 3}, metrics={"accuracy": 0.91},
                   model={"path": "/mnt/dtr/models/s-0/1"})  # fmt: skip
    set_run_status(kube, "s-1", phase="Running", progress={**progress, "metrics": [
        {"name": "val_accuracy", "value": "0.2"}]})  # fmt: skip
    turns.turn("ml", "s")
    assert kube.stored("DistTrainingRun", "s-1") is None, "stopped: deleted"
    assert made(kube) == ["s-0", "s-1", "s-2"]
    assert [t["phase"] for t in sweep_status(kube)["trials"]] == ["Succeeded", "Stopped", ""]
    assert any(reason == "TrialStopped" for _, _, reason, _ in events)
    set_run_status(kube, "s-2", phase="Succeeded", metrics={"accuracy": 0.95}, model={"path": "/m/s-2/1"})
    turns.turn("ml", "s")
    st = sweep_status(kube)
    assert (st["phase"], st["best"]["run"], st["best"]["model"]) == ("Succeeded", "s-2", "/m/s-2/1")
    assert st["trialsDone"] == "3/3" and "completionTime" in st
    assert events[-1][2:] == ("SweepSucceeded", "best val_accuracy 0.95: trial s-2")


def test_a_trial_recorded_but_not_made_is_made_by_the_next_turn():
    """The status is written before the trial is made: an operator restarted (or an API error) in between leaves
    a record without a run, which the next turn makes."""
    kube = FakeKube(namespace="ml")
    kube.put(copy.deepcopy(SWEEP))
    kube.fail("create", ApiError(503, "ServiceUnavailable", "etcd is away"))
    turns, _ = sweeper(kube)
    with pytest.raises(ApiError):
        turns.turn("ml", "s")
    assert [t["run"] for t in sweep_status(kube)["trials"]] == ["s-0", "s-1"] and made(kube) == []
    turns.turn("ml", "s")
    assert made(kube) == ["s-0", "s-1"]
