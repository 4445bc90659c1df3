"""Two real MWMS workers whose learning rate makes the loss NaN in the first epoch: both stop themselves at the
same step with the divergence exit code and a line naming the epoch, export nothing and print no traceback; the
same workers restarted (as the kubelet does under OnFailure) stop at once with the same line, training nothing."""

from __future__ import annotations

import time

import pytest
from dtr_contract import exits
from dtr_trainer import divergence

from devcluster.controlplane import free_ports
from support.trainer import Volume, all_entries, kill_all, start_workers, worker_log_file

EPOCHS = 5
# Adam at 1e6 on digits: the loss is nan by the end of the first execution (measured: epoch 1/5, step 22/22).
ARGS = ["--model", "cnn", "--dataset", "digits", "--epochs", str(EPOCHS), "--batch-size-per-worker", "32",
        "--learning-rate", "1e6", "--seed", "7", "--steps-per-execution", "5"]


@pytest.fixture(scope="module")
def diverged_run(tmp_path_factory):
    volume = Volume(tmp_path_factory.mktemp("diverge") / "mnt-dtr")
    workers = start_workers(volume, free_ports(2), ARGS + volume.args())
    ended: dict[int, float] = {}
    try:
        while len(ended) < len(workers):
            for w in workers:
                if w.index not in ended and w.proc.poll() is not None:
                    ended[w.index] = time.monotonic()
            time.sleep(0.05)
            if len(ended) == 1 and time.monotonic() - min(ended.values()) > 60:
                break  # the other is left waiting: the test below says so
        codes = [w.wait(timeout=1) if w.index in ended else None for w in workers]
    finally:
        kill_all(workers)
    return volume, workers, codes, ended


def test_both_workers_exit_diverged_within_seconds_of_each_other(diverged_run):
    _, workers, codes, ended = diverged_run
    assert codes == [exits.DIVERGED, exits.DIVERGED], "\n".join(w.log()[-2000:] for w in workers)
    assert max(ended.values()) - min(ended.values()) < 10, ended


def test_each_workers_line_names_the_epoch_in_its_log_and_termination_message(diverged_run):
    volume, workers, _, _ = diverged_run
    lines = []
    for w in workers:
        [line] = [ln for ln in w.log().splitlines() if ": error: " in ln]
        assert line.startswith(f"dtr_trainer[worker-{w.index}]: error: training diverged: the loss became nan in "
                               f"epoch 1/{EPOCHS} (by step "), line
        assert "learning rate 1e+06" in line and "lower the learning rate" in line
        assert w.termination_path.read_text().strip() == line
        assert line in worker_log_file(volume, w.index)
        lines.append(line.split(": error: ")[1])
    assert lines[0] == lines[1], "the loss is all-reduced: both saw it at the same step"


def test_no_traceback_no_epoch_end_with_the_diverged_loss_and_nothing_exported(diverged_run):
    volume, workers, _, _ = diverged_run
    for w in workers:
        log = w.log()
        assert "Traceback" not in log and "epoch 1/5 end" not in log, log[-2000:]
        assert w.stdout_lines() == [], "no summary"
    assert all_entries(volume.root / "models" / "digits-cnn") == [], "no model version"
    chief_backup = volume.root / "backup" / "run1" / "chief"
    assert not chief_backup.exists() or not any(chief_backup.iterdir()), "no backup of the diverged weights"


def test_restarted_workers_stop_at_once_with_the_same_line_instead_of_training_again(diverged_run):
    volume, first, _, _ = diverged_run
    record = volume.root / "backup" / "run1" / divergence.RECORD
    line = first[0].log().split(": error: ")[1].splitlines()[0]
    assert record.read_text() == line + "\n"
    again = start_workers(volume, free_ports(2), ARGS + volume.args(), attempt="b")
    try:
        codes = [w.wait(timeout=120) for w in again]
    finally:
        kill_all(again)
    assert codes == [exits.DIVERGED, exits.DIVERGED], "\n".join(w.log()[-2000:] for w in again)
    for w in again:
        assert "epoch 1/5 begin" not in w.log() and "replica(s)" not in w.log(), w.log()[-2000:]
        assert w.termination_path.read_text().strip().endswith(f"error: {divergence.restarted_message(line)}")
    assert all_entries(volume.root / "models" / "digits-cnn") == []
