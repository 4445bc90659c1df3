"""`dtr run` as a user runs it, in a directory of its own and with no cluster: its exit code, its output and the
status it prints at the end (the e2e tests of a user's own model file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml


def dtr_run(tmp_path: Path, *argv: str, timeout: float = 600) -> tuple[int, str, dict[str, Any]]:
    env = {**os.environ, "DTR_RUN_DIR": str(tmp_path / ".dtr")}
    env.pop("KUBECONFIG", None)  # no cluster involved
    proc = subprocess.run([sys.executable, "-m", "dtr_cli", "run", *argv],
                          check=False, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    out = proc.stdout
    assert "\nstatus:\n" in out, f"exit {proc.returncode}\n{out[-3000:]}\n{proc.stderr[-2000:]}"
    status = yaml.safe_load(out[out.index("\nstatus:\n") + 1 :].split("\n[dtr] ")[0])["status"]
    return proc.returncode, out, status
