"""`dtr` as a container's first process (PID 1 of a PID namespace, as in the operator's image): SIGTERM ends it at
once before any command handles it. The kernel drops a signal PID 1 has no handler for, so without dtr_cli's own a
pod deleted in its first seconds waited out its grace period (30 s)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

IMPORT_THEN_SLEEP = "import dtr_cli, time; print('imported', flush=True); time.sleep(60)"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="a PID namespace needs root")
def test_sigterm_ends_dtr_at_once_as_pid_1_before_any_command_runs() -> None:
    # unshare --fork makes the command PID 1 of a new PID namespace, and exits with its status; the signal goes to
    # that process from outside, as the kubelet's (through the runtime) does. --kill-child: gone with unshare.
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c",
                             IMPORT_THEN_SLEEP], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "imported\n"
        (child,) = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        os.kill(int(child), signal.SIGTERM)
        code = proc.wait(timeout=10)
    finally:
        proc.kill()
    assert code == 128 + signal.SIGTERM, code
