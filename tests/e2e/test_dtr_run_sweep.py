"""`dtr run sweep.yaml` end to end (docs/experiments.md#sweeps): a DistTrainingSweep's trials as local runs of real
TF worker processes, no cluster, offline, decided by the operator's own pure core: two at a time, a trial that
learns nothing stopped before its last epoch, the sweep ending with the best, its status in DIR/sweeps/NAME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

# Epochs of a fraction of a second: many, so that a turn (each second) comes while the weak trial still trains.
EPOCHS = 30
SWEEP = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingSweep", "metadata": {"name": "loc"}, "spec": {
    "template": {"spec": {"workers": 1, "storage": {"size": "64Mi"}, "training": {
        "model": "cnn", "dataset": "digits", "epochs": EPOCHS, "stepsPerEpoch": 5, "batchSizePerWorker": 32}}},
    "space": {"learningRate": {"choice": [0.003, 0.01, 0.00001]}}, "algorithm": "grid", "trials": 3,
    "parallelTrials": 2, "objective": {"metric": "val_accuracy"},
    "earlyStopping": {"median": {"warmupEpochs": 1, "minTrials": 1}}}}  # fmt: skip


def test_dtr_run_runs_a_sweeps_trials_locally_stops_the_one_that_learns_nothing_and_names_the_best(tmp_path: Path):
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    env = {**os.environ, "DTR_RUN_DIR": str(tmp_path / ".dtr")}
    env.pop("KUBECONFIG", None)
    proc = subprocess.run([sys.executable, "-m", "dtr_cli", "run", "sweep.yaml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    status = json.loads((tmp_path / ".dtr" / "sweeps" / "loc" / "status.json").read_text())
    assert status["phase"] == "Succeeded" and status["trialsDone"] == "3/3", status
    by_rate = {t["point"]["learningRate"]: t for t in status["trials"]}
    still = by_rate[0.00001]
    assert still["phase"] == "Stopped" and still["curve"][-1][0] < EPOCHS, still  # lr 1e-5: chance, ~0.1
    assert "is worse than the median of" in still["reason"]
    assert all([e for e, _ in t["curve"]] == list(range(1, len(t["curve"]) + 1)) for t in status["trials"]), \
        "each epoch, from the history file"  # fmt: skip
    compared = subprocess.run([sys.executable, "-m", "dtr_cli", "compare", "--backend", "local",
                               *(t["run"] for t in status["trials"])], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
    assert compared.returncode == 0 and "Suspended" in compared.stdout, compared  # the stopped trial, kept
    assert status["best"]["run"] != still["run"] and status["best"]["value"] > 0.3, status["best"]
    assert proc.stdout.splitlines()[-5].startswith("Succeeded 3/3: best val_accuracy"), proc.stdout[-1500:]


def test_a_sweep_file_with_a_run_files_options_is_refused(tmp_path: Path):
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    proc = subprocess.run([sys.executable, "-m", "dtr_cli", "run", "sweep.yaml", "--name", "x"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2 and "a sweep file takes --dir, --python and --host-network only" in proc.stderr
