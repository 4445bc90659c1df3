"""`dtr run examples/digits.yaml` end to end: the README's "run the main job", no cluster, offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from e2e_support import saved_models

REPO = Path(__file__).resolve().parents[2]


def test_dtr_run_digits_example_trains_exports_and_prints_the_final_status(tmp_path: Path) -> None:
    env = {**os.environ, "DTR_RUN_DIR": str(tmp_path / ".dtr")}
    env.pop("KUBECONFIG", None)  # no cluster involved
    proc = subprocess.run(
        [sys.executable, "-m", "dtr_operator.cli", "run", "examples/digits.yaml"],
        check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out[-3000:]}\n{proc.stderr[-2000:]}"

    # logs streamed per replica, with epoch progress
    assert "[worker-0] " in out and "[worker-1] " in out
    assert "[dtr] epoch 8/8 done" in out

    # the final status, as the cluster would report it, printed as YAML
    block = out[out.index("\nstatus:\n") + 1 :].split("\n[dtr] ")[0]
    status = yaml.safe_load(block)["status"]
    assert status["phase"] == "Succeeded"
    assert status["workers"] == {"active": 0, "succeeded": 2, "failed": 0}
    assert status["model"] == {"path": "/mnt/dtr/models/digits-cnn/1", "claim": "digits-cnn-data", "version": 1}

    summary = json.loads(next(ln.split("] ", 1)[1] for ln in out.splitlines() if ln.startswith("[worker-0] {")))
    assert status["metrics"]["accuracy"] == summary["accuracy"]
    assert status["metrics"]["accuracy"] >= 0.9  # real data, real training

    volume = tmp_path / ".dtr" / "volumes" / "digits-cnn-data"
    assert saved_models(volume) == [volume / "models" / "digits-cnn" / "1"], "exactly one model on the volume"
    assert f"[dtr] model on disk: {volume}/models/digits-cnn/1" in out
