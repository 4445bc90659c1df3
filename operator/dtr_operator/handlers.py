"""kopf handlers: thin glue between kopf and reconcile.py. Importing this module registers them.

- startup: operator settings, the API client, kopf tuning.
- create/resume of a DistTrainingRun, or its spec.suspend changed: ensure its PVC and TFJob, the TFJob
  suspended as the spec says (retries with backoff while waiting).
- events of TFJobs labelled distml.dev/run: mirror their status into the owning run, read from an
  index of runs that kopf keeps from its watch (no GET per event).
- a background check of runs waiting for their worker pods: say why when the pods cannot start.
- a background poll of running runs: the chief's last finished epoch into status.progress.
- events of DistTrainingRuns: keep the runs-by-phase metric.
No finalizers, no delete handler: children go with the run by owner references (garbage collector).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from . import metrics, reconcile
from .builders import RUN_LABEL, TFJOB_GROUP, TFJOB_PLURAL, TFJOB_VERSION
from .kube import ApiError, Kube, NoCredentials
from .settings import Settings, from_env
from .spec import GROUP, PLURAL, VERSION

_log = logging.getLogger(__name__)
_phases = metrics.PhaseTracker()
_figures = metrics.RunFigures()
# Pods normally start within seconds: a run still waiting after this long has its pods looked at,
# and again every this long.
POD_CHECK_SECONDS = 20.0
_waiting = reconcile.WaitingRuns(after=POD_CHECK_SECONDS)
_running = reconcile.RunningRuns()
_progress_refusals: set[tuple[str | None, str | None, int]] = set()  # said once each
_background: list[asyncio.Task[None]] = []
RunKey = tuple[str, str]  # (namespace, name)
RunBody = dict[str, Any]


def emit(body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
    """A Kubernetes event on the run (kopf posts it in the background; failures are only logged)."""
    kopf.event(dict(body), type=event_type, reason=reason, message=message)


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod: the service account; elsewhere: KUBECONFIG as it is now (not when a library was imported)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: Any, **_: Any) -> None:
    if getattr(memo, "settings", None) is None:  # started by `kopf run` / KopfRunner, not `dtr operator`
        memo.settings = from_env(os.environ)
    ours: Settings = memo.settings
    try:
        memo.kube = Kube.from_environment()
    except NoCredentials as err:
        raise kopf.PermanentError(str(err)) from None
    settings.posting.reporting_component = "dtr-operator"
    settings.posting.reporting_instance = os.environ.get("HOSTNAME", "local")
    # Our own events go out through kopf.event; handler log lines stay in the log.
    settings.posting.loggers = False
    # Server-side watch timeouts: a silently dead connection is noticed and re-established.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    # Sync handlers run in this many threads; each waits on API calls, not CPU. As many as the API
    # client's connection pool (kube.py), so no connection is opened just to be discarded.
    settings.execution.max_workers = 16
    logger.info("dtr-operator: default trainer image %s", ours.trainer_image)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec.suspend")
def ensure_children(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
    started = time.perf_counter()
    try:
        ours: Settings = memo.settings
        delay = reconcile.reconcile_run(
            memo.kube, dict(body), ours.trainer_image, emit, retry, image_refusal=ours.image_refusal
        )
    finally:
        metrics.RECONCILE_SECONDS.labels(handler="run").observe(time.perf_counter() - started)
    if delay is not None:
        # The reason is already in the run's status; kopf just calls us again after `delay`.
        raise kopf.TemporaryError(f"waiting; next attempt in {delay:.0f}s", delay=delay)


@kopf.index(GROUP, VERSION, PLURAL)
async def runs_by_name(namespace: str | None, name: str | None, body: kopf.Body, **_: Any) -> dict[RunKey, RunBody]:
    """Every run as the watch last saw it: the TFJob handler reads owners here, not with a GET per event.

    async for the reason run_seen is: as a sync handler it waited in the thread pool behind slow
    ensure_children calls, and kopf then handled stale events as new creations (66 of 200 runs of a
    burst ran their create handler twice).
    """
    return {(namespace or "", name or ""): _slim(body)}


def _slim(body: Mapping[str, Any]) -> RunBody:
    """A copy of the run to keep in memory, without managedFields (the bulk of its size, never read)."""
    copied = copy.deepcopy(dict(body))
    copied.get("metadata", {}).pop("managedFields", None)
    return copied


def _cached(index: kopf.Index[RunKey, RunBody]) -> Callable[[str, str], RunBody | None]:
    def lookup(namespace: str, name: str) -> RunBody | None:
        return next(iter(index.get((namespace, name), ())), None)

    return lookup


@kopf.on.event(TFJOB_GROUP, TFJOB_VERSION, TFJOB_PLURAL, labels={RUN_LABEL: kopf.PRESENT})
def tfjob_changed(
    type: str | None, body: kopf.Body, memo: kopf.Memo, runs_by_name: kopf.Index[RunKey, RunBody], **_: Any
) -> None:
    started = time.perf_counter()
    try:
        reconcile.tfjob_event(
            memo.kube, type, dict(body), memo.settings.trainer_image, emit, cached_run=_cached(runs_by_name)
        )
    finally:
        metrics.RECONCILE_SECONDS.labels(handler="tfjob").observe(time.perf_counter() - started)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def run_seen(
    type: str | None, body: kopf.Body, uid: str, namespace: str | None, name: str | None, memo: kopf.Memo, **_: Any
) -> None:
    # async: bookkeeping in memory, not worth a thread. As a sync handler it queued behind slow
    # ensure_children calls in the thread pool, holding up this run's own event processing until
    # kopf's consistency wait (5 s) ran out and a stale event ran the create handler a second time.
    ref = (namespace or "", name or "", uid)
    if type == "DELETED":
        _phases.gone(uid)
        _figures.gone(ref[0], ref[1])
        _waiting.gone(ref)
        _running.gone(ref)
    else:
        status = body.get("status") or {}
        _phases.seen(uid, status.get("phase"))
        _figures.seen(ref[0], ref[1], body)
        _waiting.seen(ref, status, time.monotonic())
        _running.seen(ref, body, keep=_slim)
    if not _background or any(task.done() for task in _background):
        # Started here, not at startup: a task inherits the context it is created in, and only a
        # handler's context lets kopf.event post (a startup task's events raise LookupError).
        _cancel_background()
        _background.append(asyncio.create_task(_check_waiting_runs(memo)))
        if memo.settings.progress_interval:
            _background.append(asyncio.create_task(_poll_running_runs(memo, memo.settings.progress_interval)))


def _cancel_background() -> None:
    for task in _background:
        task.cancel()
    _background.clear()


@kopf.on.cleanup()
async def stop_background(**_: Any) -> None:
    _cancel_background()


async def _check_waiting_runs(memo: kopf.Memo) -> None:
    """Every POD_CHECK_SECONDS, the pods of each run that has waited that long for them."""
    while True:
        await asyncio.sleep(POD_CHECK_SECONDS)
        for ref in _waiting.due(time.monotonic()):
            started = time.perf_counter()
            try:
                await asyncio.to_thread(reconcile.check_waiting_pods, memo.kube, ref, memo.settings.trainer_image, emit)
            except ApiError as err:  # the next round tries again
                _log.warning("pods of run %s/%s not checked: %s", ref[0], ref[1], err)
            except Exception:  # a bug: say so, and keep checking the other runs
                _log.exception("pods of run %s/%s not checked", ref[0], ref[1])
            finally:
                metrics.RECONCILE_SECONDS.labels(handler="pods").observe(time.perf_counter() - started)


async def _poll_running_runs(memo: kopf.Memo, interval: float) -> None:
    """Every `interval` seconds, the end of each running run's chief log (one GET each, one after another,
    so the API sees at most one of these requests at a time)."""
    while True:
        await asyncio.sleep(interval)
        for body in _running.bodies():
            meta = body.get("metadata") or {}
            started = time.perf_counter()
            try:
                await asyncio.to_thread(reconcile.poll_progress, memo.kube, body, memo.settings.trainer_image, emit)
            except ApiError as err:  # the next round tries again; a refusal (403: no pods/log) is said once
                key = (meta.get("namespace"), meta.get("name"), err.status)
                if err.status in (401, 403) and key not in _progress_refusals:
                    _progress_refusals.add(key)
                    _log.warning("progress of run %s/%s cannot be read: %s (the operator's RBAC needs get on "
                                 "pods/log)", key[0], key[1], err)  # fmt: skip
                else:
                    _log.debug("progress of run %s/%s not read: %s", key[0], key[1], err)
            except Exception:  # a bug: say so, and keep polling the other runs
                _log.exception("progress of run %s/%s not read", meta.get("namespace"), meta.get("name"))
            finally:
                metrics.RECONCILE_SECONDS.labels(handler="progress").observe(time.perf_counter() - started)
