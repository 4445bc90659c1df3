"""What `dtr run` prints: the workers' lines, prefixed with their replica and written whole, and a line of its own at
each epoch the chief finishes (the last one kept for status.progress)."""

from __future__ import annotations

import threading
import time
from typing import TextIO

from dtr_contract.progress import EpochEnd, is_heartbeat, parse_epoch_end_line


class Console:
    """Lines from several replicas, whole lines at a time."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.epoch: dict[str, tuple[int, int]] = {}
        self.started = time.monotonic()
        self.last_end: EpochEnd | None = None  # the chief's last finished epoch (status.progress)

    def say(self, text: str) -> None:
        with self.lock:
            print(text, file=self.out, flush=True)

    def replica_line(self, label: str, line: str) -> None:
        if is_heartbeat(line):
            return  # only the operator's stall watchdog reads it (in a pod's log): noise here
        self.say(f"[{label}] {line}")
        end = parse_epoch_end_line(line) if label.endswith("-0") else None
        if end is not None:
            self.last_end = end
            self.say(f"[dtr] epoch {end.epoch}/{end.epochs} done ({time.monotonic() - self.started:.0f}s)")
