"""The Reconciler: the operator's one object, a facade over the parts of this package; its entry points are what
the kopf handlers and the background loops call. Knows nothing of kopf.

- reconcile_run: a run was created or the operator restarted: make sure its PVC and TFJob exist (children.py).
- tfjob_event: its TFJob changed (or vanished): mirror that into the run's status (mirror.py).
- seen: a watch event of a run: the in-memory trackers (runtime/trackers.py), for the metrics and the checks.
- attempt_run: a run's attempt, read anew from the API; a run that waits is kept in `retrying`.
- policy_event: a NetworkPolicy the operator owns changed or went: the run's attempt holds it (guard.py).
- check_waiting_pods: a run waiting for its worker pods: say why they cannot start (waiting.py).
- poll_progress: a Running run: its chief's last finished epoch into status.progress (progress.py), then the stall
  watchdog's check (stall.py), with the same read (when each run is read: progress_schedule.py).
Each entry point is idempotent and safe to run concurrently for one run; each reads the run once (ObservedRun).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import metrics, netpolicy, watchdog
from ..kube import ApiError
from ..kube_api import KubeApi
from ..reasons import TFJOB_SUSPENDED
from ..runtime.kept import slim
from ..runtime.trackers import POD_CHECK_SECONDS, RetryingRuns, RunningRuns, RunRef, WaitingRuns
from ..status.state import tfjob_state
from .children import (
    Checks,
    Children,
    ClaimCheck,
    CodeCheck,
    ImageCheck,
    PolicyCheck,
    any_claim,
    any_code,
    any_image,
    any_request,
)
from .context import Clock, Context, Emit, ObservedRun, Retries, is_live, meta, utc_now
from .decide import controller_run, has_news, is_going
from .guard import Guard
from .mirror import CachedRun, Mirror, no_cache
from .progress import Progress
from .stall import Stall
from .waiting import WaitingPods

log = logging.getLogger(__name__)
WAITS_LOG = "run %s/%s waits (attempt %d); the next attempt in %.0f s"  # one line per attempt that ends waiting


def never_done(body: Mapping[str, Any]) -> bool:
    """An attempt_run `done` that lets every run through."""
    return False


@dataclass(eq=False)
class Reconciler:
    """The operator's clients, settings and memory; one per operator process, made at its startup.

    emit posts a Kubernetes event on a run; image_refusal and code_refusal say why a trainer image, or code sent
    with a run in a ConfigMap, is not allowed; run_refusal and claim_refusal why what a run asks of the cluster, or
    the PVC it names, is not (policy.py). The trackers are in memory only (a restarted operator rebuilds them from
    its watch of runs): the phases and figures of runs for the metrics, the runs waiting for their pods, waiting to
    be tried again and Running, for the background loops (runtime/loops.py).
    """

    kube: KubeApi
    emit: Emit
    default_image: str
    image_refusal: ImageCheck = any_image
    code_refusal: CodeCheck = any_code
    run_refusal: PolicyCheck = any_request
    claim_refusal: ClaimCheck = any_claim
    retries: Retries = field(default_factory=Retries)
    waiting: WaitingRuns = field(default_factory=lambda: WaitingRuns(after=POD_CHECK_SECONDS))
    retrying: RetryingRuns = field(default_factory=RetryingRuns)
    runs: dict[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)  # (namespace, name) -> slim(run)
    running: RunningRuns = field(default_factory=RunningRuns)
    phases: metrics.PhaseTracker = field(default_factory=metrics.PhaseTracker)
    figures: metrics.RunFigures = field(default_factory=metrics.RunFigures)
    now: Clock = utc_now
    tracking_uri: str = ""  # --mlflow-tracking-uri: the trainers' MLFLOW_TRACKING_URI (builders.trainer_env)
    ctx: Context = field(init=False)
    mirror: Mirror = field(init=False)
    progress: Progress = field(init=False)
    stall: Stall = field(init=False)
    children: Children = field(init=False)
    pods: WaitingPods = field(init=False)
    guard: Guard = field(init=False)

    def __post_init__(self) -> None:
        self.ctx = Context(self.kube, self.emit, self.default_image, self.retries, self.now, self.tracking_uri)
        self.mirror = Mirror(self.ctx)
        self.progress = Progress(self.ctx)
        self.guard = Guard(self.ctx)
        self.stall = Stall(self.ctx, self.mirror, self.guard)
        checks = Checks(self.image_refusal, self.code_refusal, self.run_refusal, self.claim_refusal)
        self.children = Children(self.ctx, self.mirror, self.progress, self.guard, checks)
        self.pods = WaitingPods(self.ctx)

    def reconcile_run(self, body: Mapping[str, Any], retry: int = 0) -> float | None:
        """Make sure the run's PVC and TFJob exist. Returns seconds until a retry is due, or None when done."""
        return self.children.reconcile_run(body, retry)

    def tfjob_event(self, event_type: str | None, tfjob: Mapping[str, Any], cached_run: CachedRun = no_cache) -> None:
        """A TFJob we watch changed (event_type None = seen in the initial listing).

        cached_run(namespace, name) is the run as the operator's watch last saw it, or None: it saves a
        GET per TFJob event. A stale copy is safe: status writes carry its resourceVersion, so the API
        refuses them and record() re-reads the run.
        """
        owner = controller_run(tfjob)
        if owner is None:
            return  # not ours (a foreign TFJob that happens to carry our label)
        if event_type != "DELETED" and not has_news(tfjob):
            return
        run = self.mirror.owner(meta(tfjob).get("namespace", ""), owner, cached_run)
        if run is None:
            return
        if event_type == "DELETED" or is_going(tfjob):
            # The children's attempt decides, from the run read anew (the watch's copy may not show a resume yet:
            # found on three nodes, where the restarted operator's copy was older than its own resume): a resuming
            # run's failed TFJob going says what it waits for (and is looked at again with the backoff), gone is made
            # again; one deleted by someone else fails the run (TFJobDeleted); an older TFJob's deletion changes
            # nothing.
            self.attempt_run((run.spec.namespace, run.spec.name, run.spec.uid or ""), 0, time.monotonic)
        else:
            self._changed(run, tfjob)

    def _changed(self, run: ObservedRun, tfjob: Mapping[str, Any]) -> None:
        """The run's TFJob changed: the stall watchdog resumes it after a restart, else its status is mirrored."""
        if watchdog.restarting(run.status) and not run.spec.suspend and tfjob_state(tfjob).reason == TFJOB_SUSPENDED:
            self.stall.resume_after_stall(run, tfjob)
        else:
            self.mirror.sync_status(run, tfjob)

    def policy_event(self, event_type: str | None, policy: Mapping[str, Any], clock: Callable[[], float]) -> None:
        """A NetworkPolicy labelled distml.dev/run changed, went, or was seen at startup (event_type None). A run's own
        (its controller, named as the run) that is gone or no longer as the operator makes it brings on the run's
        attempt (attempt_run), which holds it (children.py, guard.py) or stops the workers; one as it is, or any other,
        costs no API call."""
        owner = controller_run(policy)
        name = meta(policy).get("name")
        if owner is None or name != owner.get("name"):
            return  # not a run's own policy: other policies are looked at by guard.report
        if event_type != "DELETED" and netpolicy.intact(policy, name):
            return
        self.attempt_run((meta(policy).get("namespace") or "", name, owner.get("uid") or ""), 0, clock)

    def seen(self, event_type: str | None, body: Mapping[str, Any], at: float) -> None:
        """A watch event of a run (at: monotonic seconds): keep the trackers up to date."""
        found = meta(body)
        namespace, name, uid = found.get("namespace") or "", found.get("name") or "", found.get("uid") or ""
        ref = (namespace, name, uid)
        if event_type == "DELETED":
            self.phases.gone(uid)
            self.figures.gone(namespace, name)
            self.waiting.gone(ref)
            self.running.gone(ref)
            self.retrying.gone(ref)
            if meta(self.runs.get((namespace, name)) or {}).get("uid") == uid:
                del self.runs[(namespace, name)]
            return
        self.runs[(namespace, name)] = slim(body)
        status = body.get("status") or {}
        self.phases.seen(uid, status.get("phase"))
        self.figures.seen(namespace, name, body)
        self.waiting.seen(ref, status, at)
        self.running.seen(ref, body, keep=slim)

    def cached_run(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A CachedRun: the run as the watch last saw it (slim), or None."""
        return self.runs.get((namespace, name))

    def run_waits(self, body: Mapping[str, Any], retry: int, clock: Callable[[], float]) -> None:
        """reconcile_run(body, retry), and when it asks for another attempt, the run kept in self.retrying."""
        delay = self.reconcile_run(body, retry)
        if delay is not None:
            found = meta(body)
            namespace, name = found.get("namespace") or "", found.get("name") or ""
            log.info(WAITS_LOG, namespace, name, retry + 1, delay)
            self.retrying.later((namespace, name, found.get("uid") or ""), retry, clock(), delay)

    def attempt_run(
        self, ref: RunRef, retry: int, clock: Callable[[], float],
        done: Callable[[Mapping[str, Any]], bool] = never_done,
    ) -> None:  # fmt: skip
        """A run's attempt: kopf's create/resume/update of it, or a waiting run's next one (self.retrying). The run is
        read from the API, then reconcile_run: kopf's events carry only a slim copy (runtime/kopf_seams.py). A run gone,
        replaced or being deleted, or already `done` as read, is dropped; an API error on the read, or an unexpected
        error, is retried with the backoff."""
        namespace, name, uid = ref
        try:
            body = self.kube.get_run(namespace, name)
        except ApiError as err:
            log.warning("run %s/%s not read for its next attempt: %s", namespace, name, err)
            self.retrying.later(ref, retry, clock(), self.retries.backoff(retry))
            return
        if not is_live(body, uid) or done(body):
            return
        try:
            self.run_waits(body, retry, clock)
        except Exception:  # a bug: said, and tried again with the backoff, as kopf retried a handler that raised
            log.exception("run %s/%s: its next attempt failed", namespace, name)
            self.retrying.later(ref, retry, clock(), self.retries.backoff(retry))

    def check_waiting_pods(self, ref: RunRef) -> None:
        """A run still waiting for its worker pods (none runs yet, or not all): read them, and say so when they
        cannot start. An API error is logged: the next round tries again."""
        self.pods.check(ref)

    def poll_progress(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """A Running run: read the end of its chief's log and write the last finished epoch into status.progress.

        A GET of the chief's pod (its log is read only when it is the TFJob's own) and one of pods/log per call, and a
        status write only when an epoch has finished since the last one.
        An API error is logged (a refusal once per run and status): the next read tries again. Returns the status as
        the read left it, for the next read's schedule (None when the spec does not parse).
        """
        run = self.ctx.parsed(body)
        if run is None:
            return None
        if watchdog.restarting(run.status):
            self.stall.resume_polled(run)
            return run.status
        status = run.status
        try:
            status = self.progress.read_progress(run)
        except ApiError as err:
            self.progress.not_read(run.spec, err)
        try:
            self.stall.watch(run, status)
        except ApiError as err:
            log.warning("stall check of run %s/%s not done: %s", run.spec.namespace, run.spec.name, err)
        try:  # at least once a minute, at most one list of a namespace's policies per guard.OTHERS_SECONDS
            self.guard.report(run)
        except ApiError as err:
            log.warning("other NetworkPolicies of run %s/%s not reported: %s", run.spec.namespace, run.spec.name, err)
        return status
