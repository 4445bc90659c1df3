"""A fresh `dtr run` is fresh (docs/local.md#a-fresh-run-is-fresh), with real TF worker processes: after a Ctrl-C,
the same run again starts at epoch 1 unless asked to --resume, and a backup made with other options is never
resumed. Tiny trainings (digits, a few steps an epoch), no cluster, offline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from support.runs import digits_run
from support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 4


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "DTR_RUN_DIR": str(tmp_path / ".dtr")}
    env.pop("KUBECONFIG", None)  # no cluster involved
    return env


def _interrupted_run(tmp_path: Path, run_file: Path, log: str) -> str:
    """dtr run, Ctrl-C (SIGINT) once the chief has finished epoch 2: its output."""
    out_file = tmp_path / log
    with open(out_file, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dtr_cli", "run", str(run_file)], cwd=REPO,
                                env=_env(tmp_path), stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_for(lambda: f"[dtr] epoch 2/{EPOCHS} done" in out_file.read_text(), "epoch 2 to end", timeout=600,
                 interval=0.2)  # fmt: skip
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    return out_file.read_text()


def _dtr_run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dtr_cli", "run", *argv], check=False, cwd=REPO,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=600)  # fmt: skip


def test_after_a_ctrl_c_a_run_resumes_only_when_asked_and_only_its_own_backup(tmp_path: Path) -> None:
    run = digits_run("again", epochs=EPOCHS, steps=8)
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump(run))
    first = _interrupted_run(tmp_path, run_file, "first.log")
    assert "resumed from backup" not in first and "starts fresh" not in first
    backup = tmp_path / ".dtr" / "volumes" / "again-data" / "backup" / "again"
    assert any(backup.iterdir()), "the interrupted run left a backup"

    # Other options, asked to resume: refused before any worker starts, the backup kept, both ways on named.
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump({**run, "spec": {**run["spec"], "training": {
        **run["spec"]["training"], "learningRate": 0.001}}}))  # fmt: skip
    refused = _dtr_run(tmp_path, str(changed), "--resume")
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr
    assert "training.learning_rate 0.002 -> 0.001" in refused.stderr and "without --resume" in refused.stderr
    assert "[worker-" not in refused.stdout and any(backup.iterdir())

    # The same run again, not asked to resume (the Ctrl-C'd run ended Failed, not Suspended): it starts at epoch 1,
    # saying the earlier backup is discarded. Ctrl-C again after epoch 2.
    again = _interrupted_run(tmp_path, run_file, "again.log")
    assert "starts fresh" in again and "dtr run --resume resumes it" in again, again[-3000:]
    assert "resumed from backup" not in again and f"[dtr] epoch 1/{EPOCHS} done" in again

    # The same run, asked to: it resumes after the epochs it had finished.
    resumed = _dtr_run(tmp_path, str(run_file), "--resume")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr
    assert "resumes from its backup" in resumed.stdout and "(--resume)" in resumed.stdout
    assert f"resumed from backup at epoch 3/{EPOCHS}" in resumed.stdout, resumed.stdout[-3000:]
    assert f"[dtr] epoch 1/{EPOCHS} done" not in resumed.stdout and "\n  phase: Succeeded\n" in resumed.stdout
