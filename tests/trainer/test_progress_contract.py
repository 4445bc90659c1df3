"""The trainer's epoch-end log lines, read back by the one parser the operator and `dtr run` use.

A real trainer process writes its log (its own prefixes, TensorFlow's lines, the `begin` lines);
dtr_contract.progress, on the trainer's Python 3.9, must find every finished epoch in every prefix of
that log that ends at an epoch's end, as the operator does when it reads the chief's log tail.
(status.progress_of, which turns one into status.progress, is tests/unit/operator/test_progress.py's.)
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
    # the built-in model's eval split validated each epoch (docs/experiments.md#validation)
    assert [name for name, _ in end.metrics] == ["accuracy", "loss", "val_accuracy", "val_loss"], line
    for name, value in end.metrics:
        assert f"{name}={value:.4f}" in line, (name, value, line)
    assert end.examples_per_second is not None, line
    assert end.examples_per_second > 0, line
    assert end.remaining_seconds is not None, line
    assert end.remaining_seconds >= 0, line


def test_the_heartbeat_beats_while_training_and_stops_with_it_even_on_an_error(tmp_path) -> None:
    import time

    import pytest
    from dtr_contract.progress import HEARTBEAT, trainer_line
    from dtr_trainer.progress import Heartbeat

    line = trainer_line("worker-1", HEARTBEAT)
    with open(tmp_path / "stderr", "w") as stderr:
        with pytest.raises(ValueError), Heartbeat(line, seconds=0.1, stderr=stderr) as beat:
            time.sleep(1.5)  # the child's Python starts, then beats every 0.1 s
            raise ValueError("training failed")
        assert beat.process.poll() is not None
    said = (tmp_path / "stderr").read_text().splitlines()
    time.sleep(0.3)
    assert len(said) >= 3 and set(said) == {line}, said
    assert (tmp_path / "stderr").read_text().splitlines() == said, "a heartbeat after training ended"


def test_the_heartbeat_beats_while_its_parent_holds_the_gil(tmp_path) -> None:
    """A thread could not: a TensorFlow call that keeps the GIL (the rendezvous with a frozen peer) stops it."""
    import sys
    import time

    from dtr_trainer.progress import Heartbeat

    with open(tmp_path / "stderr", "w") as stderr, Heartbeat("alive", seconds=0.1, stderr=stderr):
        old = sys.getswitchinterval()
        sys.setswitchinterval(100)  # this thread keeps the GIL for the whole busy loop below
        try:
            end = time.monotonic() + 2
            while time.monotonic() < end:
                pass
        finally:
            sys.setswitchinterval(old)
    assert len((tmp_path / "stderr").read_text().splitlines()) >= 3


def test_the_heartbeat_stops_while_its_worker_is_stopped(tmp_path) -> None:
    """SIGSTOP of the worker's process (what containerd's freeze of a container reaches) silences its heartbeat;
    SIGCONT brings it back."""
    import signal
    import subprocess
    import sys
    import time

    holder = ("import sys, time\n"
              "from dtr_trainer.progress import Heartbeat\n"
              "with Heartbeat('alive', seconds=0.1):\n"
              "    time.sleep(60)\n")  # fmt: skip
    beats = tmp_path / "stderr"

    def count() -> int:
        return len(beats.read_text().splitlines())

    with open(beats, "w") as stderr:
        worker = subprocess.Popen([sys.executable, "-c", holder], stderr=stderr)
        def wait_for_beats(at_least: int) -> None:
            # Polled, not slept: beside the rest of the tier the heartbeat's child may wait seconds for a core.
            deadline = time.monotonic() + 60
            while count() < at_least and time.monotonic() < deadline:
                time.sleep(0.1)
            assert count() >= at_least, f"{count()} beats, not {at_least}, within 60 s"

        try:
            wait_for_beats(3)
            worker.send_signal(signal.SIGSTOP)
            time.sleep(0.5)
            stopped_at = count()
            time.sleep(1.5)
            # One beat may still land (read the state just before the stop, written after); a heartbeat that
            # kept beating every 0.1 s would have written about 15.
            assert count() <= stopped_at + 1, f"{count() - stopped_at} beats while the worker was stopped"
            worker.send_signal(signal.SIGCONT)
            wait_for_beats(count() + 3)
        finally:
            worker.kill()
            worker.wait()
