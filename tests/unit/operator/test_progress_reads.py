"""The progress reads' shell: RunningRuns (runtime/trackers.py: which runs are due when, progress_schedule.py) and
the loop in runtime/loops.py that reads them, at most PROGRESS_READS_AT_ONCE at a time (a fake reconciler, real
sleeps of tenths of a second)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from dtr_operator import progress_schedule, watchdog
from dtr_operator.runtime import loops
from dtr_operator.runtime.trackers import RunningRuns

from support.runs import make_run

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run_body(name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body = make_run({"workers": 2}, name=name, uid=f"uid-{name}", generation=1, resourceVersion="1")
    body["status"] = status if status is not None else running_since(0)
    return body


def running_since(seconds: float, **extra: Any) -> dict[str, Any]:
    started = {"type": "Running", "status": "True", "reason": "TFJobRunning",
               "lastTransitionTime": watchdog.format_time(at(seconds))}
    return {"phase": "Running", "reason": "TFJobRunning", "conditions": [started], **extra}  # fmt: skip


def ref_of(body: dict[str, Any]) -> tuple[str, str, str]:
    meta = body["metadata"]
    return meta["namespace"], meta["name"], meta["uid"]


# ---- RunningRuns: which runs are due ------------------------------------------------------------------------------


def test_runs_seen_together_are_due_spread_over_their_first_interval_then_by_their_schedule():
    runs = RunningRuns(interval=5.0)
    bodies = [run_body(f"r{i}") for i in range(200)]
    for body in bodies:
        runs.seen(ref_of(body), body)
    firsts = {ref_of(b): 5.0 * progress_schedule.offset(ref_of(b)[2]) for b in bodies}
    assert runs.next_due(at(0)) == at(min(firsts.values())), "first seen by the loop at 0"
    taken_by_second = [len(runs.take_due(at(second))) for second in (0.999, 1.999, 2.999, 3.999, 4.999)]
    assert sum(taken_by_second) == 200 and max(taken_by_second) < 60, taken_by_second  # about 40 a second
    assert runs.take_due(at(5)) == [], "each once: they are being read"
    first = min(firsts, key=firsts.__getitem__)
    runs.read(first, at(firsts[first]), running_since(0))
    assert runs.next_due(at(5)) == at(firsts[first] + 5.0), "before the first epoch: an interval later"
    assert runs.take_due(at(firsts[first] + 5.0)) == [first]


def test_the_longest_due_is_read_first_and_a_read_run_is_due_by_its_status():
    runs = RunningRuns(interval=5.0)
    a, b = run_body("a"), run_body("b")
    runs.seen(ref_of(a), a)
    runs.seen(ref_of(b), b)
    runs.next_due(at(0))
    longest_due_first = sorted([ref_of(a), ref_of(b)], key=lambda ref: progress_schedule.offset(ref[2]))
    assert runs.take_due(at(10)) == longest_due_first
    # a's read found epoch 2 (a 60 s epoch timed): due at its expected end, not an interval later.
    status = running_since(0)
    for epoch, end in ((1, 40), (2, 100)):
        status = watchdog.with_epoch(status, epoch, watchdog.format_time(at(end)))
    runs.read(ref_of(a), at(101), status)
    runs.read(ref_of(b), at(101), running_since(99))  # just (re)started: an interval later
    assert runs.take_due(at(106)) == [ref_of(b)]
    assert runs.next_due(at(106)) == at(160 + progress_schedule.MARGIN)


def test_a_new_body_from_the_watch_is_planned_again_and_a_run_that_leaves_is_forgotten():
    runs = RunningRuns(interval=5.0)
    body = run_body("a")
    ref = ref_of(body)
    runs.seen(ref, body)
    runs.next_due(at(0))
    [taken] = runs.take_due(at(10))
    runs.read(taken, at(10), None)  # the read failed: as its body says
    assert runs.next_due(at(10)) == at(15)
    restarting = run_body("a", {**running_since(0), "watchdog": {"restarting": True}})
    runs.seen(ref, restarting)
    assert runs.next_due(at(11)) == at(15), "worked out again from the new body"
    runs.seen(ref, run_body("a", {"phase": "Succeeded"}))
    assert runs.bodies() == [] and runs.next_due(at(11)) is None
    runs.read(ref, at(12), running_since(0))
    assert runs.bodies() == [], "a read that ends after the run left does not bring it back"


def test_a_first_read_is_not_put_off_by_the_runs_own_status_writes():
    runs = RunningRuns(interval=5.0)
    body = run_body("a")
    ref = ref_of(body)
    runs.seen(ref, body)
    first = runs.next_due(at(0))
    runs.seen(ref, run_body("a", running_since(0, message="TFJob a is running")))
    assert runs.next_due(at(3)) == first


# ---- the loop: bounded, spread, each run once at a time -----------------------------------------------------------


class BeganRuns(RunningRuns):
    """RunningRuns noting when each read began, as the loop tells it: the schedule's own clock, not a thread's start
    (a thread started late under load would shorten the gap it measures)."""

    def __init__(self, interval: float) -> None:
        super().__init__(interval)
        self.began: dict[str, list[datetime]] = defaultdict(list)

    def read(self, ref: Any, began: datetime | None, status: Any) -> None:
        if began is not None:
            self.began[ref[1]].append(began)
        super().read(ref, began, status)


class FakeReconciler:
    """poll_progress takes `seconds` in its thread and notes how many reads overlap."""

    def __init__(self, interval: float, seconds: float) -> None:
        self.running = BeganRuns(interval)
        self.seconds = seconds
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.reads: dict[str, list[float]] = defaultdict(list)
        self.overlapping_same_run = False
        self._reading: set[str] = set()

    def poll_progress(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        with self.lock:
            self.overlapping_same_run |= name in self._reading
            self._reading.add(name)
            self.now += 1
            self.most = max(self.most, self.now)
            self.reads[name].append(time.monotonic())
        time.sleep(self.seconds)
        with self.lock:
            self.now -= 1
            self._reading.discard(name)
        return body["status"]


def test_the_loop_reads_each_due_run_at_most_at_once_reads_at_a_time():
    fake = FakeReconciler(interval=0.3, seconds=0.05)
    for i in range(12):
        body = run_body(f"r{i}", {"phase": "Running"})  # no start time: read every interval
        fake.running.seen(ref_of(body), body)

    async def run_for(seconds: float) -> None:
        loop = asyncio.create_task(loops._poll_running_runs(fake, at_once=3))  # type: ignore[arg-type]
        await asyncio.sleep(seconds)
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)

    asyncio.run(run_for(1.2))
    assert fake.most == 3, f"{fake.most} reads at once"
    assert not fake.overlapping_same_run
    assert all(len(fake.reads[f"r{i}"]) >= 2 for i in range(12)), {k: len(v) for k, v in fake.reads.items()}
    assert fake.running.began.keys() == fake.reads.keys()
    gaps = [(b - a).total_seconds() for times in fake.running.began.values() for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.3, "a run is read again no sooner than its interval after its last read began"


def test_the_pause_is_until_the_earliest_due_read_and_never_longer_than_the_tick():
    assert loops._pause(None, at(0), 1.0) == 1.0
    assert loops._pause(at(0.25), at(0), 1.0) == 0.25
    assert loops._pause(at(30), at(0), 1.0) == 1.0
    assert loops._pause(at(-3), at(0), 1.0) == loops.MIN_PAUSE
