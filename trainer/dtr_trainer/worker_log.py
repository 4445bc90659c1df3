"""Each worker's log on the run's volume, so it outlives the pod: <log-dir>/<task>.log (worker-0.log ...).

Everything the process writes to Python's sys.stderr (the trainer's own lines, Python warnings,
Keras and TensorFlow's Python logging) still goes to stderr unchanged and is also appended to the
file, each line prefixed with its UTC time. TensorFlow's C++ logging and the heartbeat's child process
(progress.Heartbeat) write to file descriptor 2 directly and only reach the pod log. Append mode: a
restarted container's lines follow the earlier ones, after a `container start` line. The file is a
convenience: if it cannot be written, one warning goes to stderr and training goes on.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, TextIO

from dtr_contract import layout

from dtr_trainer.lineage import RunIdentity


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Tee:
    """sys.stderr's replacement: writes go to the original stream first, then, line by line, to the file."""

    def __init__(self, stream: TextIO, file: TextIO, warn: Callable[[str], None]):
        self._stream, self._file, self._warn = stream, file, warn
        self._pending = ""
        self._lock = threading.RLock()  # the warning in _append writes through this Tee again

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        with self._lock:
            if self._file is not None and "\n" in text:
                *lines, self._pending = (self._pending + text).split("\n")
                stamp = _stamp()
                self._append("".join(f"{stamp} {line}\n" for line in lines))
            elif self._file is not None:
                self._pending += text
        return written

    def _append(self, text: str) -> None:
        file = self._file
        if file is None:
            return
        try:
            file.write(text)
            file.flush()
        except (OSError, ValueError) as exc:  # volume full or gone: stop copying, keep training
            self._file = None
            self._warn(f"warning: cannot write the worker log on the volume any more ({exc}); stderr only")

    def flush(self) -> None:
        self._stream.flush()

    def close_file(self) -> None:
        with self._lock:
            if self._pending:
                self._append(f"{_stamp()} {self._pending}\n")
                self._pending = ""
            file, self._file = self._file, None
        if file is not None:
            file.close()

    def __getattr__(self, name: str):  # encoding, isatty, fileno, ... of the real stream
        return getattr(self._stream, name)


_tee: Tee | None = None


def log_path(log_dir: str, task: str) -> Path:
    return Path(layout.worker_log_file(log_dir, task))


def start(log_dir: str | None, task: str, run: RunIdentity, warn: Callable[[str], None]) -> Path | None:
    """Open <log-dir>/<task>.log for appending and copy stderr into it; None (after one warning
    through `warn`) when it cannot be opened."""
    global _tee
    if not log_dir or _tee is not None:
        return None
    path = log_path(log_dir, task)
    file = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the life of the process)
        file.write(f"{_stamp()} ===== container start: {task} of {run.describe()}, "
                   f"host {socket.gethostname()}, pid {os.getpid()} =====\n")
        file.flush()
    except OSError as exc:
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()
        warn(f"warning: cannot write the worker log {path} ({exc.strerror or exc}); logging to stderr only")
        return None
    _tee = Tee(sys.stderr, file, warn)
    sys.stderr = _tee
    return path


def stop() -> None:
    """Put the real stderr back and close the file (the last partial line included)."""
    global _tee
    tee, _tee = _tee, None
    if tee is None:
        return
    if sys.stderr is tee:
        sys.stderr = tee._stream
    tee.close_file()
