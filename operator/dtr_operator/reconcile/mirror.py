"""Mirroring a run's TFJob into the run's status: the status from the TFJob (and, once it has finished, its pods,
for the chief's summary and the failed workers), and the pods a failed run still holds released."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import disruption, watchdog
from ..api import RELEASE_RUNNING_PODS
from ..builders import logs_dir, worker_pod_name
from ..kube import ApiError
from ..reasons import FAILED, TERMINAL, WORKER_PODS_RELEASED
from ..spec import RunSpec
from ..status.compute import tfjob_status
from ..status.pods import assigned_worker, gone_worker, own_pods
from ..status.state import MAX_STATE_MESSAGE, clean_text, is_terminal, tfjob_state
from . import writes
from .context import Context, ObservedRun, is_live, meta
from .decide import pods_to_release

log = logging.getLogger(__name__)

CachedRun = Callable[[str, str], "Mapping[str, Any] | None"]  # (namespace, name) -> the run as last watched


def no_cache(namespace: str, name: str) -> Mapping[str, Any] | None:
    """A CachedRun that has seen nothing: the run is read from the API."""
    return None


@dataclass(eq=False)
class Mirror:
    """TFJob -> run status."""

    ctx: Context

    def sync_status(
        self, run: ObservedRun, tfjob: Mapping[str, Any], quiet: bool = False, code: Mapping[str, str] | None = None
    ) -> None:
        """Mirror the TFJob into the run's status, with status.code when given (later writes leave it: they are
        merge patches without it); on a finished TFJob read its pods once, for the summary, then have the
        training-operator delete a failed run's pods that still run. quiet: no events."""
        spec = run.spec
        pods: list[Mapping[str, Any]] = []
        gone: list[dict[str, Any]] = []
        latest = [tfjob]

        def read_pods_when_finished() -> None:
            # Once, for the summary: a finished run's status is never written again. Found by the training-operator's
            # label, read only when they are the TFJob's own (own_pods: anyone who may create pods can label one).
            if not pods and (phase := tfjob_state(latest[0]).phase) in TERMINAL:
                pods.extend(own_pods(spec, latest[0], self.ctx.kube.list_job_pods(spec.namespace, spec.tfjob_name)))
                if phase == FAILED:
                    gone.extend(self._gone_workers(spec, pods))

        read_pods_when_finished()
        at = self.ctx.now()
        if self._resumed(run, latest[0], pods, gone, at, quiet):
            return
        recorded = {"code": dict(code)} if code else {}
        resuming: list[bool] = []

        def mirrored(prev: Mapping[str, Any]) -> dict[str, Any]:
            if (uid := meta(latest[0]).get("uid")) and disruption.resuming_from(prev) == uid:  # resumed meanwhile
                resuming.append(True)
                return dict(prev)
            status = tfjob_status(spec, latest[0], pods, prev, at, gone)
            if status["phase"] == FAILED and (why := disruption.not_resumed(spec, prev, pods, gone)):
                status["message"] = clean_text(f"{status['message']} ({why})", MAX_STATE_MESSAGE)
            return watchdog.settled({**status, **recorded}, at, spec.generation)

        def reread() -> None:
            # A creator's copy is the TFJob as created; the training-operator's Created may already be
            # in the run's status (the TFJob handler wrote it), and writing this copy would take it back.
            # The TFJob read now may have finished since: then its pods hold the chief's metrics.
            latest[0] = self.ctx.kube.get_tfjob(spec.namespace, spec.tfjob_name) or latest[0]
            read_pods_when_finished()

        self.ctx.record(run.body, mirrored, quiet, reread)
        if not resuming and (holding := pods_to_release(latest[0], pods)):
            self._release(run, holding, quiet)

    def _resumed(self, run: ObservedRun, tfjob: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
                 gone: Sequence[Mapping[str, Any]], at: str, quiet: bool) -> bool:  # fmt: skip
        """Whether the failed TFJob is one the run resumes from (disruption.py): then the status says so, and the
        TFJob is deleted (its pods first: children.py creates it again once it is gone). A TFJob being deleted
        already is left to go: a writer that read the run before another resumed it must not fail it (found on three
        nodes: two TFJob events, one resumed and deleted the TFJob, the other then mirrored the failure)."""
        if tfjob_state(tfjob).phase != FAILED:
            return False
        uid = meta(tfjob).get("uid")
        if disruption.resuming_from(run.status) == uid:
            if not meta(tfjob).get("deletionTimestamp"):  # the status was written, the delete was not
                self.ctx.kube.delete_tfjob(run.spec.namespace, run.spec.tfjob_name, uid)
            return True
        plan = disruption.resume(run.spec, run.status, tfjob, pods, gone, at)
        if plan is None:
            return False
        if meta(tfjob).get("deletionTimestamp"):  # deleted by a concurrent resume (or by someone: then TFJobDeleted)
            return True

        def resuming(prev: Mapping[str, Any]) -> dict[str, Any]:
            if disruption.resuming_from(prev) == plan.uid:  # another writer decided it meanwhile
                return dict(prev)
            return disruption.resuming_status(run.spec, plan, prev, at)

        self.ctx.record(run.body, resuming, quiet)
        self.ctx.kube.delete_tfjob(run.spec.namespace, run.spec.tfjob_name, plan.uid)
        return True

    def _release(self, run: ObservedRun, holding: list[str], quiet: bool) -> None:
        spec = run.spec
        try:
            writes.release_running_pods(self.ctx.kube, spec)
        except ApiError as err:  # said once; the pods stay as they would have before
            log.warning("could not release the pods of failed run %s/%s: %s", spec.namespace, spec.name, err)
            return
        if not quiet:
            self.ctx.emit(run.body, "Normal", WORKER_PODS_RELEASED,
                      f"the run failed: its pods still running ({', '.join(holding)}) are deleted (TFJob "
                      f"cleanPodPolicy {RELEASE_RUNNING_PODS}); each worker's log stays on the run's volume, "
                      f"{logs_dir(spec)}/")  # fmt: skip

    def owner(self, namespace: str, owner: Mapping[str, Any], cached_run: CachedRun) -> ObservedRun | None:
        """The run an ownerReference names, if it is still there, not being deleted and not finished."""
        body = cached_run(namespace, owner["name"])
        if body is None or meta(body).get("uid") != owner.get("uid"):
            body = self.ctx.kube.get_run(namespace, owner["name"])  # not seen yet, or a newer run of that name
        if not is_live(body, owner.get("uid")):
            return None  # the run is gone or going: its children are being garbage-collected
        if is_terminal(body.get("status")):
            return None
        return self.ctx.parsed(body)

    def _gone_workers(self, spec: RunSpec, pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The failed run's worker pods already deleted, as their events remember them (status.gone_worker). An
        API error leaves them out: the failure is still told, without them."""
        present = {meta(p).get("name") for p in pods}
        gone = []
        for name in (worker_pod_name(spec, i) for i in range(spec.workers)):
            if name in present:
                continue
            try:
                events = self.ctx.kube.object_events(spec.namespace, "Pod", name)
            except ApiError as err:
                log.warning("events of pod %s/%s not read: %s", spec.namespace, name, err)
                continue
            if (pod := gone_worker(name, events) or assigned_worker(name, events)) is not None:
                gone.append(pod)
        return gone
