"""A running run's progress from its chief's log: the last finished epoch into status.progress (and the stall
watchdog's record of when it ended), and a chief whose own code failed for good told to restart no more."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import watchdog
from ..api import CONTAINER_NAME
from ..builders import is_owned_by, worker_pod_name
from ..kube import ApiError
from ..spec import RunSpec
from ..status.pods import is_own_pod, logs_an_error, restart_cannot_help, worker_exits
from ..status.progress import epoch_logged_at, parse_epoch_end, running_progress
from . import writes
from .context import Context, ObservedRun, meta

log = logging.getLogger(__name__)

# The end of the chief's log read per poll: an epoch's line is among the last few (Keras prints nothing
# between epochs with verbose=0; the trainer's heartbeat, one line per HEARTBEAT_SECONDS, leaves an epoch's line
# in the tail for 13 minutes, many polls). No byte limit: the kubelet applies it from the start of the tail, so it
# would cut off the newest lines, the ones wanted.
LOG_TAIL_LINES = 40
# The TFJob uids Progress keeps (own_chief), about 100 bytes each: more than a busy operator's Running runs.
MAX_TFJOB_UIDS = 10_000


@dataclass(eq=False)
class Progress:
    """The chief's log -> status.progress."""

    ctx: Context
    refusals: set[tuple[str | None, str | None, int]] = field(default_factory=set)  # said once each
    # (namespace, TFJob name, run uid) -> the TFJob's uid, oldest first (own_chief)
    tfjob_uids: OrderedDict[tuple[str, str, str], str] = field(default_factory=OrderedDict)

    def not_read(self, run: RunSpec, err: ApiError) -> None:
        """Log why a run's progress was not read: a refusal (RBAC) once per run and status, anything else quietly."""
        key = (run.namespace, run.name, err.status)
        if err.status in (401, 403) and key not in self.refusals:
            self.refusals.add(key)
            log.warning("progress of run %s/%s cannot be read: %s (the operator's RBAC needs get on "
                        "pods/log)", key[0], key[1], err)  # fmt: skip
        else:
            log.debug("progress of run %s/%s not read: %s", key[0], key[1], err)

    def own_chief(self, run: RunSpec) -> Mapping[str, Any] | None:
        """The run's chief pod (worker 0) when it is the TFJob's own (status.pods.is_own_pod), else None: a pod of
        its name made by someone else before the real one (security review R8) is not read. The TFJob's uid is read
        once per run (tfjob_uids): a run's TFJob is never replaced, a TFJob deleted fails the run."""
        pod = self.ctx.kube.get_pod(run.namespace, worker_pod_name(run, 0))
        if pod is None:
            return None
        key = (run.namespace, run.tfjob_name, run.uid or "")
        if key not in self.tfjob_uids:
            tfjob = self.ctx.kube.get_tfjob(run.namespace, run.tfjob_name)
            if tfjob is None or not is_owned_by(tfjob, run.uid):
                return None
            self.tfjob_uids[key] = meta(tfjob).get("uid") or ""
            while len(self.tfjob_uids) > MAX_TFJOB_UIDS:  # the oldest first: runs long gone
                self.tfjob_uids.popitem(last=False)
        return pod if is_own_pod(run, self.tfjob_uids[key], pod) else None

    def read_progress(self, run: ObservedRun, quiet: bool = False) -> Mapping[str, Any]:
        """The chief's last finished epoch into status.progress and the watchdog's record; returns the status as
        this call left it. Its log is read only when the chief is the TFJob's own (own_chief)."""
        spec = run.spec
        chief = self.own_chief(spec)
        if chief is None:
            return run.status
        log_text = self.ctx.kube.pod_log(spec.namespace, meta(chief)["name"], CONTAINER_NAME,
                                         tail_lines=LOG_TAIL_LINES, timestamps=True)  # fmt: skip
        if log_text is None:
            return run.status
        end = parse_epoch_end(log_text, spec.training.epochs)
        status = run.status
        if end is not None:
            at = self.ctx.now()
            # The watchdog's record keeps when the epoch ended, as the runtime logged it (not when this read saw it,
            # up to a read's spacing later): its mean epoch time, and when the next read is due, are then exact. Never
            # after now (a node clock ahead of ours); both strings are of one format, so they compare as times.
            ended = min(epoch_logged_at(log_text, spec.training.epochs) or at, at)
            written = self.ctx.record(run.body, lambda prev: watchdog.with_epoch(running_progress(prev, end, at),
                                                                             end.epoch, ended), quiet)  # fmt: skip
            status = {**run.status, **(written or {})}
        # Also after finished epochs: a loss diverges in any epoch. The pod's last exit counts as much as the log:
        # under OnFailure the kubelet restarts a worker at once after its first exit, and the new container's log
        # has no error line (CI's run of 364ccf1: seen only at the second exit, a worker restarted twice).
        if logs_an_error(log_text) or failed_for_good(chief) is not None:
            self.restart_no_more(run, chief)
        return status

    def restart_no_more(self, run: ObservedRun, chief: Mapping[str, Any]) -> None:
        """When the chief's own code failed (exit code 8), its loss diverged (9) or its code file is not the one
        recorded (10), permanent failures (status.restart_cannot_help), have its TFJob fail at the next restart.

        Under restartPolicy OnFailure the kubelet restarts it anyway, with a growing back-off, until the TFJob's
        backoffLimit: a minute and more of the same error (a diverged run resumes from its backup and diverges
        again). With backoffLimit 0 the training-operator fails the TFJob once any worker has restarted, and the
        run fails as for any failed TFJob: UserCodeError, Diverged or CodeChanged, its pods released. An API error
        is logged: the backoffLimit the run asked for still ends it.
        """
        spec = run.spec
        try:
            code = failed_for_good(chief)
            if code is None:  # its log says it exited, the pod read before it not yet: read again
                pod = self.ctx.kube.get_pod(spec.namespace, meta(chief)["name"])
                if pod is None or meta(pod).get("uid") != meta(chief).get("uid"):
                    return  # gone, or another pod of its name since: not the chief whose log was read
                code = failed_for_good(pod)
            if code is None:
                return
            writes.restart_no_more(self.ctx.kube, spec)
        except ApiError as err:
            log.warning("run %s/%s: its chief failed for good, but TFJob %s was not told to stop restarting: %s",
                        spec.namespace, spec.name, spec.tfjob_name, err)  # fmt: skip
            return
        log.info("run %s/%s: its chief failed for good (exit code %d); TFJob %s fails at the next restart "
                 "(backoffLimit 0)", spec.namespace, spec.name, code, spec.tfjob_name)  # fmt: skip


def failed_for_good(pod: Mapping[str, Any]) -> int | None:
    """The pod's exit code (current or last container) that a restart would repeat, if any."""
    return next((e.code for e in worker_exits([pod]) if restart_cannot_help(e.code)), None)
