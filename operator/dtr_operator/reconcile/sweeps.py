"""A DistTrainingSweep's turn: read it and the runs it owns, decide (sweep/), write its status, then act (create the
next trials, delete the stopped ones). The status is written first, guarded by the sweep's resourceVersion, so two
turns cannot both decide, and an operator that restarts between the write and the acts does them again (a trial is
created by its name, which exists or not; a deleted run is gone already). One turn at a time per sweep (a lock): a
burst of its trials' events makes turns that queue, each from what the API holds then.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api import API_VERSION, KIND, SWEEP_KIND, SWEEP_LABEL, TRIAL_LABEL
from ..kube import AlreadyExists, ApiError, Conflict
from ..reasons import INVALID_SWEEP, SWEEP_FAILED, SWEEP_SUCCEEDED, TRIAL_REFUSED, TRIAL_STOPPED
from ..sweep.decide import TERMINAL, Decision, SweepSpec, decide, parse_sweep
from ..sweep.observe import fold, refused, trial_run, trials, written
from ..sweep.space import SpaceError
from .context import Context, meta

log = logging.getLogger(__name__)
TURNS = 5  # turns in a row when a write conflicts or a trial is refused (each from what the API holds then)


def owned_trials(sweep: Mapping[str, Any], runs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The sweep's trials by index: runs it is the controller of, with a trial label (not just any run so labelled)."""
    uid, out = meta(sweep).get("uid"), {}
    for run in runs:
        owners = meta(run).get("ownerReferences") or []
        index = (meta(run).get("labels") or {}).get(TRIAL_LABEL, "")
        if index.isdigit() and any(o.get("uid") == uid and o.get("controller") for o in owners):
            out[int(index)] = run
    return out


@dataclass(eq=False)
class Sweeper:
    """The sweeps' turns, over the reconciler's Context (its API client, events and clock)."""

    ctx: Context
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def turn(self, namespace: str, name: str) -> None:
        """The sweep's turn; a conflict or a refused trial takes another, from the API's state then."""
        with self._guard:
            lock = self._locks.setdefault((namespace, name), threading.Lock())
        with lock:
            for _ in range(TURNS):
                if not self._turn(namespace, name):
                    return
        log.info("sweep %s/%s: another turn after %d in a row; its next event brings it", namespace, name, TURNS)

    def _turn(self, namespace: str, name: str) -> bool:
        """One turn; True when another should follow at once."""
        body = self.ctx.kube.get(API_VERSION, SWEEP_KIND, namespace, name)
        if body is None or meta(body).get("deletionTimestamp"):
            return False
        if (body.get("status") or {}).get("phase") in TERMINAL:
            return False
        try:
            sweep = parse_sweep(body.get("spec") or {})
        except (SpaceError, TypeError, ValueError) as err:
            self._invalid(body, str(err))
            return False
        return self._decide(body, sweep)

    def _decide(self, body: Mapping[str, Any], sweep: SweepSpec) -> bool:
        """Fold the trials' runs into the status, decide, write, act; True when another turn should follow."""
        namespace, name, status = meta(body)["namespace"], meta(body)["name"], body.get("status") or {}
        runs = owned_trials(body, self.ctx.kube.list_objects(API_VERSION, KIND, namespace, f"{SWEEP_LABEL}={name}"))
        records = fold(status.get("trials") or [], runs, sweep.metric)
        decision = decide(sweep, trials(records))
        new = self._status(body, sweep, runs, records, decision)
        if not self._write(body, new):
            return True
        unmade = tuple(int(r["index"]) for r in records if not r.get("phase") and int(r["index"]) not in runs)
        return self._act(body, decision, new, status.get("phase"), unmade)

    def _act(self, body: Mapping[str, Any], decision: Decision, written_status: Mapping[str, Any],
             was: str | None, unmade: tuple[int, ...] = ()) -> bool:  # fmt: skip
        """The decision carried out once written: its trials made (each with the point its record holds), and those
        recorded before but not made (a restart or an API error between the write and the create), the stopped ones
        deleted, events said; True when a trial was refused (another turn sees it failed)."""
        points = {t["index"]: t.get("point") or {} for t in written_status["trials"]}
        if not all(self._create(body, index, points[index]) for index in (*unmade, *decision.create)):
            return True
        for run, _ in decision.stop:
            self.ctx.kube.delete(API_VERSION, KIND, meta(body)["namespace"], run)
        if decision.phase != was or decision.stop:
            self._say(body, decision.phase, decision.message, decision.stop)
        return False

    def _status(self, body: Mapping[str, Any], sweep: SweepSpec, runs: Mapping[int, Mapping[str, Any]],
                records: list[dict[str, Any]], decision: Decision) -> dict[str, Any]:  # fmt: skip
        """The status to write: the decision's (observe.written) and its times."""
        new = written(sweep, meta(body)["name"], records, decision, runs)
        started = (body.get("status") or {}).get("startTime") or self.ctx.now()
        new |= {"observedGeneration": meta(body).get("generation"), "startTime": started}
        if decision.phase in TERMINAL:
            new["completionTime"] = self.ctx.now()
        return new

    def _write(self, body: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
        """The status, if the sweep is as read; False on a conflict (the next turn reads it again)."""
        patch = {"metadata": {"resourceVersion": meta(body).get("resourceVersion")}, "status": dict(status)}
        try:
            self.ctx.kube.patch(API_VERSION, SWEEP_KIND, meta(body)["namespace"], meta(body)["name"], patch,
                            subresource="status")  # fmt: skip
        except Conflict:
            return False
        return True

    def _create(self, body: Mapping[str, Any], index: int, point: Mapping[str, Any]) -> bool:
        """The trial's run; False when the API server refused it (its record then says why: the next turn sees a
        failed trial)."""
        run = trial_run(body, index, point)
        try:
            self.ctx.kube.create(run)
        except AlreadyExists:
            return True
        except ApiError as err:
            if err.retryable:
                raise
            self._refused(body, run["metadata"]["name"], err.message)
            return False
        return True

    def _refused(self, body: Mapping[str, Any], run: str, why: str) -> None:
        fresh = self.ctx.kube.get(API_VERSION, SWEEP_KIND, meta(body)["namespace"], meta(body)["name"])
        if fresh is None:
            return
        current = (fresh.get("status") or {}).get("trials") or []
        self._write(fresh, {"trials": refused(current, run, why)})
        self.ctx.emit(body, "Warning", TRIAL_REFUSED, f"the API server refused trial {run}: {why}")

    def _invalid(self, body: Mapping[str, Any], why: str) -> None:
        status = {"phase": "Failed", "reason": INVALID_SWEEP, "message": why, "completionTime": self.ctx.now()}
        if self._write(body, status):
            self.ctx.emit(body, "Warning", INVALID_SWEEP, why)

    def _say(self, body: Mapping[str, Any], phase: str, message: str, stopped: Any) -> None:
        for run, why in stopped:
            self.ctx.emit(body, "Normal", TRIAL_STOPPED, f"trial {run} stopped: {why}")
        if phase in TERMINAL:
            succeeded = phase == "Succeeded"
            self.ctx.emit(body, "Normal" if succeeded else "Warning", SWEEP_SUCCEEDED if succeeded else SWEEP_FAILED,
                      message)  # fmt: skip
