"""Two independent runs at once on one volume, exporting under the same modelName (two DistTrainingRuns
sharing a claim): each must end with its own complete, loadable version, never the same number.

Run A is two MWMS workers, run B one worker; both start at the same instant, so both chiefs claim a
version within milliseconds of each other (before claims both chose 1 and one model replaced the other).
Each lists the other in spec.export.allowedPublishers (--allowed-publishers): the first chief to claim owns the
model name (dtr_trainer.ownership), and the other may publish under it.
Run B's --log-dir cannot be written (a file is in the way): one warning, and it trains all the same.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from dtr_contract import flags

from devcluster.controlplane import free_ports
from support.trainer import (
    Volume,
    all_entries,
    integer_dirs,
    kill_all,
    start_workers,
    validate_lineage,
    worker_log_file,
)

MODEL_NAME = "shared-model"
ARGS = ["--dataset", "digits", "--epochs", "2", "--batch-size-per-worker", "32", "--seed", "11"]
RUNS = {"run-a": 2, "run-b": 1}  # run name -> workers
OTHER = {"run-a": "run-b", "run-b": "run-a"}  # whom each lets publish under the name, should it own it


def run_env(name: str) -> dict[str, str]:
    """What the operator's builder puts in the pod's env for a run (builders._container)."""
    spec = {"workers": RUNS[name], "training": {"model": "cnn", "dataset": "digits", "epochs": 2},
            "export": {"modelName": MODEL_NAME, "allowedPublishers": [OTHER[name]]}}
    return {"DTR_RUN_NAME": name, "DTR_RUN_UID": f"uid-{name}", "DTR_RUN_NAMESPACE": "ml",
            "DTR_RUN_SPEC": json.dumps(spec), "DTR_TRAINER_IMAGE": "localhost/distml/trainer:test"}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    volume = Volume(tmp_path_factory.mktemp("concurrent") / "mnt-dtr")
    blocker = volume.root / "logs" / "not-a-dir"
    blocker.write_text("")
    unwritable = {"run-b": ["--log-dir", str(blocker / "run-b")]}
    jobs = {}
    try:
        for name, workers in RUNS.items():
            args = ARGS + volume.args(model_name=MODEL_NAME, run=name) + unwritable.get(name, [])
            args += [flags.ALLOWED_PUBLISHERS, OTHER[name]]
            jobs[name] = start_workers(volume, free_ports(workers), args, attempt=name, env_extra=run_env(name))
        codes = {name: [w.wait() for w in ws] for name, ws in jobs.items()}
    finally:
        for ws in jobs.values():
            kill_all(ws)
    return volume, jobs, codes


def summaries(jobs) -> dict[str, dict]:
    return {name: json.loads(ws[0].stdout_lines()[-1]) for name, ws in jobs.items()}


def test_both_runs_succeed(two_runs):
    _, jobs, codes = two_runs
    assert codes == {name: [0] * n for name, n in RUNS.items()}, \
        "\n".join(w.log()[-2000:] for ws in jobs.values() for w in ws)


def test_each_run_has_its_own_complete_version(two_runs):
    volume, jobs, _ = two_runs
    export_dir = volume.root / "models" / MODEL_NAME
    found = summaries(jobs)
    versions = sorted(s["modelVersion"] for s in found.values())
    assert versions == [1, 2], found
    assert integer_dirs(export_dir) == ["1", "2"], all_entries(export_dir)
    for summary in found.values():
        assert summary["modelPath"] == str(export_dir / str(summary["modelVersion"]))
        assert (export_dir / str(summary["modelVersion"]) / "saved_model.pb").is_file()
    assert all_entries(export_dir) == ["1", "2"]  # nothing else where a model server looks
    bookkeeping = volume.root / "models" / ".dtr-export" / MODEL_NAME
    assert all_entries(bookkeeping) == ["claim-1", "claim-2", "owner"]  # no staging dir left
    owner = json.loads((bookkeeping / "owner").read_text())
    assert owner["owner"]["name"] in RUNS and owner["allowedPublishers"] == [OTHER[owner["owner"]["name"]]]


def test_both_versions_load_and_predict(two_runs):
    import tensorflow as tf

    volume, _, _ = two_runs
    x = np.zeros((3, 28, 28, 1), np.float32)
    for version in ("1", "2"):
        serve = tf.saved_model.load(str(volume.root / "models" / MODEL_NAME / version)).signatures["serving_default"]
        assert serve(images=tf.constant(x))["probabilities"].shape == (3, 10)


def test_each_version_carries_its_own_runs_lineage(two_runs):
    volume, jobs, _ = two_runs
    for name, summary in summaries(jobs).items():
        doc = validate_lineage(volume.root / "models" / MODEL_NAME / str(summary["modelVersion"]))
        assert doc["run"] == {"name": name, "uid": f"uid-{name}", "namespace": "ml"}
        assert doc["spec"] == json.loads(run_env(name)["DTR_RUN_SPEC"])
        assert doc["trainerImage"] == "localhost/distml/trainer:test"
        assert doc["modelVersion"] == summary["modelVersion"] and doc["training"]["workers"] == RUNS[name]
        assert doc["metrics"] == {**{k: summary[k] for k in ("loss", "accuracy", "examplesPerSecond", "metric")},
                                  "evaluation": summary["metrics"]}
        claim_file = volume.root / "models" / ".dtr-export" / MODEL_NAME / f"claim-{summary['modelVersion']}"
        claim = json.loads(claim_file.read_text())
        assert claim["run"] == doc["run"]


def test_an_unwritable_log_dir_is_one_warning_not_a_failure(two_runs):
    volume, jobs, codes = two_runs
    (worker,) = jobs["run-b"]
    warnings = [ln for ln in worker.log().splitlines() if "warning: cannot write the worker log" in ln]
    assert len(warnings) == 1 and warnings[0].startswith("dtr_trainer[worker-0]: warning: "), worker.log()[-2000:]
    history_warnings = [ln for ln in worker.log().splitlines() if "warning: cannot write the history file" in ln]
    assert len(history_warnings) == 1, worker.log()[-2000:]
    assert codes["run-b"] == [0]
    assert "===== container start: worker-0 of ml/run-a (uid uid-run-a)" in worker_log_file(volume, 0, "run-a")


def test_a_run_started_again_after_its_export_exits_without_training(two_runs):
    """As when containerd restarts and the kubelet, having lost the exit code, restarts a finished run's
    containers (OnFailure): each exits 0 at once, the chief repeats its summary, and no version is added."""
    volume, jobs, _ = two_runs
    first = summaries(jobs)["run-a"]
    args = ARGS + volume.args(model_name=MODEL_NAME, run="run-a")
    again = start_workers(volume, free_ports(RUNS["run-a"]), args, attempt="again", env_extra=run_env("run-a"))
    try:
        codes = [w.wait() for w in again]
    finally:
        kill_all(again)
    logs = "\n".join(w.log()[-2000:] for w in again)
    assert codes == [0, 0], logs
    assert all("nothing to train" in w.log() and "epoch 1/" not in w.log() for w in again), logs
    assert json.loads(again[0].stdout_lines()[-1]) == first
    assert json.loads(again[0].termination_path.read_text()) == first
    assert integer_dirs(volume.root / "models" / MODEL_NAME) == ["1", "2"]
