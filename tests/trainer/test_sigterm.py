"""SIGTERM (the pod deleted: a suspend, a preemption, a drain) stops the trainer at once, even as PID 1
of its PID namespace, as in a container, where a signal without a handler is ignored; the last finished
epoch's backup stays, and a trainer started again resumes from it and exports one model."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.trainer import Volume, run_trainer, trainer_env

# SIGTERM lands within half a second of epoch 3's end; nine epochs more (each a fraction of a second
# here) leave room to see that it did not train on, and are all the restart has to finish.
EPOCHS = 12
ARGS = ["--dataset", "digits", "--epochs", str(EPOCHS), "--steps-per-epoch", "40", "--batch-size-per-worker", "16"]
EXIT_TERMINATED = 143


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace (unshare) needs root")
def test_sigterm_as_pid_1_stops_at_once_keeps_the_backup_and_a_restart_resumes(tmp_path: Path) -> None:
    volume = Volume(tmp_path / "mnt-dtr")
    log = tmp_path / "first.log"
    # The trainer is PID 1 of a new PID namespace, as in its container.
    cmd = ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-m", "dtr_trainer", *ARGS, *volume.args()]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=trainer_env(volume, None), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while f"epoch 3/{EPOCHS} end" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=True)
        trainer = int(children.stdout.split()[0])
        ns_pids = Path(f"/proc/{trainer}/status").read_text().split("NSpid:")[1].splitlines()[0].split()
        assert ns_pids[-1] == "1", f"the trainer is not PID 1 of its namespace: {ns_pids}"
        os.kill(trainer, signal.SIGTERM)
        started = time.monotonic()
        code = proc.wait(timeout=20)
        stopped_in = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == EXIT_TERMINATED, text[-3000:]
    # Mid-epoch it stops at once; landing in an epoch's backup (a busy machine: epochs here take a fraction of a
    # second), it stops once that epoch is saved and logged (sigterm.py): either way now, and says so.
    assert re.search(r"terminated \(SIGTERM\)[^\n]*: stopping now", text), text[-3000:]
    assert f"epoch {EPOCHS}/{EPOCHS} end" not in text, "it trained on after SIGTERM"
    print(f"stopped {stopped_in:.1f} s after SIGTERM")
    backups = list((volume.root / "backup").rglob("*"))
    assert backups, "the backup is gone"
    assert not list((volume.root / "models").rglob("saved_model.pb")), "it exported before stopping"

    again = run_trainer(ARGS + volume.args(), volume)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from backup at epoch" in again.stderr, again.stderr[-3000:]
    assert [p.parent.name for p in (volume.root / "models").rglob("saved_model.pb")] == ["1"]
