"""A run waiting for its worker pods (none runs yet, or not all): read them, and say in the status why they
cannot start (status.waiting_status). No TFJob event tells of a pod stuck in ImagePullBackOff or Unschedulable."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import disruption
from ..kube import ApiError
from ..runtime.trackers import RunRef
from ..status.pods import own_pods
from ..status.waiting import refused_pods, waiting_status, waits_for_pods
from .context import Context, meta

log = logging.getLogger(__name__)


@dataclass(eq=False)
class WaitingPods:
    """Why a run's worker pods do not start."""

    ctx: Context

    def check(self, ref: RunRef) -> None:
        """A run still waiting for its worker pods (none runs yet, or not all): read them, and say so when they
        cannot start. An API error is logged: the next round tries again."""
        try:
            self._check_pods(ref)
        except ApiError as err:
            log.warning("pods of run %s/%s not checked: %s", ref[0], ref[1], err)


    def _check_pods(self, ref: RunRef) -> None:
        namespace, name, uid = ref
        body = self.ctx.kube.get_run(namespace, name)
        if body is None or meta(body).get("uid") != uid or not waits_for_pods(body.get("status")):
            return
        run = self.ctx.parsed(body)
        if run is None:
            return
        spec = run.spec
        tfjob = self.ctx.kube.get_tfjob(spec.namespace, spec.tfjob_name)
        if tfjob is None:
            return  # not made yet, or deleted: the run's own handlers say so
        # Found by the training-operator's label, read only when they are the TFJob's own (own_pods).
        pods = own_pods(spec, tfjob, self.ctx.kube.list_job_pods(spec.namespace, spec.tfjob_name))
        refused: list[str] = []
        if len(pods) < run.spec.workers:  # pods missing: the API server may have refused them (review L4)
            refused = refused_pods(self.ctx.kube.object_events(run.spec.namespace, "TFJob", run.spec.tfjob_name))
        now = self.ctx.now()

        def waited(prev: Mapping[str, Any]) -> dict[str, Any]:  # a resumed run may wait only so long
            return disruption.waited_status(run.spec, waiting_status(run.spec, pods, prev, now, refused), prev, now)

        self.ctx.record(run.body, waited)

