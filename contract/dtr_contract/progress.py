"""The epoch-end log line: the trainer writes one at each epoch's end, the operator reads the chief's last
one from its log for status.progress, and `dtr run` prints its own progress from it.

    epoch 3/8 end accuracy=0.9412 loss=0.1931 examples_per_second=2210.4 remaining_seconds=41

The trainer writes it after its own prefix (`dtr_trainer[worker-0]: `, trainer_line), which a log timestamp
may precede; metrics are every `name=value` Keras reported, sorted by name, then the throughput and (when
known) the time left.

The reader takes only that shape, whole, and bounded: a line that merely contains the words (a crafted
.npz makes the trainer quote its header in an error line) or that is oversized is not an epoch's end.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

_RATE, _REMAINING = "examples_per_second", "remaining_seconds"
TRAINER = "dtr_trainer"  # the prefix of every line the trainer logs: dtr_trainer[<task>]: <message>
MAX_LINE = 4096  # characters: a longer line is not the trainer's epoch end
MAX_METRICS = 16  # figures kept of one line (by name), beside the throughput and the time left
MAX_REMAINING_SECONDS = 10**7  # the time left is clamped to this (about 4 months)
MAX_FIGURE = 1e18  # a larger value is left out, as a non-finite one is
# From the rendezvous to the export, every worker logs HEARTBEAT every HEARTBEAT_SECONDS from a child process: a
# worker blocked in a collective (waiting for a frozen peer) still logs it, a frozen container does not, so the stall
# watchdog names the silent worker by the log that stayed empty (docs/api.md#stalled-runs).
HEARTBEAT = "alive"
HEARTBEAT_SECONDS = 20
SILENT_SECONDS = HEARTBEAT_SECONDS * 5 // 2  # a worker whose log has no line for this long is silent (frozen)
# Anchored: an optional log timestamp, the trainer's prefix, then the line epoch_end_line writes; bounded digits.
_LINE = re.compile(
    rf"(?:\d{{4}}-\d\d-\d\dT[\d:.]{{8,24}}Z )?{TRAINER}\[[\w.-]{{1,64}}\]: "
    r"epoch ([1-9]\d{0,5})/([1-9]\d{0,5}) end((?: [A-Za-z_][\w.]{0,63}=[-+\w.]{1,32})*)",
    re.ASCII,
)


def is_heartbeat(line: str) -> bool:
    """Whether a log line is the trainer's heartbeat (trainer_line of HEARTBEAT), which tells only that it lives."""
    return line.rstrip().endswith(f"]: {HEARTBEAT}") and TRAINER in line


def trainer_line(task: str, message: str) -> str:
    """A line of the trainer's log: its prefix, then the message."""
    return f"{TRAINER}[{task}]: {message}"


@dataclass(frozen=True)
class EpochEnd:
    epoch: int
    epochs: int
    metrics: tuple[tuple[str, float], ...]  # sorted by name
    examples_per_second: float | None
    remaining_seconds: int | None


def epoch_end_line(epoch: int, epochs: int, metrics: Mapping[str, float], examples_per_second: float,
                   remaining_seconds: int | None) -> str:
    shown = [f"{k}={v:.4f}" for k, v in sorted(metrics.items())]
    shown.append(f"{_RATE}={examples_per_second:.1f}")
    if remaining_seconds is not None:
        shown.append(f"{_REMAINING}={remaining_seconds}")
    return f"epoch {epoch}/{epochs} end {' '.join(shown)}"


def _number(text: str, limit: float = MAX_FIGURE) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and abs(value) <= limit else None


def parse_epoch_end_line(line: str, epochs: int | None = None) -> EpochEnd | None:
    """The epoch a line says has ended, or None: not the trainer's epoch-end line, an epoch outside
    1..epochs, or (when given) a count of epochs other than `epochs`, the run's own. Values that are not
    finite numbers are left out, the time left is clamped, and at most MAX_METRICS figures are kept."""
    match = _LINE.fullmatch(line.rstrip()) if len(line) <= MAX_LINE else None
    if not match:
        return None
    epoch, total = int(match[1]), int(match[2])
    if not epoch <= total or epochs not in (None, total):
        return None
    values = dict(pair.split("=", 1) for pair in match[3].split())
    remaining = _number(values.pop(_REMAINING, "nan"), limit=math.inf)
    numbers = {k: v for k, v in ((k, _number(v)) for k, v in values.items()) if v is not None}
    rate = numbers.pop(_RATE, None)
    return EpochEnd(epoch, total, tuple(sorted(numbers.items()))[:MAX_METRICS], rate,
                    None if remaining is None else int(min(MAX_REMAINING_SECONDS, max(0.0, remaining))))


def parse_epoch_end(log: str, epochs: int | None = None) -> EpochEnd | None:
    """The last finished epoch in a worker's log (of a run of `epochs` epochs, when given), or None when no
    epoch has finished yet."""
    for line in reversed(log.splitlines()):
        end = parse_epoch_end_line(line, epochs)
        if end is not None:
            return end
    return None
