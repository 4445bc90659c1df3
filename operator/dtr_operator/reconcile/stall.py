"""The stall watchdog's actions (its decisions are watchdog.py's, pure): flag a stalled run, restart its workers by
suspending and resuming its TFJob, or fail it; clear the flag once epochs end again."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dtr_contract.progress import SILENT_SECONDS

from .. import watchdog
from ..api import CONTAINER_NAME
from ..builders import worker_pod_name
from ..kube import ApiError
from ..reasons import FAILED, STALL_ENDED, STALL_RESTART, STALLED, STALLED_CONDITION, STALLED_EVENT, TFJOB_SUSPENDED
from ..spec import RunSpec
from ..status.compute import state_status
from ..status.pods import own_pods
from ..status.state import State, kueue_queue, tfjob_state
from . import writes
from .context import Context, ObservedRun, is_live, meta
from .decide import policy_not_held
from .guard import Guard
from .mirror import Mirror

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Stall:
    """A Running run whose epochs stopped ending."""

    ctx: Context
    mirror: Mirror
    guard: Guard

    def watch(self, run: ObservedRun, status: Mapping[str, Any]) -> None:
        """The watchdog's step for a Running run: no API call unless it flags, clears or reminds of a stall."""
        spec, at = run.spec, self.ctx.now()
        step = watchdog.decide(watchdog.effective(spec), status, at)
        if isinstance(step, watchdog.Remind):
            message = step.message
            self.ctx.record(run.body, lambda prev: watchdog.reminded_status(prev, message), quiet=True)
        elif isinstance(step, watchdog.Clear):
            cleared = self.ctx.record(run.body, lambda prev: watchdog.cleared_status(prev, at, spec.generation), True)
            if cleared is not None:
                message = next(c["message"] for c in cleared["conditions"] if c["type"] == STALLED_CONDITION)
                self.ctx.emit(run.body, "Normal", STALL_ENDED, message)
        elif isinstance(step, watchdog.Flag):
            self._flag_stall(run, step, at)

    def _silent_workers(self, run: RunSpec, tfjob: Mapping[str, Any]) -> list[str]:
        """The worker pods whose log has no line for the last SILENT_SECONDS (the trainer's heartbeat keeps a live
        one's going): one small read per worker, only for a run just found stalled; only the TFJob's own pods are
        read (own_pods), a worker without one is silent."""
        own = {meta(p).get("name") for p in own_pods(run, tfjob, self.ctx.kube.list_job_pods(run.namespace,
                                                                                           run.tfjob_name))}
        logs = {pod: self.ctx.kube.pod_log(run.namespace, pod, CONTAINER_NAME, tail_lines=1,
                                           since_seconds=SILENT_SECONDS) if pod in own else None
                for pod in (worker_pod_name(run, i) for i in range(run.workers))}  # fmt: skip
        return watchdog.silent_workers(logs)

    def _flag_stall(self, run: ObservedRun, flag: watchdog.Flag, at: str) -> None:
        """Say the stall (condition, message, event), then restart the workers or fail the run if it asks."""
        spec = run.spec
        tfjob = self.ctx.kube.get_tfjob(spec.namespace, spec.tfjob_name) or {}
        silent = self._silent_workers(spec, tfjob)
        flag = watchdog.left_to_kueue(flag, kueue_queue(tfjob))
        message = (f"{watchdog.stall_message(flag.verdict, silent, spec.workers)}; "
                   f"{watchdog.then_message(flag, watchdog.effective(spec))}")  # fmt: skip
        if flag.fail:
            self._fail_stalled(run, flag, message, at)
            return
        flagged = self.ctx.record(run.body, lambda prev: watchdog.flagged_status(prev, flag, message, at,
                                                                             spec.generation), quiet=True)  # fmt: skip
        if flagged is None:
            return  # said already (a concurrent poll), or the run finished meanwhile
        self.ctx.emit(run.body, "Warning", STALLED_EVENT, message)
        if flag.then == watchdog.RESTART:
            self._suspend_for_restart(run, flag.restart)

    def _suspend_for_restart(self, run: ObservedRun, restart: int) -> None:
        """Suspend the TFJob (as spec.suspend does: its pods go); its next event that says so resumes it, and the
        new workers resume from their backup. Recorded first (restarting): an API error here is tried again by the
        next poll (resume_polled)."""
        spec = run.spec
        writes.suspend_tfjob(self.ctx.kube, spec, True)
        self.ctx.emit(run.body, "Warning", STALL_RESTART,
                  f"suspended TFJob {spec.tfjob_name} to restart its workers; it is resumed once its pods are gone, "
                  f"and they resume from their backup (restart {restart} of {spec.watchdog.max_restarts})")

    def resume_polled(self, run: ObservedRun) -> None:
        """The progress poll of a run being restarted: resume its TFJob once it says it is suspended."""
        spec = run.spec
        try:
            tfjob = self.ctx.kube.get_tfjob(spec.namespace, spec.tfjob_name)
            if tfjob is None or spec.suspend:
                return
            if tfjob_state(tfjob).reason == TFJOB_SUSPENDED:
                self.resume_after_stall(run, tfjob)
            elif watchdog.suspend_missing(run.status, tfjob):
                log.warning("run %s/%s: its restart for a stall was recorded but TFJob %s not suspended: suspending it "
                            "now", spec.namespace, spec.name, spec.tfjob_name)  # fmt: skip
                self._suspend_for_restart(run, int(watchdog.record_of(run.status).get("restarts") or 1))
            elif watchdog.resume_unrecorded(run.status, tfjob):
                log.warning("run %s/%s: TFJob %s resumed after its restart for a stall, which was not recorded: "
                            "recording it now", spec.namespace, spec.name, spec.tfjob_name)  # fmt: skip
                self._record_resumed(run, tfjob)
        except ApiError as err:
            log.warning("run %s/%s: its restart not resumed yet: %s", spec.namespace, spec.name, err)

    def resume_after_stall(self, run: ObservedRun, tfjob: Mapping[str, Any]) -> None:
        """The TFJob suspended for a restart says it is: resume it once its old pods are gone (the training-operator
        counts a pod that its deletion failed, the frozen worker's, against the resumed TFJob, which then fails:
        seen on the real node); until then the progress poll comes back (RunningRuns keeps the run). Only the TFJob's
        own pods count (own_pods): a pod that merely carries its label does not hold the restart up."""
        spec = run.spec
        if own_pods(spec, tfjob, self.ctx.kube.list_job_pods(spec.namespace, spec.tfjob_name)):
            return
        if not self._policy_held(run, tfjob):
            return  # stays suspended; the next poll tries again
        self._record_resumed(run, writes.suspend_tfjob(self.ctx.kube, spec, False))

    def _record_resumed(self, run: ObservedRun, tfjob: Mapping[str, Any]) -> None:
        """The restart done (restarting: false), and the run's status mirrored from its resumed TFJob."""
        spec = run.spec
        self.ctx.record(run.body, watchdog.restarted_status, quiet=True)
        fresh = self.ctx.kube.get_run(spec.namespace, spec.name)
        if is_live(fresh, spec.uid) and (parsed := self.ctx.parsed(fresh)) is not None:
            self.mirror.sync_status(parsed, tfjob)

    def _policy_held(self, run: ObservedRun, tfjob: Mapping[str, Any]) -> bool:
        """The run's NetworkPolicy holds before its workers start again (guard.py); else the run says why
        (decide.policy_not_held) and its TFJob stays suspended."""
        if (why := self.guard.why_not_held(run)) is None:
            return True
        if (closed := policy_not_held(run.spec, run.status, tfjob, why)) is not None:
            self.ctx.put(run, closed.state)
        return False

    def _fail_stalled(self, run: ObservedRun, flag: watchdog.Flag, message: str, at: str) -> None:
        """No restart left: the run fails (reason Stalled, its Warning event) and its TFJob is suspended, so that
        its pods go (a stalled worker never ends by itself)."""
        spec = run.spec
        state = State(FAILED, STALLED, message, created=True)

        def failed(prev: Mapping[str, Any]) -> dict[str, Any]:
            flagged = watchdog.flagged_status(prev, flag, message, at, spec.generation)
            return {**state_status(spec, state, flagged, at), watchdog.RECORD: flagged[watchdog.RECORD]}

        if self.ctx.record(run.body, failed) is None:
            return
        try:
            writes.suspend_tfjob(self.ctx.kube, spec, True)
        except ApiError as err:
            log.warning("run %s/%s failed stalled, but its TFJob %s was not suspended: %s", spec.namespace,
                        spec.name, spec.tfjob_name, err)  # fmt: skip

