"""The epoch-end log line: the trainer writes one at each epoch's end, the operator reads the chief's last
one from its log for status.progress, and `dtr run` prints its own progress from it.

    epoch 3/8 end accuracy=0.9412 loss=0.1931 examples_per_second=2210.4 remaining_seconds=41

The line may carry a prefix (the trainer's `dtr_trainer[worker-0]: `, a log timestamp); metrics are
every `name=value` Keras reported, sorted by name, then the throughput and (when known) the time left.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

_RATE, _REMAINING = "examples_per_second", "remaining_seconds"
_LINE = re.compile(r"\bepoch (\d+)/(\d+) end\b(.*)$")


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


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_epoch_end_line(line: str) -> EpochEnd | None:
    """The epoch a line says has ended, or None: not such a line, or an epoch outside 1..epochs.
    Values that are not finite numbers are left out."""
    match = _LINE.search(line)
    if not match:
        return None
    epoch, epochs = int(match[1]), int(match[2])
    if not 0 < epoch <= epochs:
        return None
    values = dict(pair.split("=", 1) for pair in match[3].split() if "=" in pair)
    numbers = {k: v for k, v in ((k, _number(v)) for k, v in values.items()) if v is not None}
    rate = numbers.pop(_RATE, None)
    remaining = numbers.pop(_REMAINING, None)
    return EpochEnd(epoch, epochs, tuple(sorted(numbers.items())), rate,
                    None if remaining is None else max(0, int(remaining)))


def parse_epoch_end(log: str) -> EpochEnd | None:
    """The last finished epoch in a worker's log, or None when no epoch has finished yet."""
    for line in reversed(log.splitlines()):
        end = parse_epoch_end_line(line)
        if end is not None:
            return end
    return None
