"""kopf handlers: registration only, each a few lines handing over to the Reconciler. Importing this module registers
them. Where the operator stands in for kopf (its watch, diff base, retries, timers, index): runtime/.

- startup: operator settings, the API client, kopf tuning, and the one `Reconciler` (in kopf's memo, which every
  handler gets a shallow copy of) with what the operator keeps in memory.
- create/resume of a DistTrainingRun, or its spec.suspend changed: ensure its PVC and TFJob, the TFJob
  suspended as the spec says, from the run read anew (kopf's events of runs and TFJobs are slim: runtime/kopf_seams.py).
  A run that waits is retried with backoff by a background task, not by kopf (which would keep its whole body
  until then: docs/performance.md#operator-memory).
- events of TFJobs labelled distml.dev/run: mirror their status into the owning run, read from the
  runs the reconciler keeps from the watch of runs (no GET per event).
- events of NetworkPolicies labelled distml.dev/run: a run's own, deleted or changed, is made again as the operator
  makes it, or the run's workers stop (reconcile/guard.py).
- a background check of runs waiting for their worker pods: say why when the pods cannot start.
- a background retry of runs that wait (runtime.trackers.RetryingRuns), each when its backoff is over; and
  malloc.trim (runtime/loops.py).
- a background poll of running runs: the chief's last finished epoch into status.progress.
- events of DistTrainingRuns: keep the runs-by-phase metric and the runs the two background tasks look at.
- create/resume of a DistTrainingSweep, and events of its trials (runs labelled distml.dev/sweep): the sweep's turn
  (reconcile/sweeps.py).
No finalizers, no delete handler: children go with the run by owner references (garbage collector).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import kopf

from . import malloc, metrics
from .api import (
    GROUP,
    NETWORK_POLICY_GROUP,
    NETWORK_POLICY_PLURAL,
    PLURAL,
    RUN_LABEL,
    SWEEP_LABEL,
    SWEEP_PLURAL,
    TFJOB_GROUP,
    TFJOB_PLURAL,
    TFJOB_VERSION,
    VERSION,
)
from .kube import Kube, NoCredentials
from .reconcile.reconciler import Reconciler, never_done
from .reconcile.sweeps import Sweeper
from .runtime.kopf_seams import DIFF_BASE, handled_before, install_slim_watch
from .runtime.loops import Background
from .runtime.trackers import RunningRuns
from .settings import Settings, from_env
from .status.state import MAX_REASON, MAX_STATE_MESSAGE, clean_text

# kopf's workers at once per kind of object, and how long an idle one stays (_tune).
WORKER_LIMIT = 64
# Runs per page of the initial listing: a page of the largest runs admission allows is 2 MB of JSON at 10, 20 MB at 100
# (bench/operator/memory-metadata.json), which then stood out above everything else the operator holds.
LIST_PAGE = 10
WORKER_IDLE_SECONDS = 0.5


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
    install_slim_watch()  # before kopf's watches start, which is after the startup handlers
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
                                 running=RunningRuns(ours.progress_interval),
                                 tracking_uri=ours.mlflow_tracking_uri)  # fmt: skip
    memo.sweeper = Sweeper(memo.reconciler.ctx)
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
    settings.watching.chunk_size = LIST_PAGE
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
    # The NetworkPolicies the operator holds carry the run label: the API server sends only those, so kopf keeps
    # (and the operator looks at) none of the namespace's other policies, however many (the handler's `labels`
    # filter alone acts after kopf has taken each event in).
    settings.watching.label_selectors[NETWORK_POLICY_GROUP, NETWORK_POLICY_PLURAL] = RUN_LABEL



@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec.suspend")
def ensure_children(body: kopf.Body, memo: kopf.Memo, retry: int, reason: kopf.Reason, **_: Any) -> None:
    # The body is a slim copy (runtime/kopf_seams.py): the run is read from the API. A run that waits is done for kopf:
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


@kopf.on.event(NETWORK_POLICY_GROUP, "v1", NETWORK_POLICY_PLURAL, labels={RUN_LABEL: kopf.PRESENT})
def policy_changed(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # Only policies labelled as a run's reach kopf (_tune: a server-side selector); one as the operator made it costs
    # no call, one changed or gone brings on its run's attempt (reconcile/guard.py).
    with metrics.RECONCILE_SECONDS.labels(handler="networkpolicy").time():
        memo.reconciler.policy_event(type, dict(body), time.monotonic)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def run_seen(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # async: bookkeeping in memory, not worth a thread. As a sync handler it queued behind slow
    # ensure_children calls in the thread pool, holding up this run's own event processing until
    # kopf's consistency wait (5 s) ran out and a stale event ran the create handler a second time.
    # It also keeps the runs the TFJob handler reads owners from (reconciler.runs, slim): not a kopf.index, whose
    # readiness wait at startup would deadlock under settings.queueing.worker_limit (_tune).
    memo.reconciler.seen(type, body, time.monotonic())
    memo.background.keep_running(memo.reconciler, memo.settings.progress_interval)


@kopf.on.resume(GROUP, VERSION, SWEEP_PLURAL)
@kopf.on.create(GROUP, VERSION, SWEEP_PLURAL)
def sweep_started(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # Its state is its status (reconcile/sweeps.py): a resume after a restart takes a turn as a create does.
    with metrics.RECONCILE_SECONDS.labels(handler="sweep").time():
        memo.sweeper.turn(body.metadata.namespace or "", body.metadata.name or "")


@kopf.on.event(GROUP, VERSION, PLURAL, labels={SWEEP_LABEL: kopf.PRESENT})
def trial_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # A trial's event (the slim run keeps only this label: kopf_seams.run_metadata) is its sweep's turn.
    with metrics.RECONCILE_SECONDS.labels(handler="sweep").time():
        memo.sweeper.turn(body.metadata.namespace or "", body.metadata.labels.get(SWEEP_LABEL, ""))


@kopf.on.cleanup()
async def stop_background(memo: kopf.Memo, **_: Any) -> None:
    memo.background.cancel()
