"""What the chief sends to MLflow (dtr_trainer.tracking_plan, pure) and the params it logs before training
(tracking.settings) held to the lineage's names and values; the real server: tests/mlflow."""

from __future__ import annotations

import argparse
import math

from dtr_contract import layout
from dtr_trainer import lineage, tracking
from dtr_trainer import tracking_plan as plan
from dtr_trainer.main import build_parser

WHO = plan.Identity("digits", 3, "/mnt/dtr/models/digits", "run1", "team-a", "uid-1")


def test_flatten_names_nested_values_and_leaves_out_nulls():
    doc = {"learningRate": 0.001, "model": None, "code": {"file": "m.py", "module": None, "sha256": "ab"},
           "params": {"width": 64, "residual": True, "optimizer": "sgd"}, "datasetSource": None, "empty": {}}
    assert plan.flatten(doc) == {"learningRate": "0.001", "code.file": "m.py", "code.sha256": "ab",
                                 "params.width": "64", "params.residual": "true", "params.optimizer": "sgd"}
    assert plan.flatten({"long": "x" * 9000})["long"] == "x" * plan.MAX_PARAM_VALUE
    source = {"datasetSource": {"url": "https://h/d.npz?X-Amz-Signature=abc", "sha256": "ab"}}
    assert plan.flatten(source) == {"datasetSource.url": "https://h/d.npz", "datasetSource.sha256": "ab"}


def test_the_params_before_training_are_the_lineages_names_and_values():
    args = build_parser().parse_args(["--export-dir", "/mnt/dtr/models/m", "--dataset", "digits", "--epochs", "4",
                                      "--batch-size-per-worker", "16", "--learning-rate", "0.003", "--seed", "5"])
    code = {"file": "m.py", "module": None, "sha256": "ab" * 32}
    before = plan.flatten(tracking.settings(args, 2, code))
    training = lineage.Training(model=args.model, dataset=args.dataset, code=code, seed=args.seed, epochs=args.epochs,
                                batch_size_per_worker=args.batch_size_per_worker, global_batch=32, steps_per_epoch=7,
                                learning_rate=args.learning_rate, workers=2)  # fmt: skip
    doc = lineage.document(lineage.RunIdentity(), training, lineage.Figures({"loss": 1.0}, "loss", 1.0), "m", 1,
                           "2.11.0", "2026-12-05T00:00:00Z")  # fmt: skip
    after = plan.flatten(doc["training"])
    assert before.items() <= after.items()  # the same key, the same text: MLflow refuses a param changed
    assert set(after) - set(before) == {"stepsPerEpoch"}  # known only once the data are loaded


def test_the_key_finds_one_chiefs_run_again_and_no_other():
    assert WHO.key == "team-a/run1/uid-1#3"
    assert plan.Identity("digits", 4, "/x", "run1", "team-a", "uid-1").key != WHO.key
    assert plan.Identity("digits", 3, "/x", "run1", "team-a", "uid-2").key != WHO.key
    by_hand = plan.Identity("digits", 1, "/tmp/it's/models/digits")
    assert by_hand.key == "/tmp/its/models/digits#1" and by_hand.run_name == "digits-v1"
    assert plan.search_run("7", WHO.key).body["filter"] == "tags.`dtr.key` = 'team-a/run1/uid-1#3'"
    tags = {t["key"]: t["value"] for t in WHO.tags()}
    assert tags == {"dtr.key": WHO.key, "mlflow.runName": "run1-v3", "dtr.run": "run1", "dtr.namespace": "team-a",
                    "dtr.uid": "uid-1", "dtr.modelVersion": "3"}


def test_a_sweeps_trials_share_the_sweeps_experiment_and_say_which_trial_they_are():
    trial = plan.Identity("lr-3", 1, "/mnt/dtr/models/lr-3", "lr-3", "team-a", "uid-3", "lr", 3)
    assert (WHO.experiment, trial.experiment) == ("digits", "lr")
    tags = {t["key"]: t["value"] for t in trial.tags()}
    assert (tags["dtr.sweep"], tags["dtr.trial"], tags["dtr.run"]) == ("lr", "3", "lr-3")
    assert "dtr.sweep" not in {t["key"] for t in WHO.tags()}


def test_the_versions_source_is_kserves_pvc_uri_or_the_buckets():
    assert plan.model_source("/mnt/dtr/models/digits/3", "/mnt/dtr/models/digits", "run1-data") == \
        "pvc://run1-data/models/digits/3"  # fmt: skip
    assert plan.model_source("/tmp/v/models/digits/3", "/tmp/v/models/digits", "c") == "pvc://c/models/digits/3"
    assert plan.model_source("s3://b/base/3", "s3://b/base", "c") == "s3://b/base/3"
    assert plan.model_source("/mnt/dtr/models/digits/3", "/mnt/dtr/models/digits", None) == \
        "file:///mnt/dtr/models/digits/3"  # fmt: skip


def test_the_claim_is_the_specs_or_the_operators():
    assert plan.claim_of("run1", {"storage": {"claimName": "team-data"}}) == "team-data"
    assert plan.claim_of("run1", {"storage": {"claimName": None}}) == layout.created_claim("run1") == "run1-data"
    assert plan.claim_of("run1", None) == "run1-data"
    assert plan.claim_of("run1", {"storage": {"volume": False}}) is None
    assert plan.claim_of(None, {"storage": {"claimName": "x"}}) is None




def test_an_epoch_is_its_history_lines_figures_at_its_step():
    call = plan.log_epoch("r", 2, {"loss": 0.5, "val_loss": math.nan, "accuracy": 0.75}, 1.5, 900.0, 1000)
    assert call.path == "runs/log-batch"
    assert call.body["metrics"] == [
        {"key": "accuracy", "value": 0.75, "timestamp": 1000, "step": 2},
        {"key": "loss", "value": 0.5, "timestamp": 1000, "step": 2},  # val_loss: NaN, as the history's null
        {"key": "epoch.seconds", "value": 1.5, "timestamp": 1000, "step": 2},
        {"key": "epoch.examplesPerSecond", "value": 900.0, "timestamp": 1000, "step": 2},
    ]
    final = plan.log_final("r", {"loss": 0.25, "accuracy": 0.9}, 8, 5)
    assert [(m["key"], m["step"]) for m in final.body["metrics"]] == [("final.accuracy", 8), ("final.loss", 8)]


def test_a_name_mlflow_would_refuse_is_left_out_not_the_call():
    assert all(plan.mlflow_key(k) for k in ("loss", "val_sparse_categorical_accuracy", "code.sha256", "a/b c-d"))
    assert not any(plan.mlflow_key(k) for k in ("f1@0.5", "a:b", "", ".", "..x", "/x", "a//b", "a/", "x" * 251))
    call = plan.log_epoch("r", 1, {"loss": 0.5, "f1@0.5": 0.7}, 1.0, 2.0, 0)
    assert [m["key"] for m in call.body["metrics"]] == ["loss", "epoch.seconds", "epoch.examplesPerSecond"]
    assert plan.flatten({"params": {"ok": 1, "bad:name": 2}}) == {"params.ok": "1"}


def test_params_go_in_batches_mlflow_takes():
    calls = plan.log_params("r", {f"p{i:03}": str(i) for i in range(250)})
    assert [len(c.body["params"]) for c in calls] == [100, 100, 50]


def test_the_answers_ids():
    assert plan.experiment_id({"experiment": {"experiment_id": "4"}}) == "4"
    assert plan.experiment_id({"experiment_id": "5"}) == "5"
    assert plan.experiment_id({}) is None
    assert plan.run_id({"run": {"info": {"run_id": "abc"}}}) == "abc"
    assert plan.run_id({"runs": [{"info": {"run_id": "def"}}]}) == "def"
    assert plan.run_id({"runs": []}) is None and plan.run_id({}) is None


def test_off_without_a_uri_or_a_claimed_version():
    args = argparse.Namespace(export_dir="/mnt/dtr/models/m")
    tracking.start({}, args, 2, lineage.RunIdentity(), None, 1, print)
    tracking.start({"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}, args, 2, lineage.RunIdentity(), None, None, print)
    assert not tracking.TRACKER.active
    history = object()
    assert tracking.TRACKER.watching(history) is history
