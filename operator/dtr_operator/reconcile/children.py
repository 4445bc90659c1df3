"""A run created, resumed, or its spec.suspend changed: make sure its NetworkPolicy, PVC and TFJob exist (observe ->
decide.py -> act), with the TFJob suspended as the spec says, and its NetworkPolicy held (guard.py) whenever the TFJob
is found, or the TFJob suspended; refused runs fail before anything is created."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..builders import children
from ..kube import AlreadyExists, ApiError, NotFound, ResourceMissing
from ..policy import Refusal
from ..reasons import (
    API_UNAVAILABLE,
    CREATED,
    FAILED,
    INVALID_SPEC,
    INVALID_TFJOB,
    PENDING,
    RESUMED,
    SUSPEND_REFUSED,
    SUSPENDED_EVENT,
    TFJOB_CRD_MISSING,
)
from ..spec import RunSpec, SpecError
from ..status.compute import unparsed_status
from ..status.state import State, is_terminal
from . import budget, writes
from .context import Context, ObservedRun, meta
from .decide import (
    UNREAD,
    Action,
    Create,
    FailClosed,
    Observed,
    Record,
    Suspend,
    Sync,
    decide,
    is_going,
    network_policy_taken,
    policy_not_held,
)
from .guard import Guard
from .mirror import Mirror
from .progress import Progress

log = logging.getLogger(__name__)

TRAINING_OPERATOR_INSTALL = (
    "kubectl apply --server-side -k "
    '"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.4"'
)

ImageCheck = Callable[[str], "str | None"]  # why a trainer image is refused, or None
CodeCheck = Callable[["str | None"], "str | None"]  # why a run's code ConfigMap (or None) is refused, or None


PolicyCheck = Callable[[RunSpec], "Refusal | None"]  # why the operator's policy refuses what a run asks, or None
ClaimCheck = Callable[[RunSpec, Mapping[str, Any]], "Refusal | None"]  # why a run may not mount this PVC, or None


def any_request(run: RunSpec) -> Refusal | None:
    """A PolicyCheck that refuses nothing."""
    return None


def any_claim(run: RunSpec, pvc: Mapping[str, Any]) -> Refusal | None:
    """A ClaimCheck that refuses nothing."""
    return None


def any_image(image: str) -> str | None:
    """An ImageCheck that refuses none."""
    return None


def any_code(config_map: str | None) -> str | None:
    """A CodeCheck that refuses none."""
    return None


@dataclass(frozen=True)
class Checks:
    """Why the operator's settings refuse a run: its trainer image, its code sent in a ConfigMap, what it asks of
    the cluster, the PVC it names (policy.py). By default nothing is refused."""

    image: ImageCheck = any_image
    code: CodeCheck = any_code
    request: PolicyCheck = any_request
    claim: ClaimCheck = any_claim


@dataclass(eq=False)
class Children:
    """spec -> the run's children."""

    ctx: Context
    mirror: Mirror
    progress: Progress
    guard: Guard
    checks: Checks = Checks()

    def reconcile_run(self, body: Mapping[str, Any], retry: int = 0) -> float | None:
        """Make sure the run's PVC and TFJob exist. Returns seconds until a retry is due, or None when done."""
        if is_terminal(body.get("status")):
            self.ctx.let_go(body)  # its budget again, had the write that finished it failed to (the operator's start)
            return None
        try:
            run = ObservedRun.parse(body, self.ctx.default_image)
        except SpecError as err:
            # The CRD rejects most at admission; this catches objects stored under an older schema, and a spec
            # that contradicts itself beyond what the schema states (spec.never_runs).
            failed = State(FAILED, INVALID_SPEC, str(err))
            generation = meta(body).get("generation")
            self.ctx.record(body, lambda prev: unparsed_status(failed, prev, self.ctx.now(), generation))
            return None
        try:
            return self._ensure_children(run, retry)
        except ResourceMissing:
            message = (
                f"the TFJob CRD (tfjobs.kubeflow.org) is not installed, or not served yet: install the Kubeflow "
                f"training-operator ({TRAINING_OPERATOR_INSTALL}); retrying with backoff "
                f"(up to {int(self.ctx.retries.max_backoff)}s)"
            )
            self.ctx.put(run, State(PENDING, TFJOB_CRD_MISSING, message))
            return self.ctx.retries.backoff(retry)
        except ApiError as err:
            return self._api_refused(run, err, retry)

    def _api_refused(self, run: ObservedRun, err: ApiError, retry: int) -> float | None:
        """Say why the API refused; retry what may pass later, give up on what never will."""
        if err.retryable or err.status in (401, 403, 409):
            # 403: RBAC may be fixed by an admin; 409: a write race that a retry resolves.
            message = f"API error {err.status} {err.reason}: {err.message[:200]}; retrying with backoff"
            try:
                self.ctx.put(run, State(PENDING, API_UNAVAILABLE, message))
            except ApiError:
                log.warning("could not record status of %s/%s: %s", run.spec.namespace, run.spec.name, err)
            return self.ctx.retries.backoff(retry)
        # The API refused our object for good (e.g. a TFJob admission webhook): say so, stop.
        refused = State(FAILED, INVALID_TFJOB, f"the API refused a child object: {err.message[:300]}")
        self.ctx.put(run, refused)
        return None

    def observe(self, run: RunSpec, read_pvc: bool, read_code: bool = False) -> Observed:
        """The TFJob, and the PVC when it matters: a claimName run's, or ours after a create clashed; the code's
        ConfigMap when read_code."""
        tfjob = self.ctx.kube.get_tfjob(run.namespace, run.tfjob_name)
        if tfjob is not None and is_going(tfjob):
            return Observed(tfjob, pods=self.ctx.kube.list_job_pods(run.namespace, run.tfjob_name), at=self.ctx.now())
        config_map = UNREAD
        if read_code and run.code is not None and run.code.config_map is not None:
            config_map = self.ctx.kube.get_configmap(run.namespace, run.code.config_map)
        if tfjob is not None or not run.has_volume or (run.creates_pvc and not read_pvc):
            return Observed(tfjob, config_map=config_map)
        return Observed(tfjob, self.ctx.kube.get_pvc(run.namespace, run.pvc_name), config_map)

    def _ensure_children(self, run: ObservedRun, retry: int) -> float | None:
        spec = run.spec
        created: list[str] = []
        read_pvc = False
        refusal = self.checks.image(spec.image)
        code_refusal = self.checks.code(spec.code.config_map if spec.code else None)
        read_code = code_refusal is None and "code" not in run.status  # read until status.code says it
        request_refusal = self.checks.request(spec)
        for _ in range(self.ctx.retries.observations):
            seen = self.observe(spec, read_pvc, read_code)
            action = self._guarded(
                run, decide(spec, run.status, seen, refusal, code_refusal, request_refusal, self._claim(spec, seen))
            )
            if not isinstance(action, Create):
                return self._act(run, action, created, retry)
            # The TFJob carries the digest the status records with it: its workers run no other file (builders).
            pvc_manifest, tfjob_manifest = children(spec, action.code_sha256, self.ctx.tracking_uri)
            if not action.pvc or created:
                pvc_manifest = None  # not wanted, or created by an earlier round of this call
            if pvc_manifest is not None and self._create(pvc_manifest, f"PVC {spec.pvc_name}", created) is None:
                read_pvc = True  # its name is taken: look at the one that is there, then decide again
                continue
            tfjob = self._create(tfjob_manifest, f"TFJob {spec.tfjob_name}", created)
            if tfjob is None:  # someone else was faster: ours (a concurrent handler) or not
                continue
            self._announce(run, tfjob, created, action.code)
            return None
        return self.ctx.retries.backoff(0)  # the world kept changing under us: look again shortly

    def _claim(self, spec: RunSpec, seen: Observed) -> Refusal | None:
        """Why the run may not mount the claim it names, once that PVC has been read."""
        claimed = spec.has_volume and not spec.creates_pvc and isinstance(seen.pvc, Mapping)
        return self.checks.claim(spec, seen.pvc) if claimed else None

    def _guarded(self, run: ObservedRun, action: Action) -> Action:
        """The action once the run's NetworkPolicy holds (guard.py), then the namespace's other policies reported:
        made before the PVC and TFJob (Create: no worker ever listens unguarded; a Record stops the run when the name
        is taken by a policy not its own, and an API refusal is as any child's), and held whenever the TFJob is found
        (Sync, a resume): a FailClosed when it cannot be. A Record, a FailClosed and a suspension as they are."""
        spec = run.spec
        if isinstance(action, Record | FailClosed) or (isinstance(action, Suspend) and action.suspend):
            return action
        if isinstance(action, Create):
            taken = self.guard.hold(run, restoring=False)
            if taken is not None:
                return network_policy_taken(spec, taken) or action
            self.guard.report(run)
            return budget.make(self.ctx.kube, spec) or action  # spec.disruption.protect: before the workers too
        if (why := self.guard.why_not_held(run)) is None:
            self.guard.report(run)
            return action
        return policy_not_held(spec, run.status, action.tfjob, why) or action

    def _create(self, manifest: Mapping[str, Any], what: str, created: list[str]) -> Mapping[str, Any] | None:
        """Create the object and add `what` to `created`; None when its name is taken."""
        try:
            obj = self.ctx.kube.create(manifest)
        except AlreadyExists:
            return None
        created.append(what)
        return obj

    def _act(self, run: ObservedRun, action: Sync | Record | Suspend | FailClosed, created: list[str],
             retry: int) -> float | None:  # fmt: skip
        """Carry out a decision that creates nothing. Returns the delay before a retry, or None."""
        if isinstance(action, Record):
            self.ctx.put(run, action.state)
            return self.ctx.retries.backoff(retry) if action.retry else None
        if isinstance(action, FailClosed):
            if action.suspend:  # the workers first: the status may say it a moment later
                writes.suspend_tfjob(self.ctx.kube, run.spec, True)
            self.ctx.put(run, action.state)
            return self.ctx.retries.backoff(retry)
        if isinstance(action, Sync):
            self._announce(run, action.tfjob, created, action.code)
            return None
        return self.set_suspend(run, action.suspend, retry)

    def set_suspend(self, run: ObservedRun, suspend: bool, retry: int) -> float | None:
        """Patch the TFJob's runPolicy.suspend; a refusal is retried with backoff and said in an event, never a
        reason to fail a run that is still training. Returns the delay before a retry, or None."""
        spec = run.spec
        if suspend:
            try:  # the epoch the workers reach last, while the chief's log can still be read
                self.progress.read_progress(run, quiet=True)
            except (ApiError, ValueError) as err:  # never a reason not to suspend
                log.info("last progress of %s/%s not read before suspending: %s", spec.namespace, spec.name, err)
        try:
            tfjob = writes.suspend_tfjob(self.ctx.kube, spec, suspend)
        except NotFound:
            return self.ctx.retries.backoff(0)  # gone meanwhile: the next look records TFJobDeleted
        except ApiError as err:
            if err.retryable:
                raise
            self.ctx.emit(run.body, "Warning", SUSPEND_REFUSED, f"could not set TFJob {spec.tfjob_name}'s suspend to "
                      f"{suspend}: {err.status} {err.message[:200]}; retrying with backoff")  # fmt: skip
            return self.ctx.retries.backoff(retry)
        what = "suspended TFJob" if suspend else "resumed TFJob"
        self.ctx.emit(run.body, "Normal", SUSPENDED_EVENT if suspend else RESUMED,
                  f"{what} {spec.tfjob_name} (spec.suspend: {suspend})")  # fmt: skip
        self.mirror.sync_status(run, tfjob)  # a stale body is re-read on the write's conflict
        return None

    def _announce(
        self, run: ObservedRun, tfjob: Mapping[str, Any], created: list[str], code: Mapping[str, str] | None = None
    ) -> None:
        """The status from the TFJob (and status.code); with one `Created` event for what this call created."""
        if created:
            self.ctx.emit(run.body, "Normal", CREATED, f"created {' and '.join(created)}")
            # That event also tells of the move to TFJobSubmitted: one event per run fewer, which a
            # burst of runs feels (every event is an API write).
            self.mirror.sync_status(run, tfjob, quiet=True, code=code)
        else:
            self.mirror.sync_status(run, tfjob, code=code)
