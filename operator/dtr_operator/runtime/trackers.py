"""What the operator keeps in memory of runs instead of kopf's timers and retries, and when each is due: the runs
waiting for their pods, the runs waiting to be tried again, the Running runs whose progress is read. In memory only:
a restarted operator rebuilds them from its watch of runs. The loops that act on them: loops.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from .. import progress_schedule, watchdog
from ..reasons import RUNNING
from ..settings import Settings
from ..spec import SpecError, WatchdogSpec, parse_run
from ..status.waiting import waits_for_pods

RunRef = tuple[str, str, str]  # namespace, name, uid
# Pods normally start within seconds: a run still waiting after this long has its pods looked at,
# and again every this long.
POD_CHECK_SECONDS = 20.0


class WaitingRuns:
    """The runs waiting for their worker pods, and since when (monotonic seconds). In memory only.

    No TFJob event tells of a pod stuck in ImagePullBackOff or Unschedulable (the TFJob stays
    Created, or Running once another worker runs), so the operator looks at such a run's pods itself once it
    has waited `after` seconds (status.waits_for_pods).
    Not a kopf timer: kopf puts a finalizer on every object a timer serves, and a run must stay
    deletable while the operator is down.
    """

    def __init__(self, after: float) -> None:
        self.after = after
        self._since: dict[RunRef, float] = {}

    def seen(self, ref: RunRef, status: Mapping[str, Any] | None, at: float) -> None:
        if waits_for_pods(status):
            self._since.setdefault(ref, at)
        else:
            self._since.pop(ref, None)

    def gone(self, ref: RunRef) -> None:
        self._since.pop(ref, None)

    def due(self, at: float) -> list[RunRef]:
        return [ref for ref, since in list(self._since.items()) if at - since >= self.after]


class RetryingRuns:
    """The runs whose reconcile_run asked to be called again (they wait: for their code's ConfigMap, a PVC, the TFJob
    CRD, the API ...), when (monotonic seconds) and with which retry count. In memory only: a restarted operator's
    resume handler finds them waiting again.

    Not kopf's retries (a handler raising TemporaryError): kopf keeps the run's whole body, with its own copy of the
    spec, until the retry, about 0.3 MB for a run of the largest spec (docs/performance.md#operator-memory); this
    keeps a reference.
    """

    def __init__(self) -> None:
        self._due: dict[RunRef, tuple[float, int]] = {}

    def __len__(self) -> int:
        return len(self._due)

    def later(self, ref: RunRef, retry: int, at: float, delay: float) -> None:
        """The attempt numbered `retry` (0: the first) asked for another after `delay` seconds from `at`."""
        self._due[ref] = (at + delay, retry + 1)

    def gone(self, ref: RunRef) -> None:
        self._due.pop(ref, None)

    def take_due(self, at: float) -> list[tuple[RunRef, int]]:
        """The runs due at `at`, the longest due first, with their retry counts; no longer kept (later() again)."""
        due = sorted((when, ref, retry) for ref, (when, retry) in self._due.items() if when <= at)
        for _, ref, _ in due:
            del self._due[ref]
        return [(ref, retry) for _, ref, retry in due]

    def next_due(self) -> float | None:
        return min((when for when, _ in self._due.values()), default=None)



class RunningRuns:
    """Each Running run as the watch last saw it (its body, for the status write's resourceVersion), and when its
    chief's log is read next (progress_schedule.next_read, from its status and when it was last read). Times are UTC
    datetimes, as the status's are. In memory only: a restarted operator reads each run once, then by its epochs."""

    def __init__(self, interval: float | None = None) -> None:
        self.interval = interval or Settings().progress_interval
        self._bodies: dict[RunRef, Mapping[str, Any]] = {}
        self._first: dict[RunRef, datetime] = {}  # when its schedule was first worked out (before its first read)
        self._read: dict[RunRef, datetime] = {}  # when its last read began
        self._due: dict[RunRef, datetime] = {}  # when it is read next; absent: to be worked out from its body
        self._reading: set[RunRef] = set()  # taken by take_due, not read() yet

    def seen(
        self, ref: RunRef, body: Mapping[str, Any], keep: Callable[[Mapping[str, Any]], Mapping[str, Any]] = dict
    ) -> None:
        """keep(body) is what is stored (a copy): made only for a Running run, or one the stall watchdog is restarting
        (the poll resumes it), not on every event of every run. Its next read is worked out again from this body."""
        status = body.get("status") or {}
        if status.get("phase") == RUNNING or watchdog.restarting(status):
            self._bodies[ref] = keep(body)
            self._due.pop(ref, None)
        else:
            self.gone(ref)

    def gone(self, ref: RunRef) -> None:
        for kept in (self._bodies, self._first, self._read, self._due):
            kept.pop(ref, None)

    def bodies(self) -> list[Mapping[str, Any]]:
        return list(self._bodies.values())

    def body(self, ref: RunRef) -> Mapping[str, Any] | None:
        return self._bodies.get(ref)

    def take_due(self, now: datetime) -> list[RunRef]:
        """The runs whose read is due at `now`, the longest due first; each counts as being read until read()."""
        waiting = ((self._due_at(ref, now), ref) for ref in self._bodies if ref not in self._reading)
        taken = [ref for _, ref in sorted(due for due in waiting if due[0] <= now)]
        self._reading.update(taken)
        return taken

    def next_due(self, now: datetime) -> datetime | None:
        """The earliest read due of the runs not being read (None: no such run)."""
        return min((self._due_at(ref, now) for ref in self._bodies if ref not in self._reading), default=None)

    def read(self, ref: RunRef, began: datetime | None, status: Mapping[str, Any] | None) -> None:
        """A read taken by take_due is over: it began at `began` (None: it never did) and left the run's status as
        `status` (None: as its body says). Its next read is worked out from that status, fresher than the body until
        the watch brings the write."""
        self._reading.discard(ref)
        body = self._bodies.get(ref)
        if body is None or began is None:
            return
        self._read[ref] = began
        self._due[ref] = self._plan(ref, body, status if status is not None else body.get("status") or {}, began)

    def _due_at(self, ref: RunRef, now: datetime) -> datetime:
        if ref not in self._due:
            body = self._bodies[ref]
            self._due[ref] = self._plan(ref, body, body.get("status") or {}, now)
        return self._due[ref]

    def _plan(self, ref: RunRef, body: Mapping[str, Any], status: Mapping[str, Any], now: datetime) -> datetime:
        first = self._first.setdefault(ref, now)
        return progress_schedule.next_read(status, _watch_of(body), self._read.get(ref), first, self.interval,
                                           progress_schedule.offset(ref[2]))  # fmt: skip


def _watch_of(body: Mapping[str, Any]) -> WatchdogSpec:
    """The run's spec.watchdog; off for a spec that does not parse (its poll reads nothing either)."""
    try:
        return parse_run(body).watchdog
    except SpecError:
        return WatchdogSpec(enabled=False)

