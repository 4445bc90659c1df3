"""The trainer's epoch-end log lines, read back by the one parser the operator and `dtr run` use.

A real trainer process writes its log (its own prefixes, TensorFlow's lines, the `begin` lines);
dtr_contract.progress, on the trainer's Python 3.9, must find every finished epoch in every prefix of
that log that ends at an epoch's end, as the operator does when it reads the chief's log tail.
(status.progress_of, which turns one into status.progress, is tests/unit/test_progress.py's.)
"""

from __future__ import annotations

from dtr_contract.progress import EpochEnd, parse_epoch_end, parse_epoch_end_line

from support.trainer import Volume, run_trainer

EPOCHS = 4
ARGS = ["--dataset", "digits", "--epochs", str(EPOCHS), "--steps-per-epoch", "8", "--batch-size-per-worker", "16"]


def test_every_epoch_the_trainer_logs_is_read_back(tmp_path) -> None:
    volume = Volume(tmp_path / "mnt-dtr")
    proc = run_trainer(ARGS + volume.args(), volume)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    ends = [i for i, line in enumerate(lines) if parse_epoch_end_line(line) is not None]
    assert len(ends) == EPOCHS, proc.stderr[-3000:]
    read = [parse_epoch_end("\n".join(lines[: i + 1]) + "\n") for i in ends]

    assert [(end.epoch, end.epochs) for end in read] == [(n, EPOCHS) for n in range(1, EPOCHS + 1)]
    for end, i in zip(read, ends):
        assert_read_back(end, lines[i])
    assert read[-1].remaining_seconds == 0


def assert_read_back(end: EpochEnd, line: str) -> None:
    """The figures read are the ones the line shows, the throughput and the time left included."""
    assert [name for name, _ in end.metrics] == ["accuracy", "loss"], line
    for name, value in end.metrics:
        assert f"{name}={value:.4f}" in line, (name, value, line)
    assert end.examples_per_second is not None, line
    assert end.examples_per_second > 0, line
    assert end.remaining_seconds is not None, line
    assert end.remaining_seconds >= 0, line


def test_the_heartbeat_logs_while_training_and_stops_with_it_even_on_an_error() -> None:
    import time

    import pytest
    from dtr_contract.progress import HEARTBEAT
    from dtr_trainer.progress import Heartbeat

    lines: list[str] = []
    with pytest.raises(ValueError), Heartbeat(lines.append, seconds=0.05) as beat:
        time.sleep(0.5)
        raise ValueError("training failed")
    assert not beat.thread.is_alive()
    said = len(lines)
    time.sleep(0.2)
    assert said >= 3 and set(lines) == {HEARTBEAT}
    assert len(lines) == said, "a heartbeat after training ended"
