"""A worker SIGKILLed mid-training; both restarted as a TFJob with restartPolicy OnFailure would;
the run resumes from the BackupAndRestore state, not from epoch 1, and finishes with one model."""

from __future__ import annotations

import json
import re
import signal

from dtr_contract.history import read_history

from devcluster.controlplane import free_ports
from support.trainer import (
    Volume,
    all_entries,
    kill_all,
    restart_to_the_end,
    start_workers,
    wait_for_line,
    worker_log_file,
)

EPOCHS = 10
ARGS = ["--dataset", "digits", "--epochs", str(EPOCHS), "--batch-size-per-worker", "32", "--seed", "3"]
PEER_LOST_TIMEOUT = 180  # the survivor must notice by itself, not hang


def test_killed_worker_resumes_from_backup(tmp_path):
    volume = Volume(tmp_path / "mnt-dtr")
    ports = free_ports(2)
    args = ARGS + volume.args()
    backup = volume.root / "backup" / "run1"

    first = start_workers(volume, ports, args, attempt="a")
    try:
        wait_for_line(first[1], f"epoch 2/{EPOCHS} end")
        first[1].proc.send_signal(signal.SIGKILL)
        assert first[1].wait() == -signal.SIGKILL
        survivor_code = first[0].wait(timeout=PEER_LOST_TIMEOUT)
    finally:
        kill_all(first)
    # The survivor sees the lost peer and asks for a restart (>= 128, retryable under ExitCode).
    assert survivor_code == 138, first[0].log()[-3000:]
    assert "error: lost a peer" in first[0].log()
    assert any(p.name.startswith("ckpt-") for p in (backup / "chief").iterdir()), all_entries(backup)
    assert all_entries(volume.root / "models" / "digits-cnn") == []  # nothing exported yet...
    assert all_entries(volume.root / "models" / ".dtr-export" / "digits-cnn") == ["claim-1"]  # ...but claimed

    # OnFailure: the kubelet restarts both failed containers with the same TF_CONFIG and volume.
    second = restart_to_the_end(volume, ports, args)

    chief_log = second[0].log()
    resumed = re.search(r"resumed from backup at epoch (\d+)/", chief_log)
    assert resumed and int(resumed.group(1)) >= 3, chief_log[-3000:]  # epochs 1-2 were backed up
    assert f"epoch 1/{EPOCHS} begin" not in chief_log
    assert f"epoch {EPOCHS}/{EPOCHS} end" in chief_log
    summary = json.loads(second[0].stdout_lines()[-1])
    assert summary["epochs"] == EPOCHS and summary["modelVersion"] == 1

    # The history file: appended by both attempts' chiefs; read, every epoch once, the resumed attempt's last.
    text = (volume.root / "logs" / "run1" / "history.jsonl").read_text()
    written = [json.loads(line)["epoch"] for line in text.splitlines() if line.startswith("{")]
    assert written[:2] == [1, 2] and written[-1] == EPOCHS and len(written) >= EPOCHS, written
    history = read_history(text)
    assert [e.epoch for e in history] == list(range(1, EPOCHS + 1)), written
    assert summary["accuracy"] >= 0.90
    assert all_entries(volume.root / "models" / "digits-cnn") == ["1"]  # the restart kept its claim
    assert all_entries(volume.root / "models" / ".dtr-export" / "digits-cnn") == ["claim-1"]
    # the killed process may leave TensorFlow's autograph files in TMPDIR, but no worker export copy
    assert [n for n in all_entries(volume.tmp) if n.startswith("dtr-")] == []

    # Each worker's file on the volume holds both containers' lines, the restart's after the first's.
    for i in range(2):
        text = worker_log_file(volume, i)
        starts = [n for n, ln in enumerate(text.splitlines()) if "===== container start:" in ln]
        assert len(starts) == 2, text[-3000:]
        first, second = text.split("===== container start:")[1:]
        assert f"epoch 2/{EPOCHS} end" in first and f"epoch {EPOCHS}/{EPOCHS} end" not in first
        assert "resumed from backup at epoch" in second and f"epoch {EPOCHS}/{EPOCHS} end" in second
    assert "error: lost a peer" in worker_log_file(volume, 0).split("===== container start:")[1]
