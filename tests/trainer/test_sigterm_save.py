"""--backup-on-sigterm (dtr_trainer.step_backup): one of two real MWMS workers is told to stop (SIGTERM) mid-epoch;
both save the training state at the same step and leave (143 the signalled one, 138 its peer); restarted as a TFJob
with restartPolicy OnFailure would, they resume inside the interrupted epoch at the step after the save, and the
history still holds each epoch once, and one model is exported."""

from __future__ import annotations

import json
import re
import signal
import time

import pytest
from dtr_trainer.step_backup import next_save_point

from devcluster.controlplane import free_ports
from support.trainer import Volume, all_entries, kill_all, start_workers, wait_for_line

EPOCHS, STEPS, PER_EXECUTION = 3, 200, 5
ARGS = ["--dataset", "digits", "--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS), "--batch-size-per-worker",
        "16", "--steps-per-execution", str(PER_EXECUTION), "--seed", "3", "--backup-on-sigterm"]  # fmt: skip
SAVED = re.compile(r"saved the training state at epoch (\d+), step (\d+)/(\d+)")


def test_the_save_point_is_the_next_executions_end_never_an_epochs_last() -> None:
    assert next_save_point(1, 4, 200, 5) == (1, 9)
    assert next_save_point(1, 189, 200, 5) == (1, 194)
    assert next_save_point(1, 194, 200, 5) is None  # the next execution ends the epoch: its own backup comes there
    assert next_save_point(0, 39, 44, 5) is None  # Keras shortens the one that would cross the end
    assert next_save_point(0, 49, 44, 50) is None  # one execution per epoch: no point inside it


@pytest.mark.parametrize("signalled", [1, 0], ids=["worker", "chief"])
def test_a_worker_told_to_stop_mid_epoch_saves_with_its_peer_and_the_restart_resumes_inside_the_epoch(
    tmp_path, signalled: int
) -> None:
    volume = Volume(tmp_path / "mnt-dtr")
    ports = free_ports(2)
    args = ARGS + volume.args()
    first = start_workers(volume, ports, args, attempt="a")
    try:
        wait_for_line(first[signalled], f"epoch 2/{EPOCHS} begin")
        time.sleep(0.3)  # inside epoch 2 (about 2 s of 200 steps here)
        first[signalled].proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        codes = [w.wait(timeout=60) for w in first]
        stopped_in = time.monotonic() - sent
    finally:
        kill_all(first)
    logs = [w.log() for w in first]
    peer = 1 - signalled
    assert (codes[signalled], codes[peer]) == (143, 138), "\n".join(log[-2000:] for log in logs)
    assert "terminated (SIGTERM): saved the training state at epoch 2, step" in logs[signalled], logs[signalled][-2000:]
    assert "a peer was told to stop (SIGTERM): saved the training state at epoch 2, step" in logs[peer], logs[peer]
    points = {SAVED.search(log).groups() for log in logs}
    assert len(points) == 1, points  # both saved at the same step
    epoch, step, steps = (int(n) for n in points.pop())
    assert (epoch, steps) == (2, STEPS) and 0 < step < STEPS and step % PER_EXECUTION == 0, step
    assert stopped_in < 20, stopped_in  # sigterm.SAVE_WAIT_SECONDS
    print(f"saved at epoch 2 step {step}/{STEPS}, both stopped {stopped_in:.2f} s after SIGTERM")
    history_file = volume.root / "logs" / "run1" / "history.jsonl"
    assert [json.loads(line)["epoch"] for line in history_file.read_text().splitlines()] == [1]
    assert all_entries(volume.root / "models" / "digits-cnn") == []

    second = start_workers(volume, ports, args, attempt="b")
    try:
        codes = [w.wait() for w in second]
    finally:
        kill_all(second)
    assert codes == [0, 0], "\n".join(w.log()[-2000:] for w in second)
    for w in second:
        # Resumed at the step after the save: none of the interrupted epoch's saved steps is done again.
        assert f"resumed from backup at epoch 2/{EPOCHS}, step {step + 1}/{STEPS} (saved on SIGTERM)" in w.log()
        assert f"epoch 1/{EPOCHS} begin" not in w.log()
    # Each epoch ended once across both attempts: no line in the history twice, none missing.
    written = [json.loads(line)["epoch"] for line in history_file.read_text().splitlines()]
    assert written == [1, 2, 3], written
    summary = json.loads(second[0].stdout_lines()[-1])
    assert summary["epochs"] == EPOCHS and summary["modelVersion"] == 1 and summary["accuracy"] >= 0.9, summary
    assert all_entries(volume.root / "models" / "digits-cnn") == ["1"]
    assert len(list((volume.root / "models").rglob("saved_model.pb"))) == 1
