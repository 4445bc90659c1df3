"""`dtr run` plays the operator's --mlflow-tracking-uri with DTR_MLFLOW_TRACKING_URI (docs/tracking.md): with
--host-network its local worker, the chief, logs the run to a real MLflow server and registers the version by the
claim the run's volume plays; a URI the operator would refuse, refused. (On a loopback of their own the workers get no
URI: tests/unit/client/test_local_tracking.py.) One worker: only the chief tracks, and that a second one does not is
the `tracked` fixture's (test_tracking_run.py, two workers)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from dtr_contract.history import read_history

from support.mlflow_server import last_by_step, model_versions, runs
from support.repo import REPO

OP_PYTHON = REPO / ".venv" / "op" / "bin" / "python"
RUN = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "metadata": {"name": "local-tracked"},
       "spec": {"workers": 1, "training": {"model": "cnn", "dataset": "digits", "epochs": 2, "stepsPerEpoch": 4,
                                           "batchSizePerWorker": 16},
                "storage": {"size": "256Mi"}}}  # fmt: skip


def dtr_run(tmp: Path, uri: str, *flags: str) -> subprocess.CompletedProcess[str]:
    path = tmp / "run.yaml"
    path.write_text(json.dumps(RUN))  # YAML's superset: dtr run reads it (the trainer's Python has no yaml)
    # The workers run this checkout's trainer: its Python with the PYTHONPATH the tests run with (a git worktree's
    # packages before the shared environment's), as dtr run passes on no PYTHONPATH of its own.
    trainer = tmp / "trainer-python"
    trainer.write_text(f"#!/bin/sh\nPYTHONPATH='{os.environ.get('PYTHONPATH', '')}' exec "
                       f"'{REPO / '.venv' / 'trainer' / 'bin' / 'python'}' \"$@\"\n")  # fmt: skip
    trainer.chmod(0o755)
    env = {**os.environ, "DTR_RUN_DIR": str(tmp / ".dtr"), "DTR_TRAINER_PYTHON": str(trainer),
           "DTR_MLFLOW_TRACKING_URI": uri}  # fmt: skip
    env.pop("KUBECONFIG", None)
    return subprocess.run([str(OP_PYTHON), "-m", "dtr_cli", "run", *flags, str(path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


def test_dtr_run_with_the_hosts_network_logs_to_mlflow(tmp_path, mlflow_server):
    proc = dtr_run(tmp_path, mlflow_server.uri, "--host-network")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (found,) = runs(mlflow_server.uri, "local-tracked")
    assert found["info"]["status"] == "FINISHED"
    volume = tmp_path / ".dtr" / "volumes" / "local-tracked-data"
    history = read_history((volume / "logs" / "local-tracked" / "history.jsonl").read_text())
    assert [e.epoch for e in history] == [1, 2]
    for name in history[0].metrics:
        assert last_by_step(mlflow_server.uri, found["info"]["run_id"], name) == \
            [(e.epoch, e.metrics[name]) for e in history]  # fmt: skip
    (version,) = model_versions(mlflow_server.uri, "local-tracked")
    assert version["source"] == "pvc://local-tracked-data/models/local-tracked/1"
    assert (volume / "models" / "local-tracked" / "1" / "saved_model.pb").exists()


def test_dtr_run_refuses_what_the_operator_would(tmp_path, mlflow_server):
    proc = dtr_run(tmp_path, "http://user:secret@mlflow:5000")
    assert proc.returncode == 2 and "DTR_MLFLOW_TRACKING_URI: must be an MLflow server's" in proc.stderr, proc.stderr
