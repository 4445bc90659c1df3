"""The run's volume refusing the trainer, for real: a volume it cannot write (a read-only bind mount)
and a volume that fills up during the export (a small tmpfs). Each ends in one
line that says what is wrong with the volume, exit code 7, and no partial model where a server looks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support.trainer import Volume, run_trainer

ARGS = ["--dataset", "digits", "--epochs", "1", "--steps-per-epoch", "3", "--batch-size-per-worker", "16"]
EXIT_VOLUME = 7

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid and mounting a tmpfs need root")


@needs_root
def test_a_volume_the_trainer_cannot_write_is_named_before_training(tmp_path: Path) -> None:
    """Read-only here (root ignores modes; tests/node/test_volumes.py has the uid-1000 case on a real pod)."""
    volume = Volume(tmp_path / "mnt-dtr")
    backup = volume.root / "backup"
    subprocess.run(["mount", "--bind", str(backup), str(backup)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(backup)], check=True)
        proc = run_trainer(ARGS + volume.args(), volume)
        assert proc.returncode == EXIT_VOLUME, proc.stderr[-3000:]
        lines = [line for line in proc.stderr.splitlines() if "error:" in line]
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert f"the run's volume is not writable by uid {os.getuid()}" in lines[0], lines[0]
        assert "Read-only file system" in lines[0] and str(backup) in lines[0], lines[0]
        assert "epoch 1/1 begin" not in proc.stderr, "it trained before finding out"
    finally:
        subprocess.run(["umount", str(backup)], check=False)


@needs_root
def test_a_volume_that_fills_up_during_the_export_leaves_no_partial_model(tmp_path: Path) -> None:
    volume = Volume(tmp_path / "mnt-dtr")
    models = volume.root / "models"
    # Room for the claim and the write check, not for a SavedModel (a few hundred KiB).
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "dtr-test-full", str(models)], check=True)
    try:
        proc = run_trainer(ARGS + volume.args(), volume)
        assert proc.returncode == EXIT_VOLUME, proc.stderr[-3000:]
        lines = [line for line in proc.stderr.splitlines() if "error:" in line]
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert "the run's volume is full (No space left on device) while exporting version 1" in lines[0], lines[0]
        assert not [p for p in (models / "digits-cnn").iterdir()], "a version directory was left behind"
        leftovers = list((models / ".dtr-export").rglob("staging-*"))
        assert not leftovers, f"staging left behind: {leftovers}"
    finally:
        subprocess.run(["umount", str(models)], check=False)
