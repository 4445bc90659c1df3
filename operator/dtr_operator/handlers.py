"""kopf handlers: thin glue between kopf and reconcile.py. Importing this module registers them.

- startup: operator settings, the API client, kopf tuning, and the one `reconcile.Reconciler` (in
  kopf's memo, which every handler gets a shallow copy of) with what the operator keeps in memory.
- create/resume of a DistTrainingRun, or its spec.suspend changed: ensure its PVC and TFJob, the TFJob
  suspended as the spec says, from the run read anew (kopf's events of runs and TFJobs are slim: watch_slim.py).
  A run that waits is retried with backoff by a background task, not by kopf (which would keep its whole body
  until then: docs/performance.md#operator-memory).
- events of TFJobs labelled distml.dev/run: mirror their status into the owning run, read from the
  runs the reconciler keeps from the watch of runs (no GET per event).
- a background check of runs waiting for their worker pods: say why when the pods cannot start.
- a background retry of runs that wait (reconcile.RetryingRuns), each when its backoff is over; and malloc.trim.
- a background poll of running runs: the chief's last finished epoch into status.progress.
- events of DistTrainingRuns: keep the runs-by-phase metric and the runs the two background tasks look at.
No finalizers, no delete handler: children go with the run by owner references (garbage collector).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import kopf

from . import malloc, metrics, watch_slim
from .api import GROUP, PLURAL, RUN_LABEL, TFJOB_GROUP, TFJOB_PLURAL, TFJOB_VERSION, VERSION
from .kube import Kube, NoCredentials
from .reconcile import Reconciler, RunningRuns, RunRef, never_done
from .settings import Settings, from_env
from .status import MAX_REASON, MAX_STATE_MESSAGE, clean_text

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
# kopf's workers at once per kind of object, and how long an idle one stays (_tune).
WORKER_LIMIT = 64
WORKER_IDLE_SECONDS = 0.5
RETRY_TICK = 1.0  # seconds: the retry loop looks for runs that started waiting at least this often
MIN_PAUSE = 0.01  # seconds: a due read found a hair early is not a busy loop


def emit(body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
    """A Kubernetes event on the run (kopf posts it in the background; failures are only logged). Its text is
    cleaned as the status's is: it may quote what a tenant wrote."""
    kopf.event(dict(body), type=event_type, reason=clean_text(reason, MAX_REASON),
               message=clean_text(message, MAX_STATE_MESSAGE))  # fmt: skip


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod: the service account; elsewhere: KUBECONFIG as it is now (not when a library was imported)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    malloc.limit_arenas()  # before kopf's thread pool exists: its threads share the arenas
    watch_slim.install()  # before kopf's watches start, which is after the startup handlers
    memo.background = Background()
    if getattr(memo, "settings", None) is None:  # started by `kopf run` / KopfRunner, not `dtr operator`
        memo.settings = from_env(os.environ)
    ours: Settings = memo.settings
    try:
        kube = Kube.from_environment()
    except NoCredentials as err:
        raise kopf.PermanentError(str(err)) from None
    memo.reconciler = Reconciler(kube, emit, ours.trainer_image, image_refusal=ours.image_refusal,
                                 code_refusal=ours.code_refusal, run_refusal=ours.run_refusal,
                                 claim_refusal=ours.claim_refusal,
                                 running=RunningRuns(ours.progress_interval))  # fmt: skip
    _tune(settings)
    logger.info("dtr-operator: default trainer image %s", ours.trainer_image)


def _tune(settings: kopf.OperatorSettings) -> None:
    settings.posting.reporting_component = "dtr-operator"
    settings.posting.reporting_instance = os.environ.get("HOSTNAME", "local")
    # Our own events go out through kopf.event; handler log lines stay in the log.
    settings.posting.loggers = False
    # Server-side watch timeouts: a silently dead connection is noticed and re-established.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    # The initial listing in pages: at most this many runs' bodies are parsed at once when the operator
    # (re)starts (docs/performance.md#operator-memory).
    settings.watching.chunk_size = 100
    # Sync handlers run in this many threads; each waits on API calls, not CPU. As many as the API
    # client's connection pool (kube.py), so no connection is opened just to be discarded.
    settings.execution.max_workers = 16
    # At most this many objects of a kind in kopf's hands at once (docs/performance.md#operator-memory): each costs
    # its body and kopf's copies of it while its handlers wait for a thread, about 80 KB for an ordinary run and
    # several hundred for the largest, and without a limit a burst of 1000 runs had 1100 at once. The others wait
    # as the watch delivered them. An idle object's worker leaves its place sooner than kopf's 5 s, or the limit
    # would cap the rate at WORKER_LIMIT / 5 s; it still stays until kopf has seen its own patch (consistency).
    settings.queueing.worker_limit = WORKER_LIMIT
    settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
    settings.persistence.diffbase_storage = DIFF_BASE


# The fields of a run whose changes kopf tells apart (ensure_children's on.update): the whole essence it keeps.
DIFF_FIELDS: tuple[tuple[str, ...], ...] = (("spec", "suspend"),)


def essence(body: Mapping[str, Any], fields: Iterable[tuple[str, ...] | str] = ()) -> dict[str, Any]:
    """What kopf compares between events and stores as last handled: DIFF_FIELDS and any field a handler names
    (`fields`: kopf's extra fields), those present, nothing else. Pure."""
    kept: dict[str, Any] = {}
    for path in {*DIFF_FIELDS, *(tuple(f.split(".")) if isinstance(f, str) else tuple(f) for f in fields)}:
        value: Any = body
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is not None:
            target = kept
            for key in path[:-1]:
                target = target.setdefault(key, {})
            target[path[-1]] = value
    return kept


class SuspendDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff base (the annotation kopf.zalando.org/last-handled-configuration) of DIFF_FIELDS alone, not of the
    whole spec, labels and annotations: kopf built it with a deep copy of every event's body and stored the spec
    again in the run (about 67 KB for the largest, then in every later event of it), to detect changes that only
    spec.suspend's handler acts on. What an operator before this one stored (the whole spec) is read as its
    DIFF_FIELDS too, so after an upgrade a run is resumed as before, not taken for an update."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> Any:
        return essence(body, extra_fields or ())

    def fetch(self, *, body: kopf.Body) -> Any:
        stored = super().fetch(body=body)
        return None if stored is None else essence(stored)


DIFF_BASE = SuspendDiffBase()


def handled_before(run: Mapping[str, Any]) -> bool:
    """Whether kopf has stored the run as handled: a create event of such a run is a stale one (kopf processed it
    after its consistency wait ran out, or after the run's worker left), and the first create did the work."""
    return DIFF_BASE.fetch(body=kopf.Body(dict(run))) is not None


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec.suspend")
def ensure_children(body: kopf.Body, memo: kopf.Memo, retry: int, reason: kopf.Reason, **_: Any) -> None:
    # The body is watch_slim's copy: the run is read from the API. A run that waits is done for kopf:
    # memo.reconciler.retrying keeps it, and the background retries it.
    meta = body.metadata
    ref = (meta.namespace or "", meta.name or "", meta.uid or "")
    done = handled_before if reason == kopf.Reason.CREATE else never_done
    with metrics.RECONCILE_SECONDS.labels(handler="run").time():
        memo.reconciler.attempt_run(ref, retry, time.monotonic, done)


@kopf.on.event(TFJOB_GROUP, TFJOB_VERSION, TFJOB_PLURAL, labels={RUN_LABEL: kopf.PRESENT})
def tfjob_changed(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    with metrics.RECONCILE_SECONDS.labels(handler="tfjob").time():
        memo.reconciler.tfjob_event(type, dict(body), cached_run=memo.reconciler.cached_run)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def run_seen(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # async: bookkeeping in memory, not worth a thread. As a sync handler it queued behind slow
    # ensure_children calls in the thread pool, holding up this run's own event processing until
    # kopf's consistency wait (5 s) ran out and a stale event ran the create handler a second time.
    # It also keeps the runs the TFJob handler reads owners from (reconciler.runs, slim): not a kopf.index, whose
    # readiness wait at startup would deadlock under settings.queueing.worker_limit (_tune).
    memo.reconciler.seen(type, body, time.monotonic())
    memo.background.keep_running(memo.reconciler, memo.settings.progress_interval)


@kopf.on.cleanup()
async def stop_background(memo: kopf.Memo, **_: Any) -> None:
    memo.background.cancel()


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
