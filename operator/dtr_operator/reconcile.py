"""The operator's decisions in order: read, decide with the pure core, write. Knows nothing of kopf.

Two entry points, both idempotent and safe to run concurrently for one run:
- reconcile_run: a run was created or the operator restarted: make sure its PVC and TFJob exist.
- tfjob_event: its TFJob changed (or vanished): mirror that into the run's status.

Every status write is a merge patch guarded by the run's resourceVersion, recomputed on conflict,
and skipped once the run has finished, so two writers cannot regress a run and a Succeeded run
stays Succeeded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .builders import (
    CONTAINER_NAME,
    KEEP_PODS,
    RELEASE_RUNNING_PODS,
    children,
    is_owned_by,
    is_reusable_pvc,
    left_by_earlier_run,
    logs_dir,
    worker_pod_name,
)
from .kube import AlreadyExists, ApiError, Conflict, Kube, NotFound, ResourceMissing
from .reasons import (
    API_UNAVAILABLE,
    CREATED,
    IMAGE_NOT_ALLOWED,
    INVALID_SPEC,
    INVALID_TFJOB,
    NAME_CONFLICT,
    RESUMED,
    SUSPEND_REFUSED,
    SUSPENDED_EVENT,
    TFJOB_CRD_MISSING,
    TFJOB_CREATED,
    TFJOB_DELETED,
    WAITING_FOR_CLEANUP,
    WAITING_FOR_PVC,
    WARNING_REASONS,
    WORKER_PODS_RELEASED,
    WORKERS_NOT_STARTING,
)
from .spec import GROUP, KIND, RunSpec, SpecError, parse_run
from .status import (
    FAILED,
    PENDING,
    RUNNING,
    TERMINAL,
    State,
    is_terminal,
    next_status,
    parse_epoch_end,
    running_progress,
    state_status,
    tfjob_state,
    tfjob_status,
    unparsed_status,
    waiting_status,
)

log = logging.getLogger(__name__)

MAX_BACKOFF = 300.0
WRITE_ATTEMPTS = 5
TRAINING_OPERATOR_INSTALL = (
    "kubectl apply --server-side -k "
    '"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.4"'
)

# emit(run body, event type "Normal" | "Warning", reason, message): a Kubernetes event on the run.
Emit = Callable[[Mapping[str, Any], str, str, str], None]
# Reasons of a run whose TFJob made its pods, none of which runs yet.
WAITING_FOR_PODS = frozenset({TFJOB_CREATED, WORKERS_NOT_STARTING})


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def backoff(retry: int) -> float:
    """Seconds before the next attempt: 5, 10, 20, ... capped at 5 minutes."""
    return min(5.0 * 2 ** min(retry, 10), MAX_BACKOFF)


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def record(
    kube: Kube, body: Mapping[str, Any], compute: Callable[[Mapping[str, Any]], dict[str, Any]], emit: Emit
) -> dict[str, Any] | None:
    """Write compute(previous status) to the run, unless nothing changed or the run has finished.

    Returns the patch written (None if none). An event goes out when the phase or reason changes.
    """
    meta = _meta(body)
    namespace, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid")
    for _ in range(WRITE_ATTEMPTS):
        previous = body.get("status") or {}
        proposed = compute(previous)
        patch = next_status(previous, proposed)
        if patch is None:
            return None
        try:
            kube.patch_run_status(namespace, name, patch, _meta(body).get("resourceVersion"))
        except NotFound:
            return None  # deleted meanwhile (our copy of it was older than the deletion)
        except Conflict:
            fresh = kube.get_run(namespace, name)
            if fresh is None or _meta(fresh).get("uid") != uid or _meta(fresh).get("deletionTimestamp"):
                return None
            body = fresh
            continue
        if (previous.get("phase"), previous.get("reason")) != (proposed.get("phase"), proposed.get("reason")):
            warn = proposed["phase"] == FAILED or proposed.get("reason") in WARNING_REASONS
            event_type = "Warning" if warn else "Normal"
            emit(body, event_type, proposed.get("reason") or proposed["phase"], proposed.get("message") or "")
        return patch
    raise ApiError(409, "Conflict", f"status of {namespace}/{name} kept changing; will retry")


def _put(kube: Kube, body: Mapping[str, Any], run: RunSpec, state: State, emit: Emit) -> None:
    record(kube, body, lambda prev: state_status(run, state, prev, now()), emit)


def _was_created(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Created" and c.get("status") == "True" for c in status.get("conditions") or [])


def _name_conflict(kind: str, name: str) -> str:
    return (
        f"a {kind} named {name} already exists and does not belong to this run; it was left untouched: "
        f"delete it, or create the run under another name"
    )


ImageCheck = Callable[[str], "str | None"]  # why a trainer image is refused, or None


def reconcile_run(
    kube: Kube,
    body: Mapping[str, Any],
    default_image: str,
    emit: Emit,
    retry: int = 0,
    image_refusal: ImageCheck = lambda image: None,
) -> float | None:
    """Make sure the run's PVC and TFJob exist. Returns seconds until a retry is due, or None when done."""
    status = body.get("status") or {}
    if is_terminal(status):
        return None
    try:
        run = parse_run(body, default_image=default_image)
    except SpecError as err:
        # The CRD rejects these at admission; this catches objects stored under an older schema.
        failed = State(FAILED, INVALID_SPEC, str(err))
        generation = _meta(body).get("generation")
        record(kube, body, lambda prev: unparsed_status(failed, prev, now(), generation), emit)
        return None
    try:
        return _ensure_children(kube, body, run, status, emit, retry, image_refusal(run.image))
    except ResourceMissing:
        message = (
            f"the TFJob CRD (tfjobs.kubeflow.org) is not installed: install the Kubeflow training-operator "
            f"({TRAINING_OPERATOR_INSTALL}); retrying with backoff (up to {int(MAX_BACKOFF)}s)"
        )
        _put(kube, body, run, State(PENDING, TFJOB_CRD_MISSING, message), emit)
        return backoff(retry)
    except ApiError as err:
        if err.retryable or err.status in (401, 403, 409):
            # 403: RBAC may be fixed by an admin; 409: a write race that a retry resolves.
            message = f"API error {err.status} {err.reason}: {err.message[:200]}; retrying with backoff"
            try:
                _put(kube, body, run, State(PENDING, API_UNAVAILABLE, message), emit)
            except ApiError:
                log.warning("could not record status of %s/%s: %s", run.namespace, run.name, err)
            return backoff(retry)
        # The API refused our object for good (e.g. a TFJob admission webhook): say so, stop.
        refused = State(FAILED, INVALID_TFJOB, f"the API refused a child object: {err.message[:300]}")
        _put(kube, body, run, refused, emit)
        return None


# ---- creating the children: observe -> decide (pure) -> act ------------------------------------

UNREAD: Any = object()  # an object not read yet (the PVC of a run that creates its own is read only on a clash)
MAX_OBSERVATIONS = 3  # create raced with something else that often: retry later instead


@dataclass(frozen=True)
class Observed:
    """What exists of the run's children: the object, None (absent) or UNREAD."""

    tfjob: Mapping[str, Any] | None
    pvc: Mapping[str, Any] | None = UNREAD


@dataclass(frozen=True)
class Create:
    """Create the TFJob, and the PVC first when `pvc` (storage first: workers never wait for a volume)."""

    pvc: bool


@dataclass(frozen=True)
class Sync:
    """The TFJob is ours: mirror its status."""

    tfjob: Mapping[str, Any]


@dataclass(frozen=True)
class Record:
    """Write this state; retry after a backoff when `retry`, else stop."""

    state: State
    retry: bool


@dataclass(frozen=True)
class Suspend:
    """The TFJob is ours and its runPolicy.suspend is not what spec.suspend says: set it, then mirror it."""

    tfjob: Mapping[str, Any]
    suspend: bool


Action = Create | Sync | Record | Suspend


def tfjob_suspended(tfjob: Mapping[str, Any]) -> bool:
    return bool(((tfjob.get("spec") or {}).get("runPolicy") or {}).get("suspend"))


def _suspend_action(run: RunSpec, status: Mapping[str, Any], tfjob: Mapping[str, Any]) -> Action:
    """Sync, or Suspend when spec.suspend and the TFJob disagree. A queued run's TFJob is Kueue's to
    suspend; a finished run is left alone."""
    if run.queue_name is not None or is_terminal(status) or tfjob_state(tfjob).phase in TERMINAL:
        return Sync(tfjob)
    if tfjob_suspended(tfjob) != run.suspend:
        return Suspend(tfjob, run.suspend)
    return Sync(tfjob)


def decide(run: RunSpec, status: Mapping[str, Any], seen: Observed, image_refusal: str | None = None) -> Action:
    """The one step that makes the run's children what they should be. Pure.

    image_refusal: why the run's trainer image is not allowed (checked before anything is created;
    a run whose TFJob exists already keeps running)."""
    tfjob = seen.tfjob
    if tfjob is not None:
        if is_owned_by(tfjob, run.uid):
            # Created earlier (a restart, a retry, spec.suspend changed): nothing to create; catch up.
            return _suspend_action(run, status, tfjob)
        return _clash("TFJob", run.tfjob_name, tfjob, run)
    if _was_created(status):
        return Record(State(FAILED, TFJOB_DELETED, _tfjob_deleted_message(run)), retry=False)
    if image_refusal is not None:
        return Record(State(FAILED, IMAGE_NOT_ALLOWED, image_refusal), retry=False)
    pvc = seen.pvc
    if run.creates_pvc:
        if pvc is UNREAD or pvc is None:
            return Create(pvc=True)
        if is_reusable_pvc(pvc, run) and not left_by_earlier_run(pvc, run):
            return Create(pvc=False)  # ours, or retained by an earlier run of this name: mount it
        return _clash("PVC", run.pvc_name, pvc, run)
    if pvc is None or pvc is UNREAD:
        message = (
            f"waiting for PVC {run.pvc_name} in namespace {run.namespace} (spec.storage.claimName): create it, "
            f"or create a run without claimName to get a new PVC"
        )
        return Record(State(PENDING, WAITING_FOR_PVC, message), retry=True)
    if left_by_earlier_run(pvc, run):
        return _wait_for_cleanup("PVC", run.pvc_name)
    return Create(pvc=False)


def _clash(kind: str, name: str, obj: Mapping[str, Any], run: RunSpec) -> Record:
    """A child's name is taken: by an earlier run of ours (wait for the GC), else by a stranger."""
    if left_by_earlier_run(obj, run):
        return _wait_for_cleanup(kind, name)
    return Record(State(FAILED, NAME_CONFLICT, _name_conflict(kind, name)), retry=False)


def _wait_for_cleanup(kind: str, name: str) -> Record:
    message = (
        f"waiting for {kind} {name}, left by an earlier run of the same name or being deleted, to be removed "
        f"by the garbage collector"
    )
    return Record(State(PENDING, WAITING_FOR_CLEANUP, message), retry=True)


def observe(kube: Kube, run: RunSpec, read_pvc: bool) -> Observed:
    """The TFJob, and the PVC when it matters: a claimName run's, or ours after a create clashed."""
    tfjob = kube.get_tfjob(run.namespace, run.tfjob_name)
    if tfjob is not None or (run.creates_pvc and not read_pvc):
        return Observed(tfjob)
    return Observed(tfjob, kube.get_pvc(run.namespace, run.pvc_name))


def _ensure_children(
    kube: Kube,
    body: Mapping[str, Any],
    run: RunSpec,
    status: Mapping[str, Any],
    emit: Emit,
    retry: int,
    image_refusal: str | None,
) -> float | None:
    created: list[str] = []
    read_pvc = False
    for _ in range(MAX_OBSERVATIONS):
        action = decide(run, status, observe(kube, run, read_pvc), image_refusal)
        if isinstance(action, Record):
            _put(kube, body, run, action.state, emit)
            return backoff(retry) if action.retry else None
        if isinstance(action, Sync):
            _announce(kube, body, run, action.tfjob, created, emit)
            return None
        if isinstance(action, Suspend):
            return _set_suspend(kube, body, run, action.suspend, emit, retry)
        pvc_manifest, tfjob_manifest = children(run)
        try:
            if action.pvc and pvc_manifest is not None and not created:
                kube.create(pvc_manifest)
                created.append(f"PVC {run.pvc_name}")
        except AlreadyExists:
            read_pvc = True  # look at the one that is there, then decide again
            continue
        try:
            tfjob = kube.create(tfjob_manifest)
        except AlreadyExists:  # someone else was faster: ours (a concurrent handler) or not
            continue
        created.append(f"TFJob {run.tfjob_name}")
        _announce(kube, body, run, tfjob, created, emit)
        return None
    return backoff(0)  # the world kept changing under us: look again shortly


def _set_suspend(
    kube: Kube, body: Mapping[str, Any], run: RunSpec, suspend: bool, emit: Emit, retry: int
) -> float | None:
    """Patch the TFJob's runPolicy.suspend; a refusal is retried with backoff and said in an event, never a
    reason to fail a run that is still training. Returns the delay before a retry, or None."""
    if suspend:
        try:  # the epoch the workers reach last, while the chief's log can still be read
            read_progress(kube, body, run, _silent)
        except ApiError as err:
            log.info("last progress of %s/%s not read before suspending: %s", run.namespace, run.name, err)
    try:
        tfjob = kube.patch_tfjob_run_policy(run.namespace, run.tfjob_name, suspend=suspend)
    except NotFound:
        return backoff(0)  # gone meanwhile: the next look records TFJobDeleted
    except ApiError as err:
        if err.retryable:
            raise
        emit(body, "Warning", SUSPEND_REFUSED, f"could not set TFJob {run.tfjob_name}'s suspend to {suspend}: "
             f"{err.status} {err.message[:200]}; retrying with backoff")  # fmt: skip
        return backoff(retry)
    what = "suspended TFJob" if suspend else "resumed TFJob"
    emit(body, "Normal", SUSPENDED_EVENT if suspend else RESUMED, f"{what} {run.tfjob_name} (spec.suspend: {suspend})")
    sync_status(kube, body, run, tfjob, emit)  # a stale body is re-read on the write's conflict
    return None


def _announce(
    kube: Kube, body: Mapping[str, Any], run: RunSpec, tfjob: Mapping[str, Any], created: list[str], emit: Emit
) -> None:
    """The status from the TFJob; with one `Created` event for what this call created."""
    if created:
        emit(body, "Normal", CREATED, f"created {' and '.join(created)}")
        # That event also tells of the move to TFJobSubmitted: one event per run fewer, which a
        # burst of runs feels (every event is an API write).
        sync_status(kube, body, run, tfjob, _silent)
    else:
        sync_status(kube, body, run, tfjob, emit)


def _silent(body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
    """An Emit that posts nothing."""


def _tfjob_deleted_message(run: RunSpec) -> str:
    return (
        f"TFJob {run.tfjob_name} was deleted before the run finished; the run cannot continue: "
        f"create a new DistTrainingRun to train again"
    )


HOLDING_PHASES = frozenset({"Running", "Pending"})  # pods that keep their node's CPU and memory


def pods_to_release(tfjob: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """The pods of a failed TFJob that still hold resources while its cleanPodPolicy keeps them.

    Under restartPolicy OnFailure a failed run's workers are not stopped: the kubelet restarts their
    containers with its back-off for as long as the pods exist, holding their requests (a second run
    on a small node stays Pending) and running the trainer again. Their cause is in the run's status
    by then, and every worker's log is on the run's volume.
    """
    if tfjob_state(tfjob).phase != FAILED:
        return []
    policy = ((tfjob.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy")
    if policy != KEEP_PODS:
        return []
    return sorted(_meta(p).get("name", "") for p in pods if (p.get("status") or {}).get("phase") in HOLDING_PHASES)


def sync_status(kube: Kube, body: Mapping[str, Any], run: RunSpec, tfjob: Mapping[str, Any], emit: Emit) -> None:
    """Mirror the TFJob into the run's status; on a finished TFJob read its pods once, for the summary,
    then have the training-operator delete a failed run's pods that still run."""
    pods: list[dict[str, Any]] = []
    if tfjob_state(tfjob).phase in TERMINAL:
        pods = kube.list_job_pods(run.namespace, run.tfjob_name)
    record(kube, body, lambda prev: tfjob_status(run, tfjob, pods, prev, now()), emit)
    if holding := pods_to_release(tfjob, pods):
        try:
            kube.patch_tfjob_run_policy(run.namespace, run.tfjob_name, cleanPodPolicy=RELEASE_RUNNING_PODS)
        except ApiError as err:  # said once; the pods stay as they would have before
            log.warning("could not release the pods of failed run %s/%s: %s", run.namespace, run.name, err)
            return
        emit(body, "Normal", WORKER_PODS_RELEASED,
             f"the run failed: its pods still running ({', '.join(holding)}) are deleted (TFJob cleanPodPolicy "
             f"{RELEASE_RUNNING_PODS}); each worker's log stays on the run's volume, {logs_dir(run)}/")  # fmt: skip


def controller_run(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference of the DistTrainingRun controlling obj, if any."""
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == KIND and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/"):
            return ref
    return None


def has_news(tfjob: Mapping[str, Any]) -> bool:
    """Whether a TFJob's status says more than "submitted", which the run's creator already recorded.

    A TFJob without conditions is one this operator just created (its status is written by the same
    handler, which retries until it is) or one the training-operator has not looked at yet.
    """
    return bool((tfjob.get("status") or {}).get("conditions"))


def tfjob_event(
    kube: Kube,
    event_type: str | None,
    tfjob: Mapping[str, Any],
    default_image: str,
    emit: Emit,
    cached_run: Callable[[str, str], Mapping[str, Any] | None] = lambda namespace, name: None,
) -> None:
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
    namespace = _meta(tfjob).get("namespace", "")
    body = cached_run(namespace, owner["name"])
    if body is None or _meta(body).get("uid") != owner.get("uid"):
        body = kube.get_run(namespace, owner["name"])  # not seen yet, or a newer run of that name
    if body is None or _meta(body).get("uid") != owner.get("uid") or _meta(body).get("deletionTimestamp"):
        return  # the run is gone or going: its children are being garbage-collected
    if is_terminal(body.get("status")):
        return
    try:
        run = parse_run(body, default_image=default_image)
    except SpecError:
        return  # reconcile_run records why
    if event_type == "DELETED":
        _put(kube, body, run, State(FAILED, TFJOB_DELETED, _tfjob_deleted_message(run)), emit)
    else:
        sync_status(kube, body, run, tfjob, emit)


def waits_for_pods(status: Mapping[str, Any] | None) -> bool:
    status = status or {}
    return status.get("phase") == PENDING and status.get("reason") in WAITING_FOR_PODS


RunRef = tuple[str, str, str]  # namespace, name, uid


class WaitingRuns:
    """The runs waiting for their worker pods, and since when (monotonic seconds). In memory only.

    No TFJob event tells of a pod stuck in ImagePullBackOff or Unschedulable (the TFJob stays
    Created), so the operator looks at such a run's pods itself once it has waited `after` seconds.
    Not a kopf timer: kopf puts a finalizer on every object a timer serves, and a run must stay
    deletable while the operator is down.
    """

    def __init__(self, after: float) -> None:
        self.after = after
        self._since: dict[RunRef, float] = {}

    def seen(self, ref: RunRef, status: Mapping[str, Any] | None, at: float) -> None:
        if waits_for_pods(status):
            self._since.setdefault(ref, at)
        else:
            self._since.pop(ref, None)

    def gone(self, ref: RunRef) -> None:
        self._since.pop(ref, None)

    def due(self, at: float) -> list[RunRef]:
        return [ref for ref, since in list(self._since.items()) if at - since >= self.after]


def check_waiting_pods(kube: Kube, ref: RunRef, default_image: str, emit: Emit) -> None:
    """A run still waiting for its worker pods: read them, and say so when they cannot start."""
    namespace, name, uid = ref
    body = kube.get_run(namespace, name)
    if body is None or _meta(body).get("uid") != uid or not waits_for_pods(body.get("status")):
        return
    try:
        run = parse_run(body, default_image=default_image)
    except SpecError:
        return  # reconcile_run records why
    pods = kube.list_job_pods(run.namespace, run.tfjob_name)
    record(kube, body, lambda prev: waiting_status(run, pods, prev, now()), emit)


# ---- progress of running runs ------------------------------------------------------------------

# The end of the chief's log read per poll: an epoch's line is among the last few (Keras prints nothing
# between epochs with verbose=0). No byte limit: the kubelet applies it from the start of the tail, so it
# would cut off the newest lines, the ones wanted.
LOG_TAIL_LINES = 40


class RunningRuns:
    """Each Running run as the watch last saw it (its body, for the status write's resourceVersion)."""

    def __init__(self) -> None:
        self._bodies: dict[RunRef, Mapping[str, Any]] = {}

    def seen(
        self, ref: RunRef, body: Mapping[str, Any], keep: Callable[[Mapping[str, Any]], Mapping[str, Any]] = dict
    ) -> None:
        """keep(body) is what is stored (a copy): made only for a Running run, not on every event of every run."""
        if (body.get("status") or {}).get("phase") == RUNNING:
            self._bodies[ref] = keep(body)
        else:
            self._bodies.pop(ref, None)

    def gone(self, ref: RunRef) -> None:
        self._bodies.pop(ref, None)

    def bodies(self) -> list[Mapping[str, Any]]:
        return list(self._bodies.values())


def poll_progress(kube: Kube, body: Mapping[str, Any], default_image: str, emit: Emit) -> None:
    """A Running run: read the end of its chief's log and write the last finished epoch into status.progress.

    One GET of pods/log per call, and a status write only when an epoch has finished since the last one.
    """
    try:
        run = parse_run(body, default_image=default_image)
    except SpecError:
        return
    read_progress(kube, body, run, emit)


def read_progress(kube: Kube, body: Mapping[str, Any], run: RunSpec, emit: Emit) -> None:
    log_text = kube.pod_log(run.namespace, worker_pod_name(run, 0), CONTAINER_NAME, tail_lines=LOG_TAIL_LINES)
    if log_text is None:
        return
    end = parse_epoch_end(log_text)
    if end is not None:
        record(kube, body, lambda prev: running_progress(prev, end, now()), emit)
