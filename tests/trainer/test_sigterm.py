"""SIGTERM (the pod deleted: a suspend, a preemption, a drain) stops the trainer at once, started as PID 1 of its
PID namespace, as in a container (PID 1 passes the signal on: dtr_trainer/pid1.py), also while it waits for a peer
in MWMS's rendezvous; the last finished epoch's backup stays, and a trainer started again resumes from it and
exports one model."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dtr_trainer.pid1 import exit_code

from devcluster.controlplane import free_ports
from support.trainer import Volume, run_trainer, tf_config, trainer_env
from support.wait import wait_for

# SIGTERM lands within half a second of epoch 3's end; nine epochs more (each a fraction of a second
# here) leave room to see that it did not train on, and are all the restart has to finish.
EPOCHS = 12
ARGS = ["--dataset", "digits", "--epochs", str(EPOCHS), "--steps-per-epoch", "40", "--batch-size-per-worker", "16"]
EXIT_TERMINATED = 143


@contextlib.contextmanager
def as_pid_1(volume_args: list[str], env: dict[str, str], log: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`python -m dtr_trainer` as PID 1 of a new PID namespace, as in its container: the process (unshare) and
    that PID 1's PID here; killed on the way out."""
    cmd = ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-m", "dtr_trainer", *ARGS, *volume_args]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc, wait_for(lambda: children(proc.pid), "PID 1 of the namespace", timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def terminate(proc: subprocess.Popen[bytes], init: int, timeout: float) -> tuple[int, float]:
    """SIGTERM as the kubelet sends it, to the container's PID 1: the exit code and the seconds it took."""
    os.kill(init, signal.SIGTERM)
    started = time.monotonic()
    code = proc.wait(timeout=timeout)
    return code, time.monotonic() - started


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace (unshare) needs root")
def test_sigterm_as_pid_1_stops_at_once_keeps_the_backup_and_a_restart_resumes(tmp_path: Path) -> None:
    volume = Volume(tmp_path / "mnt-dtr")
    log = tmp_path / "first.log"
    with as_pid_1(volume.args(), trainer_env(volume, None), log) as (proc, init):
        deadline = time.monotonic() + 300
        while f"epoch 3/{EPOCHS} end" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        ns_pids = Path(f"/proc/{init}/status").read_text().split("NSpid:")[1].splitlines()[0].split()
        assert ns_pids[-1] == "1", f"not PID 1 of its namespace: {ns_pids}"
        code, stopped_in = terminate(proc, init, timeout=20)
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


def held_in_tensorflow(pid: int, seconds: float = 2.0, timeout: float = 120) -> bool:
    """TensorFlow loaded with its threads, and the main thread asleep in the kernel (a C++ wait, never back in
    Python) for `seconds` on end."""
    deadline, since = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            threads = len(list(Path(f"/proc/{pid}/task").iterdir()))
            waits = Path(f"/proc/{pid}/task/{pid}/wchan").read_text() == "futex_do_wait"
        except OSError:
            return False
        if threads >= 10 and waits and has_tensorflow(pid):
            since = since or time.monotonic()
            if time.monotonic() - since >= seconds:
                return True
        else:
            since = None
        time.sleep(0.1)
    return False


def has_tensorflow(pid: int) -> bool:
    try:
        return "_pywrap_tensorflow_internal" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace (unshare) needs root")
def test_sigterm_stops_a_worker_held_in_tensorflow_waiting_for_a_peer_that_never_comes(tmp_path: Path) -> None:
    """The chief of two workers whose peer never comes waits in MWMS's rendezvous, its main thread in C++ with the
    GIL, where no Python handler runs: as PID 1 of its container it then took SIGTERM only as the grace period's
    SIGKILL (a pod restarted in place beside a lost node, three nodes: 30 s of each resume). PID 1 now passes it on
    to the trainer, which SIGTERM's default action ends there (pid1.py)."""
    volume = Volume(tmp_path / "mnt-dtr")
    log = tmp_path / "chief.log"
    with as_pid_1(volume.args(), trainer_env(volume, tf_config(free_ports(2), 0)), log) as (proc, init):
        trainer = wait_for(lambda: [p for p in [init, *children(init)] if has_tensorflow(p)], "TensorFlow loaded",
                           timeout=120)[0]  # fmt: skip
        assert held_in_tensorflow(trainer), log.read_text()[-3000:]
        code, stopped_in = terminate(proc, init, timeout=15)
    text = log.read_text()
    assert code == EXIT_TERMINATED, text[-3000:]
    assert "terminated (SIGTERM) while held in TensorFlow (meeting the other workers): stopping now" in text, text
    print(f"held in the rendezvous, stopped {stopped_in:.1f} s after SIGTERM")


def test_pid_1_exits_as_the_trainer_did() -> None:
    assert [exit_code(s) for s in (0, 3 << 8, 138 << 8)] == [0, 3, 138]
    assert exit_code(signal.SIGTERM) == EXIT_TERMINATED and exit_code(signal.SIGKILL) == 137  # as a shell says
