"""--backup-on-sigterm (dtr_trainer.step_backup): one of two real MWMS workers is told to stop (SIGTERM) mid-epoch;
both save the training state at the same step and leave (143 the signalled one, 138 its peer); restarted as a TFJob
with restartPolicy OnFailure would, they resume inside the interrupted epoch at the step after the save, and the
history still holds each epoch once, and one model is exported."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest
from dtr_trainer.step_backup import crosses, next_save_point

from devcluster.controlplane import free_ports
from support.trainer import (
    Volume,
    all_entries,
    kill_all,
    restart_to_the_end,
    run_trainer,
    start_workers,
    trainer_env,
    wait_for_line,
    worker_log_file,
)

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


def test_every_n_steps_is_the_end_of_the_execution_that_reached_a_multiple_of_n() -> None:
    assert [end for end in range(4, 200, 5) if crosses(end - 5, end, 50)] == [49, 99, 149, 199]
    assert [end for end in range(49, 200, 50) if crosses(end - 50, end, 30)] == [49, 99, 149, 199]
    assert not crosses(44, 47, 50) and crosses(47, 51, 50)  # a resumed epoch's first execution may end anywhere


# The restart reads the save whoever was signalled (one StepBackup save, the same step on both): it is proved once.
@pytest.mark.parametrize(("signalled", "restart"), [((1,), True), ((0,), False), ((0, 1), False)],
                         ids=["worker", "chief", "both"])  # fmt: skip
def test_a_worker_told_to_stop_mid_epoch_saves_with_its_peer_and_the_restart_resumes_inside_the_epoch(
    tmp_path, signalled: tuple[int, ...], restart: bool
) -> None:
    """Both: a suspend deletes every pod at once; the first worker to name a save point wins, both save there."""
    volume = Volume(tmp_path / "mnt-dtr")
    ports = free_ports(2)
    args = ARGS + volume.args()
    first = start_workers(volume, ports, args, attempt="a")
    try:
        wait_for_line(first[signalled[0]], f"epoch 2/{EPOCHS} begin")
        time.sleep(0.3)  # inside epoch 2 (about 2 s of 200 steps here)
        for i in signalled:
            first[i].proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        codes = [w.wait(timeout=60) for w in first]
        stopped_in = time.monotonic() - sent
    finally:
        kill_all(first)
    logs = [w.log() for w in first]
    assert codes == [143 if i in signalled else 138 for i in range(2)], "\n".join(log[-2000:] for log in logs)
    for i, log in enumerate(logs):
        said = "terminated (SIGTERM)" if i in signalled else "a peer was told to stop (SIGTERM)"
        assert f"{said}: saved the training state at epoch 2, step" in log, log[-2000:]
    points = {SAVED.search(log).groups() for log in logs}
    assert len(points) == 1, points  # both saved at the same step
    epoch, step, steps = (int(n) for n in points.pop())
    assert (epoch, steps) == (2, STEPS) and 0 < step < STEPS and step % PER_EXECUTION == 0, step
    assert stopped_in < 20, stopped_in  # sigterm.SAVE_WAIT_SECONDS
    print(f"saved at epoch 2 step {step}/{STEPS}, both stopped {stopped_in:.2f} s after SIGTERM")
    history_file = volume.root / "logs" / "run1" / "history.jsonl"
    assert [json.loads(line)["epoch"] for line in history_file.read_text().splitlines()] == [1]
    assert all_entries(volume.root / "models" / "digits-cnn") == []
    if not restart:
        return
    second = restart_to_the_end(volume, ports, args)
    for w in second:
        # Resumed at the step after the save: none of the interrupted epoch's saved steps is done again.
        assert f"resumed from backup at epoch 2/{EPOCHS}, step {step + 1}/{STEPS}" in w.log()
        assert f"epoch 1/{EPOCHS} begin" not in w.log()
    # Each epoch ended once across both attempts: no line in the history twice, none missing.
    written = [json.loads(line)["epoch"] for line in history_file.read_text().splitlines()]
    assert written == [1, 2, 3], written
    summary = json.loads(second[0].stdout_lines()[-1])
    assert summary["epochs"] == EPOCHS and summary["modelVersion"] == 1 and summary["accuracy"] >= 0.9, summary
    assert all_entries(volume.root / "models" / "digits-cnn") == ["1"]
    assert len(list((volume.root / "models").rglob("saved_model.pb"))) == 1


def test_a_worker_told_to_stop_whose_peer_is_gone_stops_without_the_save(tmp_path) -> None:
    """The peer SIGKILLed (a node lost) as the other is told to stop: no save can be made; the signalled worker
    stops as terminated (143) within sigterm.SAVE_WAIT_SECONDS, and the last epoch's backup stays."""
    volume = Volume(tmp_path / "mnt-dtr")
    workers = start_workers(volume, free_ports(2), ARGS + volume.args(), attempt="a")
    try:
        wait_for_line(workers[0], f"epoch 2/{EPOCHS} begin")
        workers[1].proc.send_signal(signal.SIGKILL)
        workers[0].proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code = workers[0].wait(timeout=60)
        stopped_in = time.monotonic() - sent
    finally:
        kill_all(workers)
    log = workers[0].log()
    assert code == 143 and stopped_in < 25, (stopped_in, log[-2000:])
    assert re.search(r"terminated \(SIGTERM\)[^\n]*: stopping now", log), log[-2000:]
    assert "saved the training state" not in log
    assert any(p.name.startswith("ckpt-") for p in (volume.root / "backup" / "run1" / "chief").iterdir())


def test_one_worker_without_tf_config_saves_alone_and_resumes_inside_the_epoch(tmp_path) -> None:
    """No TF_CONFIG (`dtr run` with one worker, a notebook): no peers, no coordination service; the save point is
    the next execution's end all the same."""
    volume = Volume(tmp_path / "mnt-dtr")
    log = tmp_path / "first.log"
    cmd = [sys.executable, "-m", "dtr_trainer", *ARGS, *volume.args()]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=trainer_env(volume, None), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while f"epoch 2/{EPOCHS} begin" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == 143, text[-3000:]
    step = int(SAVED.search(text).group(2))
    again = run_trainer(ARGS + volume.args(), volume)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from backup at epoch 2/{EPOCHS}, step {step + 1}/{STEPS}" in again.stderr
    history = (volume.root / "logs" / "run1" / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in history] == [1, 2, 3]
    assert all_entries(volume.root / "models" / "digits-cnn") == ["1"]


def test_a_worker_sigkilled_after_a_save_inside_the_epoch_is_restarted_and_the_run_resumes_there(tmp_path) -> None:
    """--backup-every-steps 50 without --backup-on-sigterm: a worker SIGKILLed (no notice: a node lost, an OOM) after
    the first save inside epoch 2; the survivor sees the lost peer and asks for a restart (exit 138, retryable under
    ExitCode); restarted as a TFJob with restartPolicy OnFailure would (the same TF_CONFIG and volume), the run
    resumes after the last save and finishes with one model. Until 2026-12-07 tests/trainer/test_fault.py proved the
    harness's part in a run of its own (28 CPU s), killed at an epoch's end; the resume from an epoch's backup is
    `dtr run`'s test (tests/e2e/test_dtr_run.py) and the real node's (tests/node/test_real_node.py)."""
    volume = Volume(tmp_path / "mnt-dtr")
    ports = free_ports(2)
    args = [a for a in ARGS if a != "--backup-on-sigterm"] + ["--backup-every-steps", "50"] + volume.args()
    index = volume.root / "backup" / "run1" / "chief" / "checkpoint"
    first = start_workers(volume, ports, args, attempt="a")
    try:
        wait_for_line(first[1], f"epoch 2/{EPOCHS} begin")
        after_epoch_1 = index.read_text()
        deadline = time.monotonic() + 120
        while index.read_text() == after_epoch_1 and time.monotonic() < deadline:  # a save inside epoch 2
            time.sleep(0.02)
        first[1].proc.send_signal(signal.SIGKILL)
        assert first[1].wait() == -signal.SIGKILL
        survivor = first[0].wait(timeout=180)  # it must notice by itself, not hang
    finally:
        kill_all(first)
    assert survivor == 138, first[0].log()[-2000:]
    assert "error: lost a peer" in first[0].log()
    assert all_entries(volume.root / "models" / "digits-cnn") == []  # nothing exported yet...
    assert all_entries(volume.root / "models" / ".dtr-export" / "digits-cnn") == ["claim-1"]  # ...but claimed

    second = restart_to_the_end(volume, ports, args)
    resumed = re.search(rf"resumed from backup at epoch 2/{EPOCHS}, step (\d+)/{STEPS}", second[0].log())
    assert resumed and int(resumed.group(1)) in (51, 101, 151), second[0].log()[-2000:]
    assert f"epoch 1/{EPOCHS} begin" not in second[0].log()
    # The history file: appended by both attempts' chiefs, each epoch once.
    history = (volume.root / "logs" / "run1" / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in history] == [1, 2, 3]
    summary = json.loads(second[0].stdout_lines()[-1])
    assert summary["epochs"] == EPOCHS and summary["modelVersion"] == 1 and summary["accuracy"] >= 0.9, summary
    assert all_entries(volume.root / "models" / "digits-cnn") == ["1"]  # the restart kept its claim
    assert all_entries(volume.root / "models" / ".dtr-export" / "digits-cnn") == ["claim-1"]
    # the killed process may leave TensorFlow's autograph files in TMPDIR, but no worker export copy
    assert [n for n in all_entries(volume.tmp) if n.startswith("dtr-")] == []
    # Each worker's file on the volume holds both containers' lines, the restart's after the first's.
    for i in range(2):
        text = worker_log_file(volume, i)
        before, after = text.split("===== container start:")[1:]
        assert f"epoch 2/{EPOCHS} begin" in before and f"epoch {EPOCHS}/{EPOCHS} end" not in before, text[-3000:]
        assert "resumed from backup at epoch 2/" in after and f"epoch {EPOCHS}/{EPOCHS} end" in after, text[-3000:]
    assert "error: lost a peer" in worker_log_file(volume, 0).split("===== container start:")[1]
