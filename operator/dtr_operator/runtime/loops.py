"""The operator's own background loops, in place of kopf's timers and retries (why: runtime/__init__.py): the pods
of runs waiting for them, the runs waiting to be tried again, the progress of running runs, and malloc's free memory
back to the system. Each acts on the trackers (trackers.py) through the Reconciler."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from .. import malloc, metrics
from ..reconcile.reconciler import Reconciler
from .trackers import RunRef

_log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")
# Chief-log reads in flight at once (docs/operator.md#how-it-reconciles): a quarter of the API client's connection
# pool (kube.py), so that the handlers always find a connection. A read took 6 ms in bench/operator (no kubelet
# there: the API server answers itself); even at 50 ms through a kubelet, 4 at a time make 80 reads a second, twice
# what 1000 running runs past their first epochs ask for (docs/performance.md#progress-reads).
PROGRESS_READS_AT_ONCE = 4
# The progress loop looks for runs just seen Running at least this often (seconds; the interval when shorter).
PROGRESS_TICK = 1.0
RETRY_TICK = 1.0  # seconds: the retry loop looks for runs that started waiting at least this often
MIN_PAUSE = 0.01  # seconds: a due read found a hair early is not a busy loop


class Background:
    """The background tasks: the pods of runs waiting for them, the runs waiting to be retried, the progress of
    running runs, and malloc's free memory back to the system."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    def keep_running(self, reconciler: Reconciler, progress_interval: float) -> None:
        """Start them, or start them again when one has ended."""
        if self._tasks and not any(task.done() for task in self._tasks):
            return
        # Started here, not at startup: a task inherits the context it is created in, and only a
        # handler's context lets kopf.event post (a startup task's events raise LookupError).
        self.cancel()
        self._tasks.append(asyncio.create_task(_check_waiting_runs(reconciler)))
        self._tasks.append(asyncio.create_task(_retry_waiting_runs(reconciler)))
        self._tasks.append(asyncio.create_task(_trim_memory()))
        if progress_interval:
            self._tasks.append(asyncio.create_task(_poll_running_runs(reconciler)))

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()


async def _check_waiting_runs(reconciler: Reconciler) -> None:
    """Every reconciler.waiting.after seconds, the pods of each run that has waited that long for them."""
    while True:
        await asyncio.sleep(reconciler.waiting.after)
        for ref in reconciler.waiting.due(time.monotonic()):
            await _in_thread("pods", reconciler.check_waiting_pods, ref, f"pods of run {ref[0]}/{ref[1]} not checked")


async def _trim_memory(every: float = malloc.TRIM_SECONDS) -> None:
    """malloc's free memory back to the system now and then (malloc.py)."""
    while True:
        await asyncio.sleep(every)
        malloc.trim()


async def _retry_waiting_runs(reconciler: Reconciler, tick: float = RETRY_TICK) -> None:
    """Each waiting run when its backoff is over (reconcile.RetryingRuns), one at a time, the longest due first;
    wakes at the earliest due, at least every `tick` (runs that started waiting meanwhile)."""
    retrying = reconciler.retrying
    while True:
        for ref, retry in retrying.take_due(time.monotonic()):
            await _in_thread("run", lambda due: reconciler.attempt_run(*due, time.monotonic), (ref, retry),
                             f"run {ref[0]}/{ref[1]} not retried")  # fmt: skip
        due = retrying.next_due()
        await asyncio.sleep(tick if due is None else min(max(due - time.monotonic(), MIN_PAUSE), tick))


async def _poll_running_runs(reconciler: Reconciler, at_once: int = PROGRESS_READS_AT_ONCE,
                             clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:  # fmt: skip
    """Each running run's chief log when its read is due (progress_schedule.py), at most `at_once` reads at a time,
    the longest due first. Wakes at the earliest due read, and at least every PROGRESS_TICK (runs just seen)."""
    running = reconciler.running
    slots = asyncio.Semaphore(at_once)
    reads: set[asyncio.Task[None]] = set()  # referenced until done: the event loop keeps only weak references
    try:
        while True:
            for ref in running.take_due(clock()):
                task = asyncio.create_task(_read_progress(reconciler, ref, slots, clock))
                reads.add(task)
                task.add_done_callback(reads.discard)
            await asyncio.sleep(_pause(running.next_due(clock()), clock(), min(PROGRESS_TICK, running.interval)))
    finally:
        for task in reads:
            task.cancel()


def _pause(due: datetime | None, now: datetime, tick: float) -> float:
    """Seconds until the earliest due read, at most `tick`: a run seen meanwhile is due within its first interval,
    and a read that ends meanwhile is due again an interval after it began, so no later than the tick."""
    if due is None:
        return tick
    return min(max((due - now).total_seconds(), MIN_PAUSE), tick)


async def _read_progress(reconciler: Reconciler, ref: RunRef, slots: asyncio.Semaphore,
                         clock: Callable[[], datetime]) -> None:  # fmt: skip
    """One run's read once a slot is free, from its body as the watch last saw it (a read that waited for its slot
    writes with the newest resourceVersion); its end tells the schedule, whatever happened."""
    began: datetime | None = None
    status: Mapping[str, Any] | None = None
    try:
        async with slots:
            body = reconciler.running.body(ref)
            if body is None:
                return  # no longer Running
            began = clock()
            failed = f"progress of run {ref[0]}/{ref[1]} not read"
            status = await _in_thread("progress", reconciler.poll_progress, body, failed)
    finally:
        reconciler.running.read(ref, began, status)


async def _in_thread(handler: str, call: Callable[[T], R], arg: T, failed: str) -> R | None:
    """call(arg) in a worker thread, timed in the handler's metric. API errors are the call's to handle; any
    other exception is a bug: said, and the loop goes on with the other runs (None)."""
    with metrics.RECONCILE_SECONDS.labels(handler=handler).time():
        try:
            return await asyncio.to_thread(call, arg)
        except Exception:
            _log.exception("%s", failed)
            return None
