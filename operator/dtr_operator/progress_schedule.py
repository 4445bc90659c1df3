"""When the operator next reads a Running run's chief log (status.progress and the stall watchdog). Pure: the clock
is passed in, and the times are those of the run's status (UTC datetimes).

A read is one `GET pods/log`. Read every --progress-interval (5 s), a run cost 12 reads a minute whatever its epochs
took, and almost every read found the epoch the last one had found. The status says when the next epoch should end:
status.watchdog holds when the chief logged its last epoch's end (to the second) and, once one is timed, the mean
epoch time (watchdog.observe_epoch); the Running condition says when the workers started. With I the interval:

- An epoch of unknown length, the first since the workers started (it holds the data load and the tracing) and the
  one after it (the first one's time would overestimate it, and its end be read late): read every I, and once it
  has lasted 10 I, every BACKOFF of its age: its end shows at most a tenth of its length late.
- Later epochs: read MARGIN after the expected end (the last end + the mean), from earlier for long ones (LEAD),
  then a step apart (`step`: I, less for short epochs) until the epoch shows; an epoch late by more than ten steps
  (a slow epoch, a stall) every BACKOFF of its lateness.
- Never two reads of a run less than a step apart, nor more than MAX_WAIT apart (what else a read looks for, the
  chief's error line and a stall's message, is looked for at least that often), and a read just after the stall
  watchdog's deadline (WATCHDOG_MARGIN), however soon, so that a stall is flagged when it is due.
- A run the watchdog is restarting: every I (each read checks whether its TFJob can be resumed).
- A run not read yet (just seen Running, or every run when the operator starts): within I of being seen, at a point
  set by its uid (`offset`), so that runs seen together are not read together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from . import watchdog
from .spec import WatchdogSpec

# The epochs' end times in the status are the chief's own, to the second (watchdog.observe_epoch), so the next end
# is expected at the last one + the mean, and read MARGIN after (the times are whole seconds, cut down): one read an
# epoch when it ends on time. An epoch shorter than the mean shows that much later, so epochs are read from LEAD of
# the mean before their expected end, less the step that the first read covers anyway: a 600 s epoch from 25 s
# before (6 more reads of it), a 60 s one not before (the 3 s it may be short are within a step).
LEAD = 0.05
MARGIN = 1.0
# While an epoch's end is due, the reads are a step apart: the interval, or for epochs shorter than four intervals a
# quarter of the mean (a 10 s epoch read 5 s after its end would be sighted that late, and the next expected that
# late: the sightings make the mean). Never under MIN_STEP (the status's times are whole seconds), and epochs
# shorter than the interval are read every interval, as before (they show only in part).
RETRY = 0.25
MIN_STEP = 1.0
# An epoch of unknown length, or one late, is read every BACKOFF of its age (of its lateness) once that is longer
# than the step: its end then shows at most a tenth late, and a stalled run is read about once a minute.
BACKOFF = 0.1
# The longest time between two reads of a run (seconds), unless the interval itself is longer.
MAX_WAIT = 60.0
# The watchdog's deadline is read this long after it passes: the check compares times of whole seconds.
WATCHDOG_MARGIN = 1.0


@dataclass(frozen=True)
class Expected:
    """The next epoch end as the status lets one expect it: at `end`, read from `opens` on, `step` seconds apart;
    or, when its length is unknown, an epoch that began at `end` (= opens), read by its age."""

    end: datetime
    opens: datetime
    step: float


def expected_end(status: Mapping[str, Any], interval: float) -> Expected | None:
    """When the run's next epoch should end, from its status; None when it is not Running (no start time)."""
    start = watchdog.started(status)
    if start is None:
        return None
    record = watchdog.record_of(status)
    last = watchdog.parse_time(record.get("lastEpochTime"))
    if last is None or last < start:
        return Expected(start, start, interval)  # the first epoch of this start
    mean = record.get("meanEpochSeconds")
    if not record.get("timedEpochs") or not isinstance(mean, int | float) or mean <= 0:
        return Expected(last, last, interval)  # the second: only the first one's time is known, holding the tracing
    end, spacing = last + timedelta(seconds=mean), step(mean, interval)
    return Expected(end, end + timedelta(seconds=MARGIN - max(0.0, LEAD * mean - spacing)), spacing)


def step(mean: float, interval: float) -> float:
    """Seconds between reads while an epoch of `mean` seconds is due to end."""
    if mean < interval:
        return interval
    return min(interval, max(RETRY * mean, MIN_STEP))


def offset(uid: str) -> float:
    """Where in its first interval a run is first read, in [0, 1): the same for the same run, spread across runs."""
    return int.from_bytes(hashlib.sha256(uid.encode()).digest()[:4], "big") / 2**32


def next_read(
    status: Mapping[str, Any],
    watch: WatchdogSpec,
    last_read: datetime | None,
    first_seen: datetime,
    interval: float,
    spread: float,
) -> datetime:
    """When to read the run's chief log next. last_read: when it was last read (None: never since first_seen, when
    the operator first saw it Running); interval: --progress-interval; spread: the run's offset()."""
    if last_read is None:
        return first_seen + timedelta(seconds=spread * interval)
    if watchdog.restarting(status):
        return last_read + timedelta(seconds=interval)
    expected = expected_end(status, interval) or Expected(last_read, last_read, interval)
    return _bounded(_planned(expected, last_read), last_read, expected.step, _deadline(watch, status, last_read))


def _planned(expected: Expected, last_read: datetime) -> datetime:
    """The read the epochs ask for: the first of the expected end, or, once there, the next step by lateness."""
    if last_read < expected.opens:
        return expected.opens
    late = (last_read - expected.end).total_seconds()
    return last_read + timedelta(seconds=max(BACKOFF * late, expected.step))


def _deadline(watch: WatchdogSpec, status: Mapping[str, Any], at: datetime) -> datetime | None:
    """When the stall watchdog would flag the run if no epoch ended before; None when it is off, or past already."""
    verdict = watchdog.check(watch, status, watchdog.format_time(at))
    return verdict.next_check if isinstance(verdict, watchdog.Healthy) else None


def _bounded(planned: datetime, last_read: datetime, least: float, deadline: datetime | None) -> datetime:
    """planned, kept at least `least` seconds (a step) and at most MAX_WAIT after the last read, and no later than
    the watchdog's deadline (that one read may come sooner: the deadline is the watchdog's to keep)."""
    due = min(max(planned, last_read + timedelta(seconds=least)),
              last_read + timedelta(seconds=max(MAX_WAIT, least)))  # fmt: skip
    if deadline is not None:
        due = min(due, deadline + timedelta(seconds=WATCHDOG_MARGIN))
    return due
