"""The operator's decisions in order: read, decide with the pure core, write. Knows nothing of kopf.

One `Reconciler` per operator process holds the API client, the way events are posted, the settings
and what the operator keeps in memory. Its entry points, all idempotent and safe to run concurrently
for one run:
- reconcile_run: a run was created or the operator restarted: make sure its PVC and TFJob exist.
- tfjob_event: its TFJob changed (or vanished): mirror that into the run's status.
- seen: a watch event of a run: the in-memory trackers below, for the metrics and the two checks.
- check_waiting_pods: a run waiting for its worker pods (none runs yet, or not all): say why they cannot start.
- poll_progress: a Running run: its chief's last finished epoch into status.progress; a chief whose own
  code failed: its TFJob restarts no more; the stall watchdog's check (watchdog.py), with the same read (when each
  run is read: progress_schedule.py).
Each reads the run once into an `ObservedRun` (the body and its parsed spec).

Every status write is a merge patch guarded by the run's resourceVersion, recomputed on conflict,
and skipped once the run has finished, so two writers cannot regress a run and a Succeeded run
stays Succeeded.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeGuard

from dtr_contract.progress import SILENT_SECONDS

from . import metrics, progress_schedule, watchdog
from .api import (
    CONTAINER_NAME,
    GROUP,
    KEEP_PODS,
    KIND,
    NETWORK_POLICY_API_VERSION,
    RELEASE_RUNNING_PODS,
    SUSPENDED_BY,
    SUSPENDED_BY_ANNOTATION,
)
from .builders import (
    build_network_policy,
    children,
    is_owned_by,
    is_reusable_pvc,
    left_by_earlier_run,
    logs_dir,
    owned_by,
    worker_pod_name,
)
from .kube import AlreadyExists, ApiError, Conflict, Kube, NotFound, ResourceMissing
from .policy import Refusal
from .reasons import (
    API_UNAVAILABLE,
    CODE_NOT_FOUND,
    CREATED,
    FAILED,
    IMAGE_NOT_ALLOWED,
    INVALID_SPEC,
    INVALID_TFJOB,
    NAME_CONFLICT,
    PENDING,
    RESUMED,
    RUNNING,
    STALL_ENDED,
    STALL_RESTART,
    STALLED,
    STALLED_CONDITION,
    STALLED_EVENT,
    SUSPEND_REFUSED,
    SUSPENDED_EVENT,
    TERMINAL,
    TFJOB_CRD_MISSING,
    TFJOB_DELETED,
    TFJOB_SUSPENDED,
    USER_CODE_NOT_ALLOWED,
    WAITING_FOR_CLEANUP,
    WAITING_FOR_PVC,
    WARNING_REASONS,
    WORKER_PODS_RELEASED,
)
from .settings import Settings
from .spec import RunSpec, SpecError, WatchdogSpec, parse_run
from .status import (
    State,
    code_status,
    configmap_content,
    epoch_logged_at,
    gone_worker,
    is_terminal,
    kueue_queue,
    logs_an_error,
    next_status,
    parse_epoch_end,
    refused_pods,
    restart_cannot_help,
    running_progress,
    state_status,
    suspended_by_other,
    tfjob_state,
    tfjob_status,
    unparsed_status,
    waiting_status,
    waits_for_pods,
    worker_exits,
)

log = logging.getLogger(__name__)
WAITS_LOG = "run %s/%s waits (attempt %d); the next attempt in %.0f s"  # one line per attempt that ends waiting

MAX_BACKOFF = 300.0
WRITE_ATTEMPTS = 5
TRAINING_OPERATOR_INSTALL = (
    "kubectl apply --server-side -k "
    '"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.4"'
)

# emit(run body, event type "Normal" | "Warning", reason, message): a Kubernetes event on the run.
Emit = Callable[[Mapping[str, Any], str, str, str], None]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Retries:
    """How long the operator keeps at one thing before it hands the run back to kopf for a later attempt."""

    write_attempts: int = WRITE_ATTEMPTS  # status writes that met a conflict, re-read and recomputed
    observations: int = 3  # create raced with something else that often: retry later instead
    max_backoff: float = MAX_BACKOFF

    def backoff(self, retry: int) -> float:
        """Seconds before the next attempt: 5, 10, 20, ... capped at max_backoff (5 minutes)."""
        return min(5.0 * 2 ** min(retry, 10), self.max_backoff)


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


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


def _was_created(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Created" and c.get("status") == "True" for c in status.get("conditions") or [])


def _name_conflict(kind: str, name: str) -> str:
    return (
        f"a {kind} named {name} already exists and does not belong to this run; it was left untouched: "
        f"delete it, or create the run under another name"
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


# ---- creating the children: observe -> decide (pure) -> act ------------------------------------

UNREAD: Any = object()  # an object not read yet (the PVC of a run that creates its own is read only on a clash)


@dataclass(frozen=True)
class Observed:
    """What exists of the run's children, and of its code's ConfigMap: the object, None (absent) or UNREAD
    (the ConfigMap is read only for a run that names one and whose status does not record it yet)."""

    tfjob: Mapping[str, Any] | None
    pvc: Mapping[str, Any] | None = UNREAD
    config_map: Mapping[str, Any] | None = UNREAD


@dataclass(frozen=True)
class Create:
    """Create the TFJob, and the PVC first when `pvc` (storage first: workers never wait for a volume); record
    `code` (status.code) with the status that follows."""

    pvc: bool
    code: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Sync:
    """The TFJob is ours: mirror its status (and record `code` when the status lacks it)."""

    tfjob: Mapping[str, Any]
    code: Mapping[str, str] | None = None


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


def _suspension_left_alone(run: RunSpec, status: Mapping[str, Any], tfjob: Mapping[str, Any]) -> bool:
    """Kueue's TFJob (a queued run), a finished run's, or one the stall watchdog suspended to restart the workers
    (it resumes the TFJob itself, once the old pods are gone)."""
    if run.queue_name is not None or kueue_queue(tfjob) is not None:
        return True
    if is_terminal(status) or tfjob_state(tfjob).phase in TERMINAL:
        return True
    return watchdog.restarting(status) and not run.suspend


def _suspend_action(run: RunSpec, status: Mapping[str, Any], tfjob: Mapping[str, Any],
                    refused: Record | None = None) -> Action:  # fmt: skip
    """Sync, or Suspend when spec.suspend and the TFJob disagree. A queued run's TFJob (spec.queueName, or a
    Kueue label on the TFJob itself) is Kueue's to suspend; a suspension the operator did not make is not its to
    undo (security review M5); a finished run is left alone. A run the settings refuse now (`refused`: an image
    or a request banned since it started) is not resumed: it fails, its TFJob stays suspended."""
    if _suspension_left_alone(run, status, tfjob):
        return Sync(tfjob)
    if tfjob_suspended(tfjob) != run.suspend and not suspended_by_other(tfjob):
        if not run.suspend and refused is not None:
            message = f"{refused.state.message} (checked again on resume: the run stays suspended)"
            return dataclasses.replace(refused, state=dataclasses.replace(refused.state, message=message))
        return Suspend(tfjob, run.suspend)
    return Sync(tfjob)


def decide(run: RunSpec, status: Mapping[str, Any], seen: Observed, image_refusal: str | None = None,
           code_refusal: str | None = None, policy_refusal: Refusal | None = None,
           claim_refusal: Refusal | None = None) -> Action:  # fmt: skip
    """The one step that makes the run's children what they should be. Pure.

    image_refusal, code_refusal, policy_refusal: why the run's trainer image, its code sent in a ConfigMap, or
    what it asks of the cluster (policy.py) is not allowed; claim_refusal: why the PVC seen (spec.storage.claimName)
    is not. Checked before anything is created; a run whose TFJob exists already keeps running, but is not
    resumed with a refused image or request."""
    tfjob = seen.tfjob
    code = _code_record(run, seen.config_map)
    if tfjob is not None:
        if is_owned_by(tfjob, run.uid):
            # Created earlier (a restart, a retry, spec.suspend changed): nothing to create; catch up.
            refused = _refused(image_refusal, None, policy_refusal)
            return _with_code(_suspend_action(run, status, tfjob, refused), code)
        return _clash("TFJob", run.tfjob_name, tfjob, run)
    if _was_created(status):
        return Record(State(FAILED, TFJOB_DELETED, _tfjob_deleted_message(run)), retry=False)
    refused = _refused(image_refusal, code_refusal, policy_refusal) or _code_missing(run, seen.config_map)
    if refused is not None:
        return refused
    if run.creates_pvc:
        return _with_code(_with_own_pvc(run, seen.pvc), code)
    return _with_code(_with_claimed_pvc(run, seen.pvc, claim_refusal), code)


def _refused(image_refusal: str | None, code_refusal: str | None,
             policy_refusal: Refusal | None = None) -> Record | None:  # fmt: skip
    """A run the operator's settings refuse: it fails before anything is created."""
    if image_refusal is not None:
        return Record(State(FAILED, IMAGE_NOT_ALLOWED, image_refusal), retry=False)
    if code_refusal is not None:
        return Record(State(FAILED, USER_CODE_NOT_ALLOWED, code_refusal), retry=False)
    if policy_refusal is not None:
        return Record(State(FAILED, policy_refusal.reason, policy_refusal.message), retry=False)
    return None


def _code_record(run: RunSpec, config_map: Mapping[str, Any] | None) -> dict[str, str] | None:
    """status.code from the run's ConfigMap as read; None when it was not read or lacks the file."""
    code = run.code
    if code is None or code.config_map is None or code.file_key is None or config_map is UNREAD:
        return None
    content = configmap_content(config_map, code.file_key)
    return None if content is None else code_status(code.config_map, code.file_key, content)


def _code_missing(run: RunSpec, config_map: Mapping[str, Any] | None) -> Record | None:
    """Wait (CodeNotFound) while the run's ConfigMap, or its key, is not there: the user may create it next."""
    code = run.code
    if code is None or code.config_map is None or code.file_key is None or config_map is UNREAD:
        return None
    if configmap_content(config_map, code.file_key) is not None:
        return None
    where = f"ConfigMap {code.config_map} in namespace {run.namespace}"
    if config_map is None:
        what = f"waiting for {where} (spec.training.code.configMap) with the key {code.file_key}"
    else:
        keys = sorted({*(config_map.get("data") or {}), *(config_map.get("binaryData") or {})})
        what = (f"waiting for the key {code.file_key} (spec.training.code.key) in {where}, which has "
                f"{', '.join(keys) or 'no keys'}")  # fmt: skip
    message = f"{what}: create it (`dtr submit FILE.py` does), or fix the run; checked again with backoff"
    return Record(State(PENDING, CODE_NOT_FOUND, message), retry=True)


def _with_code(action: Action, code: Mapping[str, str] | None) -> Action:
    """The action, told to record status.code when it creates or mirrors the TFJob and the code was read."""
    if code is not None and isinstance(action, Create | Sync):
        return dataclasses.replace(action, code=code)
    return action


def _with_own_pvc(run: RunSpec, pvc: Mapping[str, Any] | None) -> Action:
    """A run that creates its PVC: create it, or mount the one there if it may (a create clashed)."""
    if pvc is UNREAD or pvc is None:
        return Create(pvc=True)
    if is_reusable_pvc(pvc, run) and not left_by_earlier_run(pvc, run):
        return Create(pvc=False)  # ours, or retained by an earlier run of this name: mount it
    return _clash("PVC", run.pvc_name, pvc, run)


def _with_claimed_pvc(run: RunSpec, pvc: Mapping[str, Any] | None, refusal: Refusal | None = None) -> Action:
    """A run that names its claim (spec.storage.claimName): wait until it exists, then create the TFJob unless the
    policy refuses that PVC (`refusal`)."""
    if pvc is None or pvc is UNREAD:
        message = (
            f"waiting for PVC {run.pvc_name} in namespace {run.namespace} (spec.storage.claimName): create it, "
            f"or create a run without claimName to get a new PVC"
        )
        return Record(State(PENDING, WAITING_FOR_PVC, message), retry=True)
    if left_by_earlier_run(pvc, run):
        return _wait_for_cleanup("PVC", run.pvc_name)
    if refusal is not None:
        return Record(State(FAILED, refusal.reason, refusal.message), retry=False)
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


def network_policy_taken(run: RunSpec, policy: Mapping[str, Any]) -> Record | None:
    """Whether the run's NetworkPolicy name, found taken, stops its TFJob: None when the policy is this run's.
    Not created with another's in place: an earlier run's goes with the GC, and the workers would be open."""
    if is_owned_by(policy, run.uid):
        return None
    return _clash("NetworkPolicy", run.name, policy, run)


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


def _is_live(body: Mapping[str, Any] | None, uid: str | None) -> TypeGuard[Mapping[str, Any]]:
    """Whether body is the run of this uid, not being deleted (its children go with it)."""
    return body is not None and _meta(body).get("uid") == uid and not _meta(body).get("deletionTimestamp")


RunRef = tuple[str, str, str]  # namespace, name, uid
# Pods normally start within seconds: a run still waiting after this long has its pods looked at,
# and again every this long.
POD_CHECK_SECONDS = 20.0


class WaitingRuns:
    """The runs waiting for their worker pods, and since when (monotonic seconds). In memory only.

    No TFJob event tells of a pod stuck in ImagePullBackOff or Unschedulable (the TFJob stays
    Created, or Running once another worker runs), so the operator looks at such a run's pods itself once it
    has waited `after` seconds (status.waits_for_pods).
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


class RetryingRuns:
    """The runs whose reconcile_run asked to be called again (they wait: for their code's ConfigMap, a PVC, the TFJob
    CRD, the API ...), when (monotonic seconds) and with which retry count. In memory only: a restarted operator's
    resume handler finds them waiting again.

    Not kopf's retries (a handler raising TemporaryError): kopf keeps the run's whole body, with its own copy of the
    spec, until the retry, about 0.3 MB for a run of the largest spec (docs/performance.md#operator-memory); this
    keeps a reference.
    """

    def __init__(self) -> None:
        self._due: dict[RunRef, tuple[float, int]] = {}

    def __len__(self) -> int:
        return len(self._due)

    def later(self, ref: RunRef, retry: int, at: float, delay: float) -> None:
        """The attempt numbered `retry` (0: the first) asked for another after `delay` seconds from `at`."""
        self._due[ref] = (at + delay, retry + 1)

    def gone(self, ref: RunRef) -> None:
        self._due.pop(ref, None)

    def take_due(self, at: float) -> list[tuple[RunRef, int]]:
        """The runs due at `at`, the longest due first, with their retry counts; no longer kept (later() again)."""
        due = sorted((when, ref, retry) for ref, (when, retry) in self._due.items() if when <= at)
        for _, ref, _ in due:
            del self._due[ref]
        return [(ref, retry) for _, ref, retry in due]

    def next_due(self) -> float | None:
        return min((when for when, _ in self._due.values()), default=None)


# ---- progress of running runs ------------------------------------------------------------------

# The end of the chief's log read per poll: an epoch's line is among the last few (Keras prints nothing
# between epochs with verbose=0; the trainer's heartbeat, one line per HEARTBEAT_SECONDS, leaves an epoch's line
# in the tail for 13 minutes, many polls). No byte limit: the kubelet applies it from the start of the tail, so it
# would cut off the newest lines, the ones wanted.
LOG_TAIL_LINES = 40


class RunningRuns:
    """Each Running run as the watch last saw it (its body, for the status write's resourceVersion), and when its
    chief's log is read next (progress_schedule.next_read, from its status and when it was last read). Times are UTC
    datetimes, as the status's are. In memory only: a restarted operator reads each run once, then by its epochs."""

    def __init__(self, interval: float | None = None) -> None:
        self.interval = interval or Settings().progress_interval
        self._bodies: dict[RunRef, Mapping[str, Any]] = {}
        self._first: dict[RunRef, datetime] = {}  # when its schedule was first worked out (before its first read)
        self._read: dict[RunRef, datetime] = {}  # when its last read began
        self._due: dict[RunRef, datetime] = {}  # when it is read next; absent: to be worked out from its body
        self._reading: set[RunRef] = set()  # taken by take_due, not read() yet

    def seen(
        self, ref: RunRef, body: Mapping[str, Any], keep: Callable[[Mapping[str, Any]], Mapping[str, Any]] = dict
    ) -> None:
        """keep(body) is what is stored (a copy): made only for a Running run, or one the stall watchdog is restarting
        (the poll resumes it), not on every event of every run. Its next read is worked out again from this body."""
        status = body.get("status") or {}
        if status.get("phase") == RUNNING or watchdog.restarting(status):
            self._bodies[ref] = keep(body)
            self._due.pop(ref, None)
        else:
            self.gone(ref)

    def gone(self, ref: RunRef) -> None:
        for kept in (self._bodies, self._first, self._read, self._due):
            kept.pop(ref, None)

    def bodies(self) -> list[Mapping[str, Any]]:
        return list(self._bodies.values())

    def body(self, ref: RunRef) -> Mapping[str, Any] | None:
        return self._bodies.get(ref)

    def take_due(self, now: datetime) -> list[RunRef]:
        """The runs whose read is due at `now`, the longest due first; each counts as being read until read()."""
        waiting = ((self._due_at(ref, now), ref) for ref in self._bodies if ref not in self._reading)
        taken = [ref for _, ref in sorted(due for due in waiting if due[0] <= now)]
        self._reading.update(taken)
        return taken

    def next_due(self, now: datetime) -> datetime | None:
        """The earliest read due of the runs not being read (None: no such run)."""
        return min((self._due_at(ref, now) for ref in self._bodies if ref not in self._reading), default=None)

    def read(self, ref: RunRef, began: datetime | None, status: Mapping[str, Any] | None) -> None:
        """A read taken by take_due is over: it began at `began` (None: it never did) and left the run's status as
        `status` (None: as its body says). Its next read is worked out from that status, fresher than the body until
        the watch brings the write."""
        self._reading.discard(ref)
        body = self._bodies.get(ref)
        if body is None or began is None:
            return
        self._read[ref] = began
        self._due[ref] = self._plan(ref, body, status if status is not None else body.get("status") or {}, began)

    def _due_at(self, ref: RunRef, now: datetime) -> datetime:
        if ref not in self._due:
            body = self._bodies[ref]
            self._due[ref] = self._plan(ref, body, body.get("status") or {}, now)
        return self._due[ref]

    def _plan(self, ref: RunRef, body: Mapping[str, Any], status: Mapping[str, Any], now: datetime) -> datetime:
        first = self._first.setdefault(ref, now)
        return progress_schedule.next_read(status, _watch_of(body), self._read.get(ref), first, self.interval,
                                           progress_schedule.offset(ref[2]))  # fmt: skip


def _watch_of(body: Mapping[str, Any]) -> WatchdogSpec:
    """The run's spec.watchdog; off for a spec that does not parse (its poll reads nothing either)."""
    try:
        return parse_run(body).watchdog
    except SpecError:
        return WatchdogSpec(enabled=False)


# What a run kept in memory holds (the index of runs, the Running runs): what the TFJob events, the progress
# poll and the status writes read (metadata for the write's guard and for events; spec for the status). The
# placement fields, labels, annotations and managedFields, the bulk of a large run, only make the TFJob, and
# that reads the run's whole body from its own event (docs/performance.md#operator-memory).
KEPT_METADATA = ("name", "namespace", "uid", "resourceVersion", "generation", "deletionTimestamp")
KEPT_SPEC = ("workers", "suspend", "queueName", "training", "storage", "resources", "watchdog")


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the run to keep in memory: KEPT_METADATA, KEPT_SPEC and the status."""
    meta, spec = _meta(body), body.get("spec") or {}
    kept = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {k: meta[k] for k in KEPT_METADATA if k in meta},
        "spec": {k: spec[k] for k in KEPT_SPEC if k in spec},
        "status": body.get("status") or {},
    }
    return copy.deepcopy(kept)


# ---- the shell: one object per operator --------------------------------------------------------

def never_done(body: Mapping[str, Any]) -> bool:
    """An attempt_run `done` that lets every run through."""
    return False


CachedRun = Callable[[str, str], "Mapping[str, Any] | None"]  # (namespace, name) -> the run as last watched


def no_cache(namespace: str, name: str) -> Mapping[str, Any] | None:
    """A CachedRun that has seen nothing: the run is read from the API."""
    return None


@dataclass(eq=False)
class Reconciler:
    """The operator's clients, settings and memory; one per operator process, made at its startup.

    emit posts a Kubernetes event on a run; image_refusal and code_refusal say why a trainer image, or code sent
    with a run in a ConfigMap, is not allowed; run_refusal and claim_refusal why what a run asks of the cluster, or
    the PVC it names, is not (policy.py). The
    trackers are in memory only (a restarted operator rebuilds them from its watch of runs): the phases and
    figures of runs for the metrics, the runs waiting for their pods and the Running runs for the two
    background checks, and the progress refusals already said.
    """

    kube: Kube
    emit: Emit
    default_image: str
    image_refusal: ImageCheck = any_image
    code_refusal: CodeCheck = any_code
    run_refusal: PolicyCheck = any_request
    claim_refusal: ClaimCheck = any_claim
    retries: Retries = Retries()
    waiting: WaitingRuns = field(default_factory=lambda: WaitingRuns(after=POD_CHECK_SECONDS))
    retrying: RetryingRuns = field(default_factory=RetryingRuns)
    runs: dict[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)  # (namespace, name) -> slim(run)
    running: RunningRuns = field(default_factory=RunningRuns)
    phases: metrics.PhaseTracker = field(default_factory=metrics.PhaseTracker)
    figures: metrics.RunFigures = field(default_factory=metrics.RunFigures)
    progress_refusals: set[tuple[str | None, str | None, int]] = field(default_factory=set)  # said once each

    def _parsed(self, body: Mapping[str, Any]) -> ObservedRun | None:
        """The run, or None when its spec does not parse (reconcile_run records why)."""
        try:
            return ObservedRun.parse(body, self.default_image)
        except SpecError:
            return None

    # ---- status writes --------------------------------------------------------------------------

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
        `compute` reads when `reread` is given: whoever wrote meanwhile may have seen a newer TFJob.
        """
        meta = _meta(body)
        namespace, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid")
        for _ in range(self.retries.write_attempts):
            previous = body.get("status") or {}
            proposed = compute(previous)
            patch = next_status(previous, proposed)
            if patch is None:
                return None
            try:
                self.kube.patch_run_status(namespace, name, patch, _meta(body).get("resourceVersion"))
            except NotFound:
                return None  # deleted meanwhile (our copy of it was older than the deletion)
            except Conflict:
                fresh = self.kube.get_run(namespace, name)
                if not _is_live(fresh, uid):
                    return None
                body = fresh
                if reread is not None:
                    reread()
                continue
            if not quiet:
                self._say_change(body, previous, proposed)
            return patch
        raise ApiError(409, "Conflict", f"status of {namespace}/{name} kept changing; will retry")

    def _say_change(self, body: Mapping[str, Any], previous: Mapping[str, Any], proposed: Mapping[str, Any]) -> None:
        """An event when the phase or reason changes: a warning for a failure or a reason that needs a person."""
        if (previous.get("phase"), previous.get("reason")) == (proposed.get("phase"), proposed.get("reason")):
            return
        warn = proposed["phase"] == FAILED or proposed.get("reason") in WARNING_REASONS
        event_type = "Warning" if warn else "Normal"
        self.emit(body, event_type, proposed.get("reason") or proposed["phase"], proposed.get("message") or "")

    def _put(self, run: ObservedRun, state: State) -> None:
        self.record(run.body, lambda prev: state_status(run.spec, state, prev, now()))

    # ---- a run created, resumed, or its spec.suspend changed ----------------------------------------

    def reconcile_run(self, body: Mapping[str, Any], retry: int = 0) -> float | None:
        """Make sure the run's PVC and TFJob exist. Returns seconds until a retry is due, or None when done."""
        if is_terminal(body.get("status")):
            return None
        try:
            run = ObservedRun.parse(body, self.default_image)
        except SpecError as err:
            # The CRD rejects most at admission; this catches objects stored under an older schema, and a spec
            # that contradicts itself beyond what the schema states (spec.never_runs).
            failed = State(FAILED, INVALID_SPEC, str(err))
            generation = _meta(body).get("generation")
            self.record(body, lambda prev: unparsed_status(failed, prev, now(), generation))
            return None
        try:
            return self._ensure_children(run, retry)
        except ResourceMissing:
            message = (
                f"the TFJob CRD (tfjobs.kubeflow.org) is not installed: install the Kubeflow training-operator "
                f"({TRAINING_OPERATOR_INSTALL}); retrying with backoff (up to {int(self.retries.max_backoff)}s)"
            )
            self._put(run, State(PENDING, TFJOB_CRD_MISSING, message))
            return self.retries.backoff(retry)
        except ApiError as err:
            return self._api_refused(run, err, retry)

    def _api_refused(self, run: ObservedRun, err: ApiError, retry: int) -> float | None:
        """Say why the API refused; retry what may pass later, give up on what never will."""
        if err.retryable or err.status in (401, 403, 409):
            # 403: RBAC may be fixed by an admin; 409: a write race that a retry resolves.
            message = f"API error {err.status} {err.reason}: {err.message[:200]}; retrying with backoff"
            try:
                self._put(run, State(PENDING, API_UNAVAILABLE, message))
            except ApiError:
                log.warning("could not record status of %s/%s: %s", run.spec.namespace, run.spec.name, err)
            return self.retries.backoff(retry)
        # The API refused our object for good (e.g. a TFJob admission webhook): say so, stop.
        refused = State(FAILED, INVALID_TFJOB, f"the API refused a child object: {err.message[:300]}")
        self._put(run, refused)
        return None

    def observe(self, run: RunSpec, read_pvc: bool, read_code: bool = False) -> Observed:
        """The TFJob, and the PVC when it matters: a claimName run's, or ours after a create clashed; the code's
        ConfigMap when read_code."""
        tfjob = self.kube.get_tfjob(run.namespace, run.tfjob_name)
        config_map = UNREAD
        if read_code and run.code is not None and run.code.config_map is not None:
            config_map = self.kube.get_configmap(run.namespace, run.code.config_map)
        if tfjob is not None or (run.creates_pvc and not read_pvc):
            return Observed(tfjob, config_map=config_map)
        return Observed(tfjob, self.kube.get_pvc(run.namespace, run.pvc_name), config_map)

    def _ensure_children(self, run: ObservedRun, retry: int) -> float | None:
        spec = run.spec
        created: list[str] = []
        read_pvc = False
        refusal = self.image_refusal(spec.image)
        code_refusal = self.code_refusal(spec.code.config_map if spec.code else None)
        read_code = code_refusal is None and "code" not in run.status  # read until status.code says it
        request_refusal = self.run_refusal(spec)
        for _ in range(self.retries.observations):
            seen = self.observe(spec, read_pvc, read_code)
            action = self._guarded(spec, decide(spec, run.status, seen, refusal, code_refusal, request_refusal,
                                                 self._claim(spec, seen)))
            if not isinstance(action, Create):
                return self._act(run, action, created, retry)
            pvc_manifest, tfjob_manifest = children(spec)
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
        return self.retries.backoff(0)  # the world kept changing under us: look again shortly

    def _claim(self, spec: RunSpec, seen: Observed) -> Refusal | None:
        """Why the run may not mount the claim it names, once that PVC has been read."""
        claimed = not spec.creates_pvc and isinstance(seen.pvc, Mapping)
        return self.claim_refusal(spec, seen.pvc) if claimed else None

    def _guarded(self, run: RunSpec, action: Action) -> Action:
        """A Create after the run's NetworkPolicy exists (before the PVC and TFJob: no worker ever listens
        unguarded), or the Record that stops it when the name is taken by a policy not this run's; a 409
        ApiError (retried) when the policy went away in between. Any other action as it is."""
        if not isinstance(action, Create):
            return action
        # Not in `created`: that list says what the status announces, and that the PVC is made.
        if self._create(owned_by(build_network_policy(run), run), f"NetworkPolicy {run.name}", []):
            return action
        policy = self.kube.get(NETWORK_POLICY_API_VERSION, "NetworkPolicy", run.namespace, run.name)
        if policy is None:
            raise ApiError(409, "Conflict", f"NetworkPolicy {run.namespace}/{run.name} was deleted; will retry")
        return network_policy_taken(run, policy) or action

    def _create(self, manifest: Mapping[str, Any], what: str, created: list[str]) -> Mapping[str, Any] | None:
        """Create the object and add `what` to `created`; None when its name is taken."""
        try:
            obj = self.kube.create(manifest)
        except AlreadyExists:
            return None
        created.append(what)
        return obj

    def _act(self, run: ObservedRun, action: Sync | Record | Suspend, created: list[str], retry: int) -> float | None:
        """Carry out a decision that creates nothing. Returns the delay before a retry, or None."""
        if isinstance(action, Record):
            self._put(run, action.state)
            return self.retries.backoff(retry) if action.retry else None
        if isinstance(action, Sync):
            self._announce(run, action.tfjob, created, action.code)
            return None
        return self._set_suspend(run, action.suspend, retry)

    def _set_suspend(self, run: ObservedRun, suspend: bool, retry: int) -> float | None:
        """Patch the TFJob's runPolicy.suspend; a refusal is retried with backoff and said in an event, never a
        reason to fail a run that is still training. Returns the delay before a retry, or None."""
        spec = run.spec
        if suspend:
            try:  # the epoch the workers reach last, while the chief's log can still be read
                self.read_progress(run, quiet=True)
            except (ApiError, ValueError) as err:  # never a reason not to suspend
                log.info("last progress of %s/%s not read before suspending: %s", spec.namespace, spec.name, err)
        try:
            # The record that the operator suspended it goes in the same write: only that suspension is its to undo.
            mark = {SUSPENDED_BY_ANNOTATION: SUSPENDED_BY if suspend else None}
            tfjob = self.kube.patch_tfjob_run_policy(spec.namespace, spec.tfjob_name, annotations=mark, suspend=suspend)
        except NotFound:
            return self.retries.backoff(0)  # gone meanwhile: the next look records TFJobDeleted
        except ApiError as err:
            if err.retryable:
                raise
            self.emit(run.body, "Warning", SUSPEND_REFUSED, f"could not set TFJob {spec.tfjob_name}'s suspend to "
                      f"{suspend}: {err.status} {err.message[:200]}; retrying with backoff")  # fmt: skip
            return self.retries.backoff(retry)
        what = "suspended TFJob" if suspend else "resumed TFJob"
        self.emit(run.body, "Normal", SUSPENDED_EVENT if suspend else RESUMED,
                  f"{what} {spec.tfjob_name} (spec.suspend: {suspend})")  # fmt: skip
        self.sync_status(run, tfjob)  # a stale body is re-read on the write's conflict
        return None

    def _announce(
        self, run: ObservedRun, tfjob: Mapping[str, Any], created: list[str], code: Mapping[str, str] | None = None
    ) -> None:
        """The status from the TFJob (and status.code); with one `Created` event for what this call created."""
        if created:
            self.emit(run.body, "Normal", CREATED, f"created {' and '.join(created)}")
            # That event also tells of the move to TFJobSubmitted: one event per run fewer, which a
            # burst of runs feels (every event is an API write).
            self.sync_status(run, tfjob, quiet=True, code=code)
        else:
            self.sync_status(run, tfjob, code=code)

    def sync_status(
        self, run: ObservedRun, tfjob: Mapping[str, Any], quiet: bool = False, code: Mapping[str, str] | None = None
    ) -> None:
        """Mirror the TFJob into the run's status, with status.code when given (later writes leave it: they are
        merge patches without it); on a finished TFJob read its pods once, for the summary, then have the
        training-operator delete a failed run's pods that still run. quiet: no events."""
        spec = run.spec
        pods: list[dict[str, Any]] = []
        latest = [tfjob]

        def read_pods_when_finished() -> None:
            # Once, for the summary: a finished run's status is never written again.
            if not pods and (phase := tfjob_state(latest[0]).phase) in TERMINAL:
                pods.extend(self.kube.list_job_pods(spec.namespace, spec.tfjob_name))
                if phase == FAILED:
                    pods.extend(self._gone_workers(spec, pods))

        read_pods_when_finished()
        recorded = {"code": dict(code)} if code else {}
        at = now()

        def mirrored(prev: Mapping[str, Any]) -> dict[str, Any]:
            return watchdog.settled({**tfjob_status(spec, latest[0], pods, prev, at), **recorded}, at, spec.generation)

        def reread() -> None:
            # A creator's copy is the TFJob as created; the training-operator's Created may already be
            # in the run's status (the TFJob handler wrote it), and writing this copy would take it back.
            # The TFJob read now may have finished since: then its pods hold the chief's metrics.
            latest[0] = self.kube.get_tfjob(spec.namespace, spec.tfjob_name) or latest[0]
            read_pods_when_finished()

        self.record(run.body, mirrored, quiet, reread)
        if holding := pods_to_release(latest[0], pods):
            self._release(run, holding, quiet)

    def _release(self, run: ObservedRun, holding: list[str], quiet: bool) -> None:
        spec = run.spec
        try:
            self.kube.patch_tfjob_run_policy(spec.namespace, spec.tfjob_name, cleanPodPolicy=RELEASE_RUNNING_PODS)
        except ApiError as err:  # said once; the pods stay as they would have before
            log.warning("could not release the pods of failed run %s/%s: %s", spec.namespace, spec.name, err)
            return
        if not quiet:
            self.emit(run.body, "Normal", WORKER_PODS_RELEASED,
                      f"the run failed: its pods still running ({', '.join(holding)}) are deleted (TFJob "
                      f"cleanPodPolicy {RELEASE_RUNNING_PODS}); each worker's log stays on the run's volume, "
                      f"{logs_dir(spec)}/")  # fmt: skip

    # ---- a TFJob changed --------------------------------------------------------------------------

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
        run = self._owner(_meta(tfjob).get("namespace", ""), owner, cached_run)
        if run is None:
            return
        if event_type == "DELETED":
            self._put(run, State(FAILED, TFJOB_DELETED, _tfjob_deleted_message(run.spec)))
        elif watchdog.restarting(run.status) and not run.spec.suspend and tfjob_state(tfjob).reason == TFJOB_SUSPENDED:
            self._resume_after_stall(run)
        else:
            self.sync_status(run, tfjob)

    def _owner(self, namespace: str, owner: Mapping[str, Any], cached_run: CachedRun) -> ObservedRun | None:
        """The run an ownerReference names, if it is still there, not being deleted and not finished."""
        body = cached_run(namespace, owner["name"])
        if body is None or _meta(body).get("uid") != owner.get("uid"):
            body = self.kube.get_run(namespace, owner["name"])  # not seen yet, or a newer run of that name
        if not _is_live(body, owner.get("uid")):
            return None  # the run is gone or going: its children are being garbage-collected
        if is_terminal(body.get("status")):
            return None
        return self._parsed(body)

    # ---- the watch of runs, and the two background checks it feeds ---------------------------------

    def seen(self, event_type: str | None, body: Mapping[str, Any], at: float) -> None:
        """A watch event of a run (at: monotonic seconds): keep the trackers up to date."""
        meta = _meta(body)
        namespace, name, uid = meta.get("namespace") or "", meta.get("name") or "", meta.get("uid") or ""
        ref = (namespace, name, uid)
        if event_type == "DELETED":
            self.phases.gone(uid)
            self.figures.gone(namespace, name)
            self.waiting.gone(ref)
            self.running.gone(ref)
            self.retrying.gone(ref)
            if _meta(self.runs.get((namespace, name)) or {}).get("uid") == uid:
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
            meta = _meta(body)
            namespace, name = meta.get("namespace") or "", meta.get("name") or ""
            log.info(WAITS_LOG, namespace, name, retry + 1, delay)
            self.retrying.later((namespace, name, meta.get("uid") or ""), retry, clock(), delay)

    def attempt_run(
        self, ref: RunRef, retry: int, clock: Callable[[], float],
        done: Callable[[Mapping[str, Any]], bool] = never_done,
    ) -> None:  # fmt: skip
        """A run's attempt: kopf's create/resume/update of it, or a waiting run's next one (self.retrying). The run is
        read from the API, then reconcile_run: kopf's events carry only a slim copy (watch_slim.py). A run gone,
        replaced or being deleted, or already `done` as read, is dropped; an API error on the read, or an unexpected
        error, is retried with the backoff."""
        namespace, name, uid = ref
        try:
            body = self.kube.get_run(namespace, name)
        except ApiError as err:
            log.warning("run %s/%s not read for its next attempt: %s", namespace, name, err)
            self.retrying.later(ref, retry, clock(), self.retries.backoff(retry))
            return
        if not _is_live(body, uid) or done(body):
            return
        try:
            self.run_waits(body, retry, clock)
        except Exception:  # a bug: said, and tried again with the backoff, as kopf retried a handler that raised
            log.exception("run %s/%s: its next attempt failed", namespace, name)
            self.retrying.later(ref, retry, clock(), self.retries.backoff(retry))

    def check_waiting_pods(self, ref: RunRef) -> None:
        """A run still waiting for its worker pods (none runs yet, or not all): read them, and say so when they
        cannot start. An API error is logged: the next round tries again."""
        try:
            self._check_pods(ref)
        except ApiError as err:
            log.warning("pods of run %s/%s not checked: %s", ref[0], ref[1], err)

    def _gone_workers(self, spec: RunSpec, pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The failed run's worker pods already deleted, as their events remember them (status.gone_worker). An
        API error leaves them out: the failure is still told, without them."""
        present = {_meta(p).get("name") for p in pods}
        gone = []
        for name in (worker_pod_name(spec, i) for i in range(spec.workers)):
            if name in present:
                continue
            try:
                events = self.kube.object_events(spec.namespace, "Pod", name)
            except ApiError as err:
                log.warning("events of pod %s/%s not read: %s", spec.namespace, name, err)
                continue
            if (pod := gone_worker(name, events)) is not None:
                gone.append(pod)
        return gone

    def _check_pods(self, ref: RunRef) -> None:
        namespace, name, uid = ref
        body = self.kube.get_run(namespace, name)
        if body is None or _meta(body).get("uid") != uid or not waits_for_pods(body.get("status")):
            return
        run = self._parsed(body)
        if run is None:
            return
        pods = self.kube.list_job_pods(run.spec.namespace, run.spec.tfjob_name)
        refused: list[str] = []
        if len(pods) < run.spec.workers:  # pods missing: the API server may have refused them (review L4)
            refused = refused_pods(self.kube.object_events(run.spec.namespace, "TFJob", run.spec.tfjob_name))
        self.record(run.body, lambda prev: waiting_status(run.spec, pods, prev, now(), refused))

    def poll_progress(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """A Running run: read the end of its chief's log and write the last finished epoch into status.progress.

        One GET of pods/log per call, and a status write only when an epoch has finished since the last one.
        An API error is logged (a refusal once per run and status): the next read tries again. Returns the status as
        the read left it, for the next read's schedule (None when the spec does not parse).
        """
        run = self._parsed(body)
        if run is None:
            return None
        if watchdog.restarting(run.status):
            self._resume_polled(run)
            return run.status
        status = run.status
        try:
            status = self.read_progress(run)
        except ApiError as err:
            self._progress_not_read(run.spec, err)
        try:
            self.watch_stall(run, status)
        except ApiError as err:
            log.warning("stall check of run %s/%s not done: %s", run.spec.namespace, run.spec.name, err)
        return status

    def _progress_not_read(self, run: RunSpec, err: ApiError) -> None:
        key = (run.namespace, run.name, err.status)
        if err.status in (401, 403) and key not in self.progress_refusals:
            self.progress_refusals.add(key)
            log.warning("progress of run %s/%s cannot be read: %s (the operator's RBAC needs get on "
                        "pods/log)", key[0], key[1], err)  # fmt: skip
        else:
            log.debug("progress of run %s/%s not read: %s", key[0], key[1], err)

    def read_progress(self, run: ObservedRun, quiet: bool = False) -> Mapping[str, Any]:
        """The chief's last finished epoch into status.progress and the watchdog's record; returns the status as
        this call left it."""
        spec = run.spec
        chief = worker_pod_name(spec, 0)
        log_text = self.kube.pod_log(spec.namespace, chief, CONTAINER_NAME, tail_lines=LOG_TAIL_LINES,
                                     timestamps=True)  # fmt: skip
        if log_text is None:
            return run.status
        end = parse_epoch_end(log_text, spec.training.epochs)
        status = run.status
        if end is not None:
            at = now()
            # The watchdog's record keeps when the epoch ended, as the runtime logged it (not when this read saw it,
            # up to a read's spacing later): its mean epoch time, and when the next read is due, are then exact. Never
            # after now (a node clock ahead of ours); both strings are of one format, so they compare as times.
            ended = min(epoch_logged_at(log_text, spec.training.epochs) or at, at)
            written = self.record(run.body, lambda prev: watchdog.with_epoch(running_progress(prev, end, at),
                                                                             end.epoch, ended), quiet)  # fmt: skip
            status = {**run.status, **(written or {})}
        if logs_an_error(log_text):  # also after finished epochs: a loss diverges in any epoch
            self.restart_no_more(run)
        return status

    # ---- the stall watchdog (watchdog.py) -------------------------------------------------------------

    def watch_stall(self, run: ObservedRun, status: Mapping[str, Any]) -> None:
        """The watchdog's step for a Running run: no API call unless it flags, clears or reminds of a stall."""
        spec, at = run.spec, now()
        step = watchdog.decide(watchdog.effective(spec), status, at)
        if isinstance(step, watchdog.Remind):
            message = step.message
            self.record(run.body, lambda prev: watchdog.reminded_status(prev, message), quiet=True)
        elif isinstance(step, watchdog.Clear):
            cleared = self.record(run.body, lambda prev: watchdog.cleared_status(prev, at, spec.generation), True)
            if cleared is not None:
                message = next(c["message"] for c in cleared["conditions"] if c["type"] == STALLED_CONDITION)
                self.emit(run.body, "Normal", STALL_ENDED, message)
        elif isinstance(step, watchdog.Flag):
            self._flag_stall(run, step, at)

    def _silent_workers(self, run: RunSpec) -> list[str]:
        """The worker pods whose log has no line for the last SILENT_SECONDS (the trainer's heartbeat keeps a live
        one's going): one small read per worker, only for a run just found stalled."""
        logs = {pod: self.kube.pod_log(run.namespace, pod, CONTAINER_NAME, tail_lines=1,
                                       since_seconds=SILENT_SECONDS)
                for pod in (worker_pod_name(run, i) for i in range(run.workers))}  # fmt: skip
        return watchdog.silent_workers(logs)

    def _flag_stall(self, run: ObservedRun, flag: watchdog.Flag, at: str) -> None:
        """Say the stall (condition, message, event), then restart the workers or fail the run if it asks."""
        spec = run.spec
        silent = self._silent_workers(spec)
        message = (f"{watchdog.stall_message(flag.verdict, silent, spec.workers)}; "
                   f"{watchdog.then_message(flag, watchdog.effective(spec))}")  # fmt: skip
        if flag.fail:
            self._fail_stalled(run, flag, message, at)
            return
        flagged = self.record(run.body, lambda prev: watchdog.flagged_status(prev, flag, message, at,
                                                                             spec.generation), quiet=True)  # fmt: skip
        if flagged is None:
            return  # said already (a concurrent poll), or the run finished meanwhile
        self.emit(run.body, "Warning", STALLED_EVENT, message)
        if flag.then == watchdog.RESTART:
            self._suspend_for_restart(run, flag)

    def _suspend_for_restart(self, run: ObservedRun, flag: watchdog.Flag) -> None:
        """Suspend the TFJob (as spec.suspend does: its pods go); its next event that says so resumes it, and the
        new workers resume from their backup."""
        spec = run.spec
        mark = {SUSPENDED_BY_ANNOTATION: SUSPENDED_BY}
        self.kube.patch_tfjob_run_policy(spec.namespace, spec.tfjob_name, annotations=mark, suspend=True)
        self.emit(run.body, "Warning", STALL_RESTART,
                  f"suspended TFJob {spec.tfjob_name} to restart its workers; it is resumed once its pods are gone, "
                  f"and they resume from their backup (restart {flag.restart} of {spec.watchdog.max_restarts})")

    def _resume_polled(self, run: ObservedRun) -> None:
        """The progress poll of a run being restarted: resume its TFJob once it says it is suspended."""
        spec = run.spec
        try:
            tfjob = self.kube.get_tfjob(spec.namespace, spec.tfjob_name)
            if tfjob is not None and not spec.suspend and tfjob_state(tfjob).reason == TFJOB_SUSPENDED:
                self._resume_after_stall(run)
        except ApiError as err:
            log.warning("run %s/%s: its restart not resumed yet: %s", spec.namespace, spec.name, err)

    def _resume_after_stall(self, run: ObservedRun) -> None:
        """The TFJob suspended for a restart says it is: resume it once its old pods are gone (the training-operator
        counts a pod that its deletion failed, the frozen worker's, against the resumed TFJob, which then fails:
        seen on the real node); until then the progress poll comes back (RunningRuns keeps the run)."""
        spec = run.spec
        if self.kube.list_job_pods(spec.namespace, spec.tfjob_name):
            return
        tfjob = self.kube.patch_tfjob_run_policy(spec.namespace, spec.tfjob_name,
                                                 annotations={SUSPENDED_BY_ANNOTATION: None}, suspend=False)
        self.record(run.body, watchdog.restarted_status, quiet=True)
        fresh = self.kube.get_run(spec.namespace, spec.name)
        if _is_live(fresh, spec.uid) and (parsed := self._parsed(fresh)) is not None:
            self.sync_status(parsed, tfjob)

    def _fail_stalled(self, run: ObservedRun, flag: watchdog.Flag, message: str, at: str) -> None:
        """No restart left: the run fails (reason Stalled, its Warning event) and its TFJob is suspended, so that
        its pods go (a stalled worker never ends by itself)."""
        spec = run.spec
        state = State(FAILED, STALLED, message, created=True)

        def failed(prev: Mapping[str, Any]) -> dict[str, Any]:
            flagged = watchdog.flagged_status(prev, flag, message, at, spec.generation)
            return {**state_status(spec, state, flagged, at), watchdog.RECORD: flagged[watchdog.RECORD]}

        if self.record(run.body, failed) is None:
            return
        try:
            self.kube.patch_tfjob_run_policy(spec.namespace, spec.tfjob_name,
                                             annotations={SUSPENDED_BY_ANNOTATION: SUSPENDED_BY}, suspend=True)
        except ApiError as err:
            log.warning("run %s/%s failed stalled, but its TFJob %s was not suspended: %s", spec.namespace,
                        spec.name, spec.tfjob_name, err)  # fmt: skip

    def restart_no_more(self, run: ObservedRun) -> None:
        """When the chief's own code failed (exit code 8) or its loss diverged (9), permanent failures
        (status.restart_cannot_help), have its TFJob fail at the next restart.

        Under restartPolicy OnFailure the kubelet restarts it anyway, with a growing back-off, until the TFJob's
        backoffLimit: a minute and more of the same error (a diverged run resumes from its backup and diverges
        again). With backoffLimit 0 the training-operator fails the TFJob once any worker has restarted, and the
        run fails as for any failed TFJob: UserCodeError or Diverged, its pods released. An API error is logged:
        the backoffLimit the run asked for still ends it.
        """
        spec = run.spec
        try:
            pod = self.kube.get_pod(spec.namespace, worker_pod_name(spec, 0))
            code = next((e.code for e in worker_exits([pod] if pod else []) if restart_cannot_help(e.code)), None)
            if code is None:
                return
            self.kube.patch_tfjob_run_policy(spec.namespace, spec.tfjob_name, backoffLimit=0)
        except ApiError as err:
            log.warning("run %s/%s: its chief failed for good, but TFJob %s was not told to stop restarting: %s",
                        spec.namespace, spec.name, spec.tfjob_name, err)  # fmt: skip
            return
        log.info("run %s/%s: its chief failed for good (exit code %d); TFJob %s fails at the next restart "
                 "(backoffLimit 0)", spec.namespace, spec.name, code, spec.tfjob_name)  # fmt: skip
