"""The stall watchdog: whether a Running run has gone too long without finishing an epoch, and what to do. Pure.

It rides on the operator's poll of the chief's log (reconcile.Reconciler.poll_progress): each poll that sees a
new epoch adds its end to the run's record (status.watchdog), and every poll checks the record against the clock,
which costs no API call. The poll's schedule (progress_schedule.py) reads each run once its deadline has passed.
Only a newly stalled run has its workers' logs read, to name the silent ones.

The rule (spec.watchdog, docs/api.md#stalled-runs): stalled when no epoch has finished for
stallFactor x the mean epoch time, and never sooner than minStallSeconds after the last epoch's end or, before
the first epoch of the workers' current start (the data load and tracing are in it), minStallSeconds alone after
they started. The mean leaves out each start's first epoch; until there is one, the first epoch's own time stands
for it (an overestimate: it holds the tracing).

status.watchdog keeps (the operator's own record, read back on each poll; times as the status writes them):
lastEpoch, lastEpochTime (when it ended: the container runtime's timestamp of the chief's epoch line, else when the
operator read it), meanEpochSeconds and timedEpochs (the epochs it is the
mean of), restarts and restarting (onStall Restart: the TFJob is suspended, to be resumed once the training-operator
says so), stalledSince (the stall already acted on).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dtr_contract.progress import SILENT_SECONDS

from .reasons import EPOCH_FINISHED, NO_EPOCH_PROGRESS, RUNNING, STALLED_CONDITION, SUCCEEDED
from .spec import RunSpec, WatchdogSpec
from .status.conditions import set_condition
from .status.state import clean_text

RECORD = "watchdog"  # status.watchdog
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
REPORT, RESTART = "Report", "Restart"


def parse_time(text: Any) -> datetime | None:
    """A status time (RFC 3339, UTC, seconds), or None when absent or not one."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def format_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime(TIME_FORMAT)


def record_of(status: Mapping[str, Any]) -> Mapping[str, Any]:
    record = status.get(RECORD)
    return record if isinstance(record, Mapping) else {}


def condition(status: Mapping[str, Any], cond_type: str) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == cond_type), None)


def is_stalled(status: Mapping[str, Any]) -> bool:
    """Whether the run's Stalled condition holds."""
    found = condition(status, STALLED_CONDITION)
    return found is not None and found.get("status") == "True"


def started(status: Mapping[str, Any]) -> datetime | None:
    """When the workers last started: the Running condition's move to True (a resume, and a restart for a stall,
    which suspends and resumes the TFJob, move it too); None while the run is not Running."""
    running = condition(status, RUNNING)
    if status.get("phase") != RUNNING or running is None or running.get("status") != "True":
        return None
    return parse_time(running.get("lastTransitionTime"))


def effective(run: RunSpec) -> WatchdogSpec:
    """The run's watchdog as the operator applies it: a queued run's (spec.queueName) is Report only, since
    its TFJob's suspension is Kueue's, which a restart (a suspend and a resume) would fight."""
    if run.queue_name is not None and run.watchdog.on_stall == RESTART:
        return dataclasses.replace(run.watchdog, on_stall=REPORT)
    return run.watchdog


# ---- the record: one more epoch seen ------------------------------------------------------------


def observe_epoch(status: Mapping[str, Any], epoch: int, now: str) -> dict[str, Any]:
    """status.watchdog once the chief's last finished epoch is `epoch`, ended at `now` (as its log says). An epoch's
    time is the time between the two ends, per epoch between them, counted only within one start of the workers."""
    record = dict(record_of(status))
    last, seen_at, at = record.get("lastEpoch"), parse_time(record.get("lastEpochTime")), parse_time(now)
    if last == epoch or at is None:
        return record
    record |= {"lastEpoch": epoch, "lastEpochTime": now}
    start = started(status)
    if isinstance(last, int) and seen_at is not None and epoch > last and (start is None or seen_at >= start):
        sample = (at - seen_at).total_seconds() / (epoch - last)
        timed = int(record.get("timedEpochs") or 0)
        mean = float(record.get("meanEpochSeconds") or 0.0)
        record |= {"meanEpochSeconds": round((mean * timed + sample) / (timed + 1), 1), "timedEpochs": timed + 1}
    return record


def with_epoch(status: Mapping[str, Any], epoch: int | None, now: str) -> dict[str, Any]:
    """The status with the epoch in its record, while Running; anything else as it is."""
    if epoch is None or status.get("phase") != RUNNING:
        return dict(status)
    record = observe_epoch(status, epoch, now)
    return dict(status) if record == record_of(status) else {**status, RECORD: record}


# ---- the verdict ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Healthy:
    """Not stalled; next_check: when it would be, with no epoch finishing before (None: not watched now)."""

    next_check: datetime | None


@dataclass(frozen=True)
class Stalled:
    """No epoch for `silent_seconds`, more than `limit_seconds` allows, since `since` (the deadline passed)."""

    since: datetime
    silent_seconds: int
    limit_seconds: int
    why: str  # how the limit was set: "5 x mean epoch 62 s", "minStallSeconds 600"
    first_epoch: bool  # no epoch has finished since the workers started


Verdict = Healthy | Stalled


def _limit(watch: WatchdogSpec, mean: float | None) -> tuple[float, str]:
    floor = float(watch.min_stall_seconds)
    if mean is None or watch.stall_factor * mean <= floor:
        return floor, f"minStallSeconds {watch.min_stall_seconds}"
    return watch.stall_factor * mean, f"{watch.stall_factor:g} x mean epoch {mean:.0f} s"


def _mean(record: Mapping[str, Any], last_epoch: datetime, start: datetime) -> float:
    """The mean epoch time, or while none is timed, the time the first epoch since the start took."""
    if record.get("timedEpochs") and isinstance(record.get("meanEpochSeconds"), int | float):
        return float(record["meanEpochSeconds"])
    return (last_epoch - start).total_seconds()


def check(watch: WatchdogSpec, status: Mapping[str, Any], now: str) -> Verdict:
    """Whether the run is stalled at `now`, from its status alone."""
    start, at = started(status), parse_time(now)
    if not watch.enabled or start is None or at is None:
        return Healthy(None)
    record = record_of(status)
    last_epoch = parse_time(record.get("lastEpochTime"))
    first = last_epoch is None or last_epoch < start
    if first:
        since, (limit, why) = start, _limit(watch, None)
    else:
        assert last_epoch is not None
        since, (limit, why) = last_epoch, _limit(watch, _mean(record, last_epoch, start))
    deadline = since + timedelta(seconds=limit)
    if at < deadline:
        return Healthy(deadline)
    return Stalled(deadline, int((at - since).total_seconds()), int(limit), why, first)


# ---- what to do ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    """A stall not acted on yet: name the silent workers, set the condition, say it; then `then`: REPORT,
    RESTART the workers (restart number `restart`), or give up (`fail`)."""

    verdict: Stalled
    then: str
    restart: int = 0
    fail: bool = False
    queue: str | None = None  # REPORT because Kueue's queue of this name manages the TFJob (left_to_kueue)


@dataclass(frozen=True)
class Clear:
    """An epoch finished since the stall: the condition goes False."""


@dataclass(frozen=True)
class Remind:
    """Still stalled and said: the status message (which a TFJob event rewrote) says so again."""

    message: str


Step = Flag | Clear | Remind | None


def decide(watch: WatchdogSpec, status: Mapping[str, Any], now: str) -> Step:
    """The watchdog's step for a Running run at `now`: None when there is nothing to do."""
    verdict = check(watch, status, now)
    record = record_of(status)
    if isinstance(verdict, Stalled) and record.get("stalledSince") != format_time(verdict.since):
        return _flag(watch, verdict, record)
    if not is_stalled(status) or status.get("phase") != RUNNING:
        return None
    return _after_flag(status, record)


def _after_flag(status: Mapping[str, Any], record: Mapping[str, Any]) -> Step:
    """A Running run whose Stalled condition holds: clear it once an epoch has ended since, else remind."""
    stalled = condition(status, STALLED_CONDITION) or {}
    last_epoch, flagged = parse_time(record.get("lastEpochTime")), parse_time(stalled.get("lastTransitionTime"))
    if last_epoch is not None and flagged is not None and last_epoch > flagged:
        return Clear()
    message = str(stalled.get("message") or "")
    return Remind(message) if message and status.get("message") != STALLED_PREFIX + message else None


def _flag(watch: WatchdogSpec, verdict: Stalled, record: Mapping[str, Any]) -> Flag:
    if watch.on_stall != RESTART:
        return Flag(verdict, REPORT)
    restarts = int(record.get("restarts") or 0)
    if restarts >= watch.max_restarts:
        return Flag(verdict, RESTART, restarts, fail=True)
    return Flag(verdict, RESTART, restarts + 1)


# ---- words and the status ------------------------------------------------------------------------


def silent_workers(logs: Mapping[str, str | None]) -> list[str]:
    """The workers (pod name -> its log's last SILENT_SECONDS, None when unreadable) that logged nothing."""
    return sorted(name for name, text in logs.items() if not (text or "").strip())


def stall_message(verdict: Stalled, silent: Sequence[str], workers: int) -> str:
    """The Stalled condition's message: how long, against what, and who is silent."""
    if verdict.first_epoch:
        what = f"no epoch finished in the {verdict.silent_seconds} s since the workers started ({verdict.why})"
    else:
        what = f"no epoch finished for {verdict.silent_seconds} s ({verdict.why})"
    if silent:
        who = f"silent: {', '.join(silent)}"
    else:
        who = f"silent: none (all {workers} workers logged within {SILENT_SECONDS} s: blocked, not frozen)"
    return f"{what}; {who}"


def left_to_kueue(flag: Flag, queue: str | None) -> Flag:
    """The flag of a run whose TFJob names a Kueue queue though the run names none (Kueue's LocalQueue defaulting
    adds the label; security review R10): reported only, as effective makes a queued run's, since a restart (a
    suspend and a resume) would fight Kueue's suspension of an admitted workload."""
    if queue is None or flag.then != RESTART:
        return flag
    return Flag(flag.verdict, REPORT, queue=queue)


def then_message(flag: Flag, watch: WatchdogSpec) -> str:
    """What the operator does about it, for the status and the event."""
    if flag.then == REPORT and flag.queue is not None:
        return f"reported only (Kueue's queue {flag.queue} manages the TFJob: a restart would fight its suspension)"
    if flag.then == REPORT:
        return "reported only (spec.watchdog.onStall: Report)"
    if flag.fail:
        return f"the run fails: its {watch.max_restarts} restarts for stalls (spec.watchdog.maxRestarts) are used up"
    return f"restarting the workers from their backup (restart {flag.restart} of {watch.max_restarts})"


def flagged_record(status: Mapping[str, Any], flag: Flag, now: str) -> dict[str, Any]:
    """status.watchdog once the stall is acted on: its time, and the restart when there is one."""
    record = {**record_of(status), "stalledSince": format_time(flag.verdict.since)}
    if flag.then == RESTART and not flag.fail:
        record |= {"restarts": flag.restart, "restarting": True}
    return record


def restarting(status: Mapping[str, Any]) -> bool:
    """Whether the operator suspended the run's TFJob to restart its workers and has not resumed it yet."""
    return record_of(status).get("restarting") is True


def suspend_missing(status: Mapping[str, Any], tfjob: Mapping[str, Any]) -> bool:
    """A restart recorded (restarting) whose TFJob was never suspended: the suspend that follows the record failed (an
    API error, as the training-operator's webhook timing out under load, or the operator stopped in between), and
    nothing would ever resume the run. True when the TFJob neither asks to be suspended nor has said Suspended (or
    resumed) since the stall was flagged."""
    flagged = _restart_pending_since(status, tfjob)
    return flagged is not None and not any(_moved_since(c, flagged) for c in _conditions(tfjob, "Suspended"))


def resume_unrecorded(status: Mapping[str, Any], tfjob: Mapping[str, Any]) -> bool:
    """A restart recorded (restarting) whose TFJob was suspended and has been resumed since the stall was flagged: the
    resume went through but its record (restarted_status) did not (an API error, or the operator stopped in between),
    and the run would stay `restarting`, its progress never read again. True when the TFJob does not ask to be
    suspended and its Suspended condition turned False since the flag."""
    flagged = _restart_pending_since(status, tfjob)
    return flagged is not None and any(c.get("status") == "False" and _moved_since(c, flagged)
                                       for c in _conditions(tfjob, "Suspended"))  # fmt: skip


def _restart_pending_since(status: Mapping[str, Any], tfjob: Mapping[str, Any]) -> datetime | None:
    """When the stall was flagged, for a restart recorded (restarting) whose TFJob does not ask to be suspended (the
    training-operator's turn then); None otherwise."""
    if not restarting(status) or _suspend_asked(tfjob):
        return None
    return parse_time((condition(status, STALLED_CONDITION) or {}).get("lastTransitionTime"))


def _suspend_asked(tfjob: Mapping[str, Any]) -> bool:
    return ((tfjob.get("spec") or {}).get("runPolicy") or {}).get("suspend") is True


def _conditions(obj: Mapping[str, Any], cond_type: str) -> list[Mapping[str, Any]]:
    return [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == cond_type]


def _moved_since(cond: Mapping[str, Any], at: datetime) -> bool:
    """Whether a condition moved at or after `at` (one with no time counts: it is not known not to have)."""
    moved = parse_time(cond.get("lastTransitionTime"))
    return moved is None or moved >= at


def restarted_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status once the TFJob is resumed after a restart for a stall (False, not the key left out: the status
    write is a merge patch, which keeps a key it does not name)."""
    return {**status, RECORD: {**record_of(status), "restarting": False}}


STALLED_PREFIX = "Stalled: "  # status.message of a Running run while its Stalled condition holds


def flagged_status(status: Mapping[str, Any], flag: Flag, message: str, now: str,
                   generation: int | None) -> dict[str, Any]:  # fmt: skip
    """The status once a stall is acted on: the condition (True, NoEpochProgress), the record, and the run's
    message saying it (the phase stays what it is: Running)."""
    message = clean_text(message)
    conditions = set_condition(status.get("conditions") or [], STALLED_CONDITION, True, NO_EPOCH_PROGRESS, message,
                               now, generation)  # fmt: skip
    out = {**status, "conditions": conditions, RECORD: flagged_record(status, flag, now)}
    if status.get("phase") == RUNNING:
        out["message"] = STALLED_PREFIX + message
    return out


def cleared_status(status: Mapping[str, Any], now: str, generation: int | None) -> dict[str, Any]:
    """The status once an epoch has finished after a stall: the condition False (EpochFinished)."""
    record = record_of(status)
    message = f"epoch {record.get('lastEpoch')} finished at {record.get('lastEpochTime')}, after the stall"
    conditions = set_condition(status.get("conditions") or [], STALLED_CONDITION, False, EPOCH_FINISHED, message,
                               now, generation)  # fmt: skip
    out = {**status, "conditions": conditions}
    if str(status.get("message") or "").startswith(STALLED_PREFIX):
        out["message"] = f"training again: {message}"
    return out


def reminded_status(status: Mapping[str, Any], message: str) -> dict[str, Any]:
    """A Running run whose Stalled condition holds: its message says so (a TFJob event may have rewritten it)."""
    if status.get("phase") != RUNNING or not is_stalled(status):
        return dict(status)
    return {**status, "message": STALLED_PREFIX + message}


def settled(status: Mapping[str, Any], now: str, generation: int | None) -> dict[str, Any]:
    """A run that succeeded while its Stalled condition held (a stall found in the final evaluation or export,
    which then ended): the condition goes False with the run's reason. A failed run keeps it: the stall may be why."""
    if status.get("phase") != SUCCEEDED or not is_stalled(status):
        return dict(status)
    conditions = set_condition(status.get("conditions") or [], STALLED_CONDITION, False,
                               str(status.get("reason") or SUCCEEDED), "", now, generation)  # fmt: skip
    return {**status, "conditions": conditions}
