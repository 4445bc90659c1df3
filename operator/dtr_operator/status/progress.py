"""status.progress from the chief's log (dtr_contract.progress): the last finished epoch and when it ended. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dtr_contract import progress
from dtr_contract.progress import EpochEnd

from ..reasons import (
    RUNNING,
)

MAX_LOG = 64 * 1024  # characters of the chief's log read for its last epoch (its end: the newest lines)


def parse_epoch_end(log_text: str, epochs: int | None = None) -> EpochEnd | None:
    """The chief's last finished epoch of a run of `epochs` (dtr_contract.progress), or None; never raises: the
    log is the run's own writing."""
    try:
        return progress.parse_epoch_end(log_text[-MAX_LOG:], epochs)
    except Exception:  # an unreadable log is no progress, not a stuck poll loop
        return None


# A line of a log read with timestamps (pods/log?timestamps=true, `kubectl logs --timestamps`): the container
# runtime's RFC 3339 time, in UTC, to the nanosecond; its whole seconds are the status's time format.
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d{1,9})?Z ", re.ASCII)


def unstamped(line: str) -> str:
    """A log line without the runtime's timestamp, as the container wrote it."""
    stamp = _STAMP.match(line)
    return line[stamp.end():] if stamp else line


def epoch_logged_at(log_text: str, epochs: int | None = None) -> str | None:
    """When the chief logged the epoch parse_epoch_end finds (the runtime's timestamp of its line, whole seconds,
    as the status's times), or None: no such line, or it has no timestamp. The time is the container runtime's,
    not the run's: its code can print an epoch's line, not the time the runtime puts before it."""
    for line in reversed(log_text[-MAX_LOG:].splitlines()):
        if progress.parse_epoch_end_line(line, epochs) is not None:
            stamp = _STAMP.match(line)
            return f"{stamp[1]}Z" if stamp else None
    return None


def progress_of(end: EpochEnd, now: str) -> dict[str, Any]:
    """status.progress for a finished epoch; named as Kubeflow Trainer v2's trainerStatus where they mean
    the same (progressPercentage, estimatedRemainingSeconds, metrics as name/value strings, lastUpdatedTime)."""
    progress: dict[str, Any] = {
        "epoch": end.epoch,
        "epochs": end.epochs,
        "epochsDone": f"{end.epoch}/{end.epochs}",
        "progressPercentage": end.epoch * 100 // end.epochs,
        "metrics": [{"name": name, "value": f"{value:.4f}"} for name, value in end.metrics],
        "lastUpdatedTime": now,
    }
    if end.examples_per_second is not None:
        progress["examplesPerSecond"] = round(end.examples_per_second, 1)
    if end.remaining_seconds is not None:
        progress["estimatedRemainingSeconds"] = end.remaining_seconds
    return progress


def _same_progress(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    def strip(p: Mapping[str, Any] | None) -> dict[str, Any]:
        return {k: v for k, v in (p or {}).items() if k != "lastUpdatedTime"}

    return strip(a) == strip(b)


def running_progress(previous: Mapping[str, Any], end: EpochEnd | None, now: str) -> dict[str, Any]:
    """The status with the chief's last finished epoch, while Running; anything else is left as is."""
    if previous.get("phase") != RUNNING or end is None:
        return dict(previous)
    progress = progress_of(end, now)
    if _same_progress(previous.get("progress"), progress):
        return dict(previous)
    return {**previous, "progress": progress}


def final_progress(previous: Mapping[str, Any] | None, epochs: int, now: str,
                   done: int | None = None) -> dict[str, Any]:
    """status.progress of a run that succeeded: every epoch done (or `done`, where a callback stopped it early),
    nothing left; the last epoch's figures kept."""
    done = epochs if done is None else done
    return {
        **(previous or {}),
        "epoch": done,
        "epochs": epochs,
        "epochsDone": f"{done}/{epochs}",
        "progressPercentage": 100,
        "estimatedRemainingSeconds": 0,
        "lastUpdatedTime": now,
    }
