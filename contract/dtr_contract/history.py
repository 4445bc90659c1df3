"""The run's history: one JSON object per finished epoch, appended by the chief to <log-dir>/history.jsonl
(layout.history_file), so that every epoch's figures outlive the run (status.progress keeps only the last).

    {"epoch": 3, "epochs": 8, "metrics": {"accuracy": 0.9412, "loss": 0.1931, "val_loss": 0.2101},
     "seconds": 4.21, "examplesPerSecond": 2210.4, "time": "2026-12-01T17:25:31Z"}

metrics are every figure Keras logged for the epoch (loss, the compiled metrics, val_* with validation data);
a value that is not a finite number is written as null. A run resumed from its backup appends again, so an
epoch may appear more than once: the reader keeps the LAST line of each epoch (the attempt that went on).

The reader is bounded and tolerant: a torn last line (a worker killed mid-write), a line longer than
MAX_LINE, or anything that is not such an object is skipped; at most MAX_EPOCHS epochs are kept.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

EPOCH, EPOCHS, METRICS, SECONDS, RATE, TIME = "epoch", "epochs", "metrics", "seconds", "examplesPerSecond", "time"
MAX_LINE = 64 * 1024  # characters: a longer line is not one epoch's entry
MAX_EPOCHS = 100_000  # distinct epochs kept: an epoch first seen after this many is dropped
MAX_FILE = 64 * 1024 * 1024  # bytes a reader takes of the file (its end is the newest)
MAX_METRICS = 64  # figures kept of one entry, by name


@dataclass(frozen=True)
class Epoch:
    """One finished epoch as the history file has it."""

    epoch: int
    epochs: int
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float | None = None
    examples_per_second: float | None = None
    time: str | None = None


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def history_line(epoch: int, epochs: int, metrics: Mapping[str, float], seconds: float | None,
                 examples_per_second: float | None, time: str) -> str:
    """The JSON line (without its newline) the chief appends at an epoch's end."""
    doc = {EPOCH: epoch, EPOCHS: epochs, METRICS: {str(k): _finite(v) for k, v in sorted(metrics.items())},
           SECONDS: _finite(seconds), RATE: _finite(examples_per_second), TIME: time}
    return json.dumps(doc, allow_nan=False, separators=(",", ":"))


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _object(line: str) -> dict | None:
    """The line as a JSON object, or None (too long, torn, or not an object)."""
    if len(line) > MAX_LINE:
        return None
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _metrics(given: object) -> dict[str, float]:
    pairs = ((str(k), _finite(v)) for k, v in (given.items() if isinstance(given, dict) else ()))
    return dict(sorted((k, v) for k, v in pairs if v is not None)[:MAX_METRICS])


def parse_history_line(line: str) -> Epoch | None:
    """One entry, or None: not a whole JSON object with a positive epoch <= epochs, or too long."""
    doc = _object(line)
    if doc is None:
        return None
    epoch, epochs = _positive_int(doc.get(EPOCH)), _positive_int(doc.get(EPOCHS))
    if epoch is None or epochs is None or epoch > epochs:
        return None
    metrics = _metrics(doc.get(METRICS))
    when = doc.get(TIME)
    return Epoch(epoch, epochs, metrics, _finite(doc.get(SECONDS)), _finite(doc.get(RATE)),
                 when[:64] if isinstance(when, str) else None)


def read_history(text: str) -> list[Epoch]:
    """Every epoch in a history file, in epoch order, each once (its last line: a resumed run's)."""
    last: dict[int, Epoch] = {}
    for line in text.splitlines():
        entry = parse_history_line(line)
        if entry is not None and (entry.epoch in last or len(last) < MAX_EPOCHS):
            last[entry.epoch] = entry
    return [last[epoch] for epoch in sorted(last)]
