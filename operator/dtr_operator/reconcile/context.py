"""What every part of the reconciler shares: the API client, how events are posted, the clock, the retry policy,
a run as one entry point read it, and the one status write (a compare-and-set merge patch). Knows nothing of kopf.

Every status write is a merge patch guarded by the run's resourceVersion, recomputed on conflict, and skipped once
the run has finished, so two writers cannot regress a run and a Succeeded run stays Succeeded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeGuard

from ..kube import ApiError, Conflict, NotFound
from ..kube_api import KubeApi
from ..reasons import FAILED, WARNING_REASONS
from ..spec import RunSpec, SpecError, parse_run
from ..status.compute import next_status, state_status
from ..status.state import State, is_terminal
from . import budget

log = logging.getLogger(__name__)
MAX_BACKOFF = 300.0
WRITE_ATTEMPTS = 5

# emit(run body, event type "Normal" | "Warning", reason, message): a Kubernetes event on the run.
Emit = Callable[[Mapping[str, Any], str, str, str], None]
Clock = Callable[[], str]  # now, as the status writes times: 2026-01-02T03:04:05Z


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def is_live(body: Mapping[str, Any] | None, uid: str | None) -> TypeGuard[Mapping[str, Any]]:
    """Whether body is the run of this uid, not being deleted (its children go with it)."""
    return body is not None and meta(body).get("uid") == uid and not meta(body).get("deletionTimestamp")


@dataclass(frozen=True)
class Retries:
    """How long the operator keeps at one thing before it hands the run back for a later attempt."""

    write_attempts: int = WRITE_ATTEMPTS  # status writes that met a conflict, re-read and recomputed
    observations: int = 3  # create raced with something else that often: retry later instead
    max_backoff: float = MAX_BACKOFF

    def backoff(self, retry: int) -> float:
        """Seconds before the next attempt: 5, 10, 20, ... capped at max_backoff (5 minutes)."""
        return min(5.0 * 2 ** min(retry, 10), self.max_backoff)


@dataclass(frozen=True)
class ObservedRun:
    """A run as one entry point read it: its body (whose resourceVersion guards the status write) and its
    spec, parsed once."""

    body: Mapping[str, Any]
    spec: RunSpec

    @classmethod
    def parse(cls, body: Mapping[str, Any], default_image: str) -> ObservedRun:
        """Raises SpecError (which reconcile_run records in the status)."""
        return cls(body, parse_run(body, default_image=default_image))

    @property
    def status(self) -> Mapping[str, Any]:
        return self.body.get("status") or {}


@dataclass(frozen=True)
class Context:
    """The operator's clients and policy that every part of the reconciler reads; one per operator process."""

    kube: KubeApi
    emit: Emit
    default_image: str
    retries: Retries = Retries()
    now: Clock = utc_now
    tracking_uri: str = ""  # the admin's MLflow server for every run's chief (settings.py; docs/tracking.md)

    def parsed(self, body: Mapping[str, Any]) -> ObservedRun | None:
        """The run, or None when its spec does not parse (reconcile_run records why)."""
        try:
            return ObservedRun.parse(body, self.default_image)
        except SpecError:
            return None

    def record(
        self,
        body: Mapping[str, Any],
        compute: Callable[[Mapping[str, Any]], dict[str, Any]],
        quiet: bool = False,
        reread: Callable[[], None] | None = None,
    ) -> dict[str, Any] | None:
        """Write compute(previous status) to the run, unless nothing changed or the run has finished.

        Returns the patch written (None if none). An event goes out when the phase or reason changes,
        unless `quiet` (an event already said it). On a conflict the run is read again, and so is what
        `compute` reads when `reread` is given: whoever wrote meanwhile may have seen a newer TFJob. The write that
        finishes the run lets its PodDisruptionBudget go (let_go).
        """
        found = meta(body)
        namespace, name, uid = found.get("namespace", ""), found.get("name", ""), found.get("uid")
        for _ in range(self.retries.write_attempts):
            previous = body.get("status") or {}
            proposed = compute(previous)
            patch = next_status(previous, proposed)
            if patch is None:
                return None
            try:
                self.kube.patch_run_status(namespace, name, patch, meta(body).get("resourceVersion"))
            except NotFound:
                return None  # deleted meanwhile (our copy of it was older than the deletion)
            except Conflict:
                fresh = self.kube.get_run(namespace, name)
                if not is_live(fresh, uid):
                    return None
                body = fresh
                if reread is not None:
                    reread()
                continue
            if not quiet:
                self._say_change(body, previous, proposed)
            if is_terminal(patch):
                self.let_go(body)
            return patch
        raise ApiError(409, "Conflict", f"status of {namespace}/{name} kept changing; will retry")

    def _say_change(self, body: Mapping[str, Any], previous: Mapping[str, Any], proposed: Mapping[str, Any]) -> None:
        """An event when the phase or reason changes: a warning for a failure or a reason that needs a person."""
        if (previous.get("phase"), previous.get("reason")) == (proposed.get("phase"), proposed.get("reason")):
            return
        warn = proposed["phase"] == FAILED or proposed.get("reason") in WARNING_REASONS
        event_type = "Warning" if warn else "Normal"
        self.emit(body, event_type, proposed.get("reason") or proposed["phase"], proposed.get("message") or "")

    def let_go(self, body: Mapping[str, Any]) -> None:
        """A finished run lets go of what it held only while it trained: its PodDisruptionBudget allows every eviction
        (budget.release). A refusal is logged; the run's next attempt (the operator's start) tries again."""
        run = self.parsed(body)
        if run is None or not run.spec.disruption.protect:
            return
        try:
            budget.release(self.kube, run.spec)
        except ApiError as err:
            log.warning("the PodDisruptionBudget of finished run %s/%s not let go: %s", run.spec.namespace,
                        run.spec.name, err)  # fmt: skip

    def put(self, run: ObservedRun, state: State) -> None:
        """The run's status says this state."""
        self.record(run.body, lambda prev: state_status(run.spec, state, prev, self.now()))
