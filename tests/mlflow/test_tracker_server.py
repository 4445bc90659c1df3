"""dtr_trainer.tracking's Tracker against a real MLflow server, without TensorFlow: a chief restarted logs into the
run it began, a version the registry refuses leaves the run logged, a version in a bucket is registered by its s3://
URI. (The whole trainer against it: test_tracking_run.py.)"""

from __future__ import annotations

import json

from dtr_trainer import lineage
from dtr_trainer import tracking_plan as plan
from dtr_trainer.tracking import Tracker

from support.mlflow_server import as_dict, metric_history, model_versions, runs

TRAINING = {"learningRate": 0.01, "epochs": 2, "stepsPerEpoch": 5}


def lineage_of(training: dict) -> dict[str, str]:
    return {lineage.LINEAGE_PATH: json.dumps({"training": training})}


def chief(uri: str, who: plan.Identity, claim: str | None, said: list[str]) -> Tracker:
    tracker = Tracker()
    tracker.start(uri, who, claim, plan.flatten({"learningRate": 0.01, "epochs": 2}), said.append)
    return tracker


def test_a_restarted_chief_logs_into_the_run_it_began(mlflow_server):
    who, said = plan.Identity("restarted", 1, "/mnt/dtr/models/restarted", "run1", "ns", "uid-1"), []
    first = chief(mlflow_server.uri, who, "run1-data", said)
    first.epoch(1, {"loss": 0.9}, 1.0, 10.0)
    first.failed()  # the chief's error: the run FAILED
    (found,) = runs(mlflow_server.uri, "restarted")
    assert found["info"]["status"] == "FAILED"
    second = chief(mlflow_server.uri, who, "run1-data", said)  # the container started again
    second.epoch(2, {"loss": 0.5}, 1.0, 10.0)
    second.finish({"loss": 0.4}, 2, "/mnt/dtr/models/restarted/1", lineage_of(TRAINING))
    (found,) = runs(mlflow_server.uri, "restarted")
    assert found["info"]["status"] == "FINISHED" and first.run_id == second.run_id == found["info"]["run_id"]
    assert metric_history(mlflow_server.uri, second.run_id, "loss") == [(1, 0.9), (2, 0.5)]
    assert as_dict(found["data"]["params"]) == {"learningRate": "0.01", "epochs": "2", "stepsPerEpoch": "5"}
    (version,) = model_versions(mlflow_server.uri, "restarted")
    assert version["source"] == "pvc://run1-data/models/restarted/1" and version["run_id"] == second.run_id
    assert not [line for line in said if "warning" in line], said


def test_a_version_the_registry_refuses_leaves_the_run_finished_and_says_so(mlflow_server):
    who, said = plan.Identity("by-hand", 1, "/tmp/x/models/by-hand"), []  # no run, so no claim: a file:// source
    tracker = chief(mlflow_server.uri, who, None, said)
    tracker.epoch(1, {"loss": 0.9}, 1.0, 10.0)
    tracker.finish({"loss": 0.4}, 2, "/tmp/x/models/by-hand/1", lineage_of(TRAINING))
    (found,) = runs(mlflow_server.uri, "by-hand")
    assert found["info"]["status"] == "FINISHED"
    assert model_versions(mlflow_server.uri, "by-hand") == []
    (warning,) = [line for line in said if "warning" in line]
    assert "model-versions/create: HTTP 400 INVALID_PARAMETER_VALUE" in warning and "training goes on" in warning


def test_a_version_in_a_bucket_is_registered_by_its_uri(mlflow_server):
    who, said = plan.Identity("bucketed", 3, "s3://models/bucketed", "run2", "ns", "uid-2"), []
    tracker = chief(mlflow_server.uri, who, None, said)  # spec.storage.volume false: no claim
    tracker.finish({"loss": 0.4}, 2, "s3://models/bucketed/3", lineage_of(TRAINING))
    (version,) = model_versions(mlflow_server.uri, "bucketed")
    assert version["source"] == "s3://models/bucketed/3"
    assert as_dict(version["tags"])["dtr.modelVersion"] == "3"


def test_a_sweeps_trials_are_runs_of_one_experiment_named_as_the_sweep(mlflow_server):
    """Each trial logs into the sweep's experiment (tagged with its index), its version registered under its own
    model name, as any run's."""
    said: list[str] = []
    for index in (0, 1):
        name = f"lr-{index}"
        who = plan.Identity(name, 1, f"/mnt/dtr/models/{name}", name, "ns", f"uid-{index}", "lr", index)
        tracker = chief(mlflow_server.uri, who, f"{name}-data", said)
        tracker.epoch(1, {"val_accuracy": 0.5 + index / 10}, 1.0, 10.0)
        tracker.finish({"accuracy": 0.6}, 1, f"/mnt/dtr/models/{name}/1", lineage_of(TRAINING))
    found = sorted(runs(mlflow_server.uri, "lr"), key=lambda r: r["info"]["run_name"])
    assert [r["info"]["run_name"] for r in found] == ["lr-0-v1", "lr-1-v1"]
    assert [(as_dict(r["data"]["tags"])["dtr.sweep"], as_dict(r["data"]["tags"])["dtr.trial"]) for r in found] == [
        ("lr", "0"), ("lr", "1")]  # fmt: skip
    assert [metric_history(mlflow_server.uri, r["info"]["run_id"], "val_accuracy") for r in found] == [
        [(1, 0.5)], [(1, 0.6)]]  # fmt: skip
    assert [len(model_versions(mlflow_server.uri, f"lr-{i}")) for i in (0, 1)] == [1, 1]
    assert any("experiment lr," in line for line in said), said
