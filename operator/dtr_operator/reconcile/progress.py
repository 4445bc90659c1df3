"""A running run's progress from its chief's log: the last finished epoch into status.progress (and the stall
watchdog's record of when it ended), and a chief whose own code failed for good told to restart no more."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import watchdog
from ..api import CONTAINER_NAME
from ..builders import worker_pod_name
from ..kube import ApiError
from ..spec import RunSpec
from ..status.pods import logs_an_error, restart_cannot_help, worker_exits
from ..status.progress import epoch_logged_at, parse_epoch_end, running_progress
from . import writes
from .context import Context, ObservedRun

log = logging.getLogger(__name__)

# The end of the chief's log read per poll: an epoch's line is among the last few (Keras prints nothing
# between epochs with verbose=0; the trainer's heartbeat, one line per HEARTBEAT_SECONDS, leaves an epoch's line
# in the tail for 13 minutes, many polls). No byte limit: the kubelet applies it from the start of the tail, so it
# would cut off the newest lines, the ones wanted.
LOG_TAIL_LINES = 40


@dataclass(eq=False)
class Progress:
    """The chief's log -> status.progress."""

    ctx: Context
    refusals: set[tuple[str | None, str | None, int]] = field(default_factory=set)  # said once each

    def not_read(self, run: RunSpec, err: ApiError) -> None:
        """Log why a run's progress was not read: a refusal (RBAC) once per run and status, anything else quietly."""
        key = (run.namespace, run.name, err.status)
        if err.status in (401, 403) and key not in self.refusals:
            self.refusals.add(key)
            log.warning("progress of run %s/%s cannot be read: %s (the operator's RBAC needs get on "
                        "pods/log)", key[0], key[1], err)  # fmt: skip
        else:
            log.debug("progress of run %s/%s not read: %s", key[0], key[1], err)

    def read_progress(self, run: ObservedRun, quiet: bool = False) -> Mapping[str, Any]:
        """The chief's last finished epoch into status.progress and the watchdog's record; returns the status as
        this call left it."""
        spec = run.spec
        chief = worker_pod_name(spec, 0)
        log_text = self.ctx.kube.pod_log(spec.namespace, chief, CONTAINER_NAME, tail_lines=LOG_TAIL_LINES,
                                     timestamps=True)  # fmt: skip
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
        if logs_an_error(log_text):  # also after finished epochs: a loss diverges in any epoch
            self.restart_no_more(run)
        return status


    def restart_no_more(self, run: ObservedRun) -> None:
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
            pod = self.ctx.kube.get_pod(spec.namespace, worker_pod_name(spec, 0))
            code = next((e.code for e in worker_exits([pod] if pod else []) if restart_cannot_help(e.code)), None)
            if code is None:
                return
            writes.restart_no_more(self.ctx.kube, spec)
        except ApiError as err:
            log.warning("run %s/%s: its chief failed for good, but TFJob %s was not told to stop restarting: %s",
                        spec.namespace, spec.name, spec.tfjob_name, err)  # fmt: skip
            return
        log.info("run %s/%s: its chief failed for good (exit code %d); TFJob %s fails at the next restart "
                 "(backoffLimit 0)", spec.namespace, spec.name, code, spec.tfjob_name)  # fmt: skip
