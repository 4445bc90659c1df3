"""The one step that makes a run's children what they should be: what exists (observed) -> one action. Pure.

`decide` returns a small frozen value (Create, Sync, Record, Suspend; FailClosed: policy_not_held) that children.py
carries out; every branch is a
unit test (tests/unit/operator/test_reconcile_decide.py). The other pure questions the reconciler asks of what it read
live here too: whose a TFJob is, whether its status says anything new, which pods a failed TFJob still holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import disruption, watchdog
from ..api import GROUP, KEEP_PODS, KIND, NETWORK_POLICY_KIND, PDB_KIND
from ..builders import is_owned_by, is_reusable_pvc, left_by_earlier_run, pinned_code_sha256
from ..policy import Refusal
from ..reasons import (
    CODE_NOT_FOUND,
    FAILED,
    IMAGE_NOT_ALLOWED,
    NAME_CONFLICT,
    NETWORK_POLICY_NOT_HELD,
    PENDING,
    SUSPENDED,
    TERMINAL,
    TFJOB_DELETED,
    USER_CODE_NOT_ALLOWED,
    WAITING_FOR_CLEANUP,
    WAITING_FOR_PVC,
)
from ..spec import RunSpec
from ..status.code import code_record, code_status, configmap_content
from ..status.state import State, is_terminal, kueue_queue, suspended_by_other, tfjob_state


def _was_created(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Created" and c.get("status") == "True" for c in status.get("conditions") or [])


def _name_conflict(kind: str, name: str) -> str:
    return (
        f"a {kind} named {name} already exists and does not belong to this run; it was left untouched: "
        f"delete it, or create the run under another name"
    )


# ---- creating the children: observe -> decide (pure) -> act ------------------------------------

UNREAD: Any = object()  # an object not read yet (the PVC of a run that creates its own is read only on a clash)


@dataclass(frozen=True)
class Observed:
    """What exists of the run's children, and of its code's ConfigMap: the object, None (absent) or UNREAD
    (the ConfigMap is read only for a run that names one and whose status does not record it yet)."""

    tfjob: Mapping[str, Any] | None
    pvc: Mapping[str, Any] | None = UNREAD
    config_map: Mapping[str, Any] | None = UNREAD
    pods: Sequence[Mapping[str, Any]] = ()  # a TFJob's being deleted, read only then: what it waits for
    at: str = ""  # when those pods were read (how long a resumed run has waited: disruption.waited_too_long)


@dataclass(frozen=True)
class Create:
    """Create the TFJob, and the PVC first when `pvc` (storage first: workers never wait for a volume); record
    `code` (status.code) with the status that follows."""

    pvc: bool
    code: Mapping[str, str] | None = None

    @property
    def code_sha256(self) -> str | None:
        """The digest the TFJob has its workers check (builders.code_args): the one status.code records with it."""
        return self.code["sha256"] if self.code else None


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


@dataclass(frozen=True)
class FailClosed:
    """The run's NetworkPolicy cannot be held while its TFJob exists: suspend the TFJob when it runs (`suspend`),
    write `state`, and try again with backoff."""

    state: State
    suspend: bool


Action = Create | Sync | Record | Suspend | FailClosed


def is_going(obj: Mapping[str, Any]) -> bool:
    """Whether the object is being deleted (a foreground deletion waits for its dependents)."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


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
    code = _code_record(run, seen)
    if tfjob is not None:
        if is_owned_by(tfjob, run.uid):
            return _with_code(_owned(run, status, seen, _refused(image_refusal, None, policy_refusal)), code)
        return _clash("TFJob", run.tfjob_name, tfjob, run)
    if _was_created(status) and disruption.resuming_from(status) is None:  # resuming: its failed TFJob is gone
        return Record(State(FAILED, TFJOB_DELETED, tfjob_deleted_message(run)), retry=False)
    refused = _refused(image_refusal, code_refusal, policy_refusal) or _code_missing(run, seen.config_map)
    if refused is not None:
        return refused
    code = code or _recorded_code(run, status)  # the TFJob is made with the digest the status says, if it says one
    if not run.has_volume:
        return _with_code(Create(pvc=False), code)
    if run.creates_pvc:
        return _with_code(_with_own_pvc(run, seen.pvc), code)
    return _with_code(_with_claimed_pvc(run, seen.pvc, claim_refusal), code)


def _owned(run: RunSpec, status: Mapping[str, Any], seen: Observed, refused: Record | None) -> Action:
    """The run's own TFJob, created earlier (a restart, a retry, spec.suspend changed): nothing to create; catch up.
    The failed one a run resumes from, being deleted: wait for its pods to go (disruption.py)."""
    tfjob = seen.tfjob or {}
    if is_going(tfjob) and disruption.resuming_from(status) == (tfjob.get("metadata") or {}).get("uid"):
        state = disruption.waiting_for_pods(run, status, seen.pods, seen.at)
        return Record(state, retry=state.phase != FAILED)
    return _suspend_action(run, status, tfjob, refused)


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


def _code_record(run: RunSpec, seen: Observed) -> dict[str, str] | None:
    """status.code: the digest the run's TFJob has its workers check, when it has one (what runs, whatever the
    ConfigMap holds now: a status write lost after the create is caught up with it), else the file's as just read
    from the ConfigMap; None when the ConfigMap was not read or lacks the file."""
    code = run.code
    if code is None or code.config_map is None or code.file_key is None:
        return None
    if seen.tfjob is not None and (pinned := pinned_code_sha256(seen.tfjob)) is not None:
        return code_record(code.config_map, code.file_key, pinned)
    if seen.config_map is UNREAD:
        return None
    content = configmap_content(seen.config_map, code.file_key)
    return None if content is None else code_status(code.config_map, code.file_key, content)


def _recorded_code(run: RunSpec, status: Mapping[str, Any]) -> dict[str, str] | None:
    """status.code as the status holds it for the run's file (the ConfigMap is not read again once it says it)."""
    recorded, code = status.get("code"), run.code
    if code is None or code.config_map is None or code.file_key is None or not isinstance(recorded, Mapping):
        return None
    sha256 = recorded.get("sha256")
    same_file = (recorded.get("configMap"), recorded.get("key")) == (code.config_map, code.file_key)
    return code_record(code.config_map, code.file_key, sha256) if same_file and isinstance(sha256, str) else None


def _code_missing(run: RunSpec, config_map: Mapping[str, Any] | None) -> Record | None:
    """Wait (CodeNotFound) while the run's ConfigMap, or its key, is not there: the user may create it next.

    One message for both, naming nothing the ConfigMap holds: a run may name any ConfigMap of its namespace, and
    its author may be one who cannot read ConfigMaps (review R13: the key names were a teammate's)."""
    code = run.code
    if code is None or code.config_map is None or code.file_key is None or config_map is UNREAD:
        return None
    if configmap_content(config_map, code.file_key) is not None:
        return None
    message = (
        f"waiting for ConfigMap {code.config_map} (spec.training.code.configMap) in namespace {run.namespace} "
        f"with the key {code.file_key} (spec.training.code.key): not found, or it has no key {code.file_key}; "
        "create it (`dtr submit FILE.py` does), or fix the run; checked again with backoff"
    )
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
    return _clash(NETWORK_POLICY_KIND, run.name, policy, run)


def budget_taken(run: RunSpec, budget: Mapping[str, Any]) -> Record | None:
    """The same for the run's PodDisruptionBudget (spec.disruption.protect): another's never protects its workers."""
    if is_owned_by(budget, run.uid):
        return None
    return _clash(PDB_KIND, run.name, budget, run)


def policy_not_held(run: RunSpec, status: Mapping[str, Any], tfjob: Mapping[str, Any], why: str) -> FailClosed | None:
    """What a run does when its NetworkPolicy cannot be held (netpolicy.py; `why`, in words): its workers must not serve
    TensorFlow's unauthenticated port unguarded, so its TFJob is suspended (the operator's own suspension, which it
    undoes once the policy is back: the workers continue from their backup). None when nothing runs or will:
    a finished run, or one suspended by its spec (its policy is held again when it is resumed)."""
    if is_terminal(status) or tfjob_state(tfjob).phase in TERMINAL:
        return None
    if run.suspend and tfjob_suspended(tfjob):
        return None
    message = (f"{why}; TFJob {run.tfjob_name} is suspended so that no worker serves TensorFlow's port without the "
               f"run's NetworkPolicy; tried again with backoff, and resumed once the policy is back (the workers "
               f"continue from their backup)")  # fmt: skip
    return FailClosed(State(SUSPENDED, NETWORK_POLICY_NOT_HELD, message, created=True), not tfjob_suspended(tfjob))


def tfjob_deleted_message(run: RunSpec) -> str:
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
    holding = (p for p in pods if (p.get("status") or {}).get("phase") in HOLDING_PHASES)
    return sorted((p.get("metadata") or {}).get("name", "") for p in holding)


def controller_run(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference of the DistTrainingRun controlling obj, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == KIND and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/"):
            return ref
    return None


def has_news(tfjob: Mapping[str, Any]) -> bool:
    """Whether a TFJob's status says more than "submitted", which the run's creator already recorded.

    A TFJob without conditions is one this operator just created (its status is written by the same
    handler, which retries until it is) or one the training-operator has not looked at yet.
    """
    return bool((tfjob.get("status") or {}).get("conditions"))
