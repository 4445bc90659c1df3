"""Each worker's log on the run's volume, so it outlives the pod: <log-dir>/<task>.log (worker-0.log ...).

Everything the process writes to Python's sys.stderr (the trainer's own lines, Python warnings,
Keras and TensorFlow's Python logging) still goes to stderr unchanged and is also appended to the
file, each line prefixed with its UTC time. TensorFlow's C++ logging and the heartbeat's child process
(progress.Heartbeat) write to file descriptor 2 directly and only reach the pod log. Append mode: a
restarted container's lines follow the earlier ones, after a `container start` line. The file is a
convenience: if it cannot be written, one warning goes to stderr and training goes on.

It is capped (dtr_contract.disk, every container of the worker together): all lines up to WORKER_LOG_MAX_BYTES,
then one line saying the log was cut, then only the lines its readers count on, the epoch-end lines (the tests and
benchmarks that read a run's progress from the chief's file) and each container's start, up to
WORKER_LOG_RESERVE_BYTES more; then nothing. stderr, so the pod log (`kubectl logs`, `dtr logs`), keeps every line.
A line longer than LINE_PIECE characters is written in pieces of that length (the pending part is never larger).
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

from dtr_contract import disk, layout
from dtr_contract.progress import parse_epoch_end_line

from dtr_trainer.lineage import RunIdentity

CONTAINER_START = "===== container start: "
CUT = "===== this log file is cut at "
LINE_PIECE = 64 * 1024  # characters of one line held before they are written: a longer line goes in pieces


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def kept_past_the_cap(line: str) -> bool:
    """The lines a cut log still takes: the trainer's epoch ends, and each container's start."""
    return parse_epoch_end_line(line) is not None or line.split(" ", 1)[-1].startswith(CONTAINER_START)


def cut_line(cap: int, reserve: int) -> str:
    return (f"{_stamp()} {CUT}{cap} bytes (dtr_contract.disk): from here only epoch-end "
            f"lines and container starts, at most {reserve} bytes more; the pod log (kubectl logs, dtr logs) has every "
            "line =====\n")


class Budget:
    """What of each line the file still takes, by the bytes it holds (its size when opened, for a restarted
    container). No I/O: given the lines, it says what to append."""

    def __init__(self, used: int, cut: bool = False, cap: int = disk.WORKER_LOG_MAX_BYTES,
                 reserve: int = disk.WORKER_LOG_RESERVE_BYTES):
        self.used, self.cap, self.reserve = used, cap, reserve
        self.cut = cut or used >= cap  # cut by an earlier container: the line saying so is there already

    def admit(self, line: str) -> str:
        """What to append for one whole line (its newline included): the line, the cut notice before the line or
        instead of it, or nothing."""
        size = len(line.encode("utf-8", "replace"))  # a lone surrogate: the file's write refuses it, not this count
        if not self.cut and self.used + size <= self.cap:
            self.used += size
            return line
        out = ""
        if not self.cut:
            self.cut, out = True, cut_line(self.cap, self.reserve)
            self.used += len(out.encode())
        if self.used + size <= self.cap + self.reserve and kept_past_the_cap(line):
            self.used += size
            out += line
        return out


class Tee:
    """sys.stderr's replacement: writes go to the original stream first, then, line by line, to the file."""

    def __init__(self, stream: TextIO, file: TextIO, warn: Callable[[str], None], budget: Budget | None = None):
        self._stream, self._file, self._warn = stream, file, warn
        self._budget = budget or Budget(0)
        self._pending = ""
        self._lock = threading.RLock()  # the warning in _append writes through this Tee again

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        with self._lock:
            if self._file is not None:
                *lines, self._pending = (self._pending + text).split("\n")
                while len(self._pending) > LINE_PIECE:  # no newline for that long: a piece now
                    lines.append(self._pending[:LINE_PIECE])
                    self._pending = self._pending[LINE_PIECE:]
                stamp = _stamp()
                self._append("".join(self._budget.admit(f"{stamp} {line}\n") for line in lines))
        return written

    def _append(self, text: str) -> None:
        file = self._file
        if file is None or not text:
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
                self._append(self._budget.admit(f"{_stamp()} {self._pending}\n"))
                self._pending = ""
            file, self._file = self._file, None
        if file is not None:
            file.close()

    def __getattr__(self, name: str):  # encoding, isatty, fileno, ... of the real stream
        return getattr(self._stream, name)


_tee: Tee | None = None


def cut_before(path: Path, size: int) -> bool:
    """Whether an earlier container of the worker cut the file: then its notice is among the last bytes (at most
    the reserve follows it). The file may be under the cap after it: the line that would have crossed it is not
    there."""
    with open(path, "rb") as f:
        f.seek(max(0, size - disk.WORKER_LOG_RESERVE_BYTES - 1024))
        return CUT.encode() in f.read()


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
        size = os.fstat(file.fileno()).st_size
        budget = Budget(size, cut_before(path, size))
        file.write(budget.admit(f"{_stamp()} {CONTAINER_START}{task} of {run.describe()}, "
                                f"host {socket.gethostname()}, pid {os.getpid()} =====\n"))
        file.flush()
    except OSError as exc:
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()
        warn(f"warning: cannot write the worker log {path} ({exc.strerror or exc}); logging to stderr only")
        return None
    _tee = Tee(sys.stderr, file, warn, budget)
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
