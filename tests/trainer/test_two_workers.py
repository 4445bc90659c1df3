"""Two real MWMS worker processes on loopback train on scikit-learn's digits and export one model."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from dtr_contract.history import read_history
from dtr_contract.progress import is_heartbeat, parse_epoch_end_line

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

EPOCHS = 6
ARGS = ["--model", "cnn", "--dataset", "digits", "--epochs", str(EPOCHS), "--batch-size-per-worker", "32",
        "--learning-rate", "0.002", "--seed", "7"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    volume = Volume(tmp_path_factory.mktemp("two-workers") / "mnt-dtr")
    workers = start_workers(volume, free_ports(2), ARGS + volume.args())
    try:
        codes = [w.wait() for w in workers]
    finally:
        kill_all(workers)
    return volume, workers, codes


def test_both_workers_succeed(finished_run):
    _, workers, codes = finished_run
    assert codes == [0, 0], "\n".join(w.log()[-2000:] for w in workers)


def test_chief_reports_summary_on_stdout_and_termination_message(finished_run):
    volume, workers, _ = finished_run
    chief, other = workers
    lines = chief.stdout_lines()
    assert len(lines) == 1, chief.log()
    summary = json.loads(lines[0])
    assert set(summary) == {"loss", "accuracy", "epochs", "examplesPerSecond", "modelPath", "modelVersion", "metric",
                            "metrics"}
    assert summary["metric"] == "accuracy" and summary["metrics"] == {k: summary[k] for k in ("loss", "accuracy")}
    assert summary["accuracy"] >= 0.90
    assert summary["epochs"] == EPOCHS
    assert summary["examplesPerSecond"] > 0
    assert summary["modelVersion"] == 1
    assert summary["modelPath"] == str(volume.root / "models" / "digits-cnn" / "1")
    assert json.loads(chief.termination_path.read_text()) == summary
    assert other.stdout_lines() == [] and not other.termination_path.exists()


def test_exactly_one_model_and_no_temporary_dirs(finished_run):
    volume, _, _ = finished_run
    export_dir = volume.root / "models" / "digits-cnn"
    assert all_entries(export_dir) == ["1"]  # no staging or worker copies beside it
    assert all_entries(volume.root / "models" / ".dtr-export" / "digits-cnn") == ["claim-1"]  # and no staging there
    assert integer_dirs(volume.root / "models") == []
    assert all_entries(volume.tmp) == []  # non-chief export went to TMPDIR and was removed
    assert all_entries(volume.root / "backup" / "run1") == []  # BackupAndRestore cleans up on success


def test_tensorboard_logs_from_the_chief(finished_run):
    volume, _, _ = finished_run
    events = list((volume.root / "logs" / "run1").rglob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file"


def test_exported_model_serves_probabilities(finished_run):
    import tensorflow as tf
    from dtr_trainer.data import upscale_digits
    from sklearn.datasets import load_digits

    volume, _, _ = finished_run
    loaded = tf.saved_model.load(str(volume.root / "models" / "digits-cnn" / "1"))
    serve = loaded.signatures["serving_default"]
    spec = serve.structured_input_signature[1]["images"]
    assert spec.dtype == tf.float32 and spec.shape.as_list() == [None, 28, 28, 1]
    digits = load_digits()
    images = upscale_digits(digits.images[:64])
    probs = serve(images=tf.constant(images))["probabilities"].numpy()
    assert probs.shape == (64, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-4)
    assert (probs.argmax(axis=1) == digits.target[:64]).mean() >= 0.85


def test_the_built_in_export_loads_in_keras_too_and_serves_the_same(finished_run):
    """Saved without Keras' layer traces (dtr_trainer.export._save): load_model rebuilds it from its configs."""
    import tensorflow as tf
    from dtr_trainer.data import upscale_digits
    from sklearn.datasets import load_digits

    volume, _, _ = finished_run
    version = volume.root / "models" / "digits-cnn" / "1"
    assert {"saved_model.pb", "variables", "keras_metadata.pb", "fingerprint.pb"} <= set(all_entries(version))
    model = tf.keras.models.load_model(str(version))
    assert [layer.name for layer in model.inputs] == ["images"] and model.output_names == ["probabilities"]
    images = tf.constant(upscale_digits(load_digits().images[:16]))
    serve = tf.saved_model.load(str(version)).signatures["serving_default"]
    np.testing.assert_allclose(model.predict(images, verbose=0), serve(images=images)["probabilities"].numpy(),
                               atol=1e-6)


def test_lineage_beside_the_model_without_the_operators_env(finished_run):
    """Run by hand (no DTR_RUN_* variables): the run fields are null, the rest is known."""
    volume, workers, _ = finished_run
    doc = validate_lineage(volume.root / "models" / "digits-cnn" / "1")
    summary = json.loads(workers[0].stdout_lines()[0])
    assert doc["run"] == {"name": None, "uid": None, "namespace": None}
    assert doc["spec"] is None and doc["trainerImage"] is None
    assert doc["modelName"] == "digits-cnn" and doc["modelVersion"] == 1
    steps = int(re.search(r"(\d+) steps/epoch", workers[0].log()).group(1))
    assert doc["training"] == {"model": "cnn", "dataset": "digits", "code": None, "seed": 7, "epochs": EPOCHS,
                               "batchSizePerWorker": 32, "globalBatchSize": 64, "stepsPerEpoch": steps,
                               "learningRate": 0.002, "workers": 2, "datasetSource": None, "params": {},
                               "validateEvery": 1, "stoppedEarly": None}
    assert doc["metrics"] == {**{k: summary[k] for k in ("loss", "accuracy", "examplesPerSecond", "metric")},
                              "evaluation": summary["metrics"]}
    assert doc["tensorflowVersion"] == "2.11.0"


def test_each_worker_appends_its_lines_to_the_volume(finished_run):
    volume, workers, _ = finished_run
    for i, worker in enumerate(workers):
        on_volume = worker_log_file(volume, i)
        lines = on_volume.splitlines()
        assert len(lines) >= EPOCHS * 2 and all(re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z ", ln) for ln in lines), lines[:3]
        assert lines[0].split(" ", 1)[1].startswith(f"===== container start: worker-{i} of unknown run")
        # every line the trainer wrote to stderr, in order, after the start line; not the heartbeat, which its
        # child process writes to the pod log alone (worker_log.py)
        own = [ln for ln in worker.log().splitlines()
               if ln.startswith(f"dtr_trainer[worker-{i}]") and not is_heartbeat(ln)]
        assert [ln.split(" ", 1)[1] for ln in lines if " dtr_trainer[" in ln] == own
        assert f"epoch {EPOCHS}/{EPOCHS} end" in on_volume
    assert "model exported to" in worker_log_file(volume, 0)


def test_the_chief_alone_writes_every_epoch_to_the_history_file(finished_run):
    volume, workers, _ = finished_run
    text = (volume.root / "logs" / "run1" / "history.jsonl").read_text()
    lines = text.splitlines()
    assert len(lines) == EPOCHS, text  # both workers share --log-dir: the other worker wrote none
    history = read_history(text)
    assert [e.epoch for e in history] == list(range(1, EPOCHS + 1)) and {e.epochs for e in history} == {EPOCHS}
    ends = [e for e in map(parse_epoch_end_line, workers[0].log().splitlines()) if e is not None]
    for entry, end in zip(history, ends):  # the same figures as the chief's epoch-end lines, unrounded
        assert entry.metrics.keys() == dict(end.metrics).keys() == {"loss", "accuracy", "val_loss", "val_accuracy"}
        assert all(abs(entry.metrics[k] - v) < 6e-5 for k, v in end.metrics), (entry, end)
        assert entry.seconds > 0 and entry.examples_per_second > 0 and entry.time.endswith("Z")
