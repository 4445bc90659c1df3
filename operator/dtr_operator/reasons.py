"""Every reason the operator gives, in a run's status and in its events: the one place a reason is declared.

Pure data. status/ and reconcile/ use the names below; docs/gen.py renders docs/api.md's tables of phases,
reasons and events from REASONS (`make docs`; a unit test fails when they are stale). A reason's meaning is
written for that table (markdown). To add one: declare it here with its phase (or kind), warning or not, and what
it means, then use the name.
"""

from __future__ import annotations

from dataclasses import dataclass

from dtr_contract import env, exits, progress, summary
from dtr_contract.container import PORT

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
SUSPENDED = "Suspended"  # spec.suspend is true: no worker pods, progress kept for the resume
PHASES = (PENDING, SUSPENDED, RUNNING, SUCCEEDED, FAILED)
TERMINAL = (SUCCEEDED, FAILED)
# Always all five, each named like the phase in which it holds but Created (the children exist).
CONDITION_TYPES = ("Created", "Running", "Suspended", "Succeeded", "Failed")
# Set only by the stall watchdog (watchdog.py), once it has something to say; absent: never judged stalled.
STALLED_CONDITION = "Stalled"
# Set only once another NetworkPolicy of the namespace was found admitting the workers' TensorFlow port from
# elsewhere (netpolicy.py); absent: none ever found.
ISOLATION_CONDITION = "IsolationWeakened"

STATUS = "status"  # status.reason and the conditions' reason; an event when the run moves to it
CONDITION = "condition"  # a condition's reason only
EVENT = "event"  # an event's reason only


@dataclass(frozen=True)
class Reason:
    name: str
    kind: str  # STATUS, CONDITION or EVENT
    phase: str | None  # the run's phase with this reason (STATUS only)
    warning: bool  # its event is a Warning (else Normal)
    meaning: str  # markdown, one table cell of docs/api.md


_declared: list[Reason] = []


def _declare(reason: Reason) -> str:
    _declared.append(reason)
    return reason.name


def _status(name: str, phase: str, warning: bool, meaning: str) -> str:
    return _declare(Reason(name, STATUS, phase, warning, meaning))


def _event(name: str, warning: bool, meaning: str) -> str:
    return _declare(Reason(name, EVENT, None, warning, meaning))


_NETWORK = "operator.md#a-runs-network-what-reaches-its-workers-and-what-they-reach"


# ---- the run's status (docs/api.md#phases-and-reasons) ------------------------------------------

TFJOB_SUBMITTED = _status("TFJobSubmitted", PENDING, False,
    "TFJob created; the training-operator has not reported on it yet")  # fmt: skip
TFJOB_CREATED = _status("TFJobCreated", PENDING, False,
    "the training-operator created the worker pods; waiting for them to run")  # fmt: skip
WORKERS_NOT_STARTING = _status("WorkerPodsNotStarting", PENDING, True,
    "a worker pod cannot start by itself: its container waits with `ErrImagePull`, `ImagePullBackOff`, "
    "`InvalidImageName`, `ErrImageNeverPull`, `CreateContainerConfigError`, `CreateContainerError` or "
    "`RunContainerError`, or the scheduler finds no node for it (`Unschedulable`), or the API server refuses "
    "to create it (a quota, an unknown PriorityClass, Pod Security admission: the TFJob's `FailedCreatePod` "
    "event, quoted). The message names each such "
    "worker and the kubelet's or scheduler's words: `worker pods cannot start: worker mnist-cnn-worker-0 cannot"
    ' start: ErrImagePull: failed to pull image "localhost/distml/trainer:0.2.0" ...`. Looked at 20 s after the run '
    "starts waiting and every 20 s after; back to `TFJobCreated` once the cause is gone, `Running` once the "
    "pods run. The run stays Pending (the kubelet keeps retrying): fix the image or the resources, or delete "
    "the run")  # fmt: skip
TFJOB_SUSPENDED = _status("TFJobSuspended", PENDING, False,
    "the TFJob is suspended; when not by this operator (a queue manager, an admin), the message says so, and "
    "the operator leaves it suspended ([scheduling.md](scheduling.md#suspend-and-resume))")  # fmt: skip
WAITING_FOR_PVC = _status("WaitingForPVC", PENDING, True,
    '`storage.claimName` does not exist: "waiting for PVC <claim> in namespace <ns> ..."; checked again with '
    "backoff (5 s, 10 s, 20 s ... up to 5 min)")  # fmt: skip
WAITING_FOR_CLEANUP = _status("WaitingForCleanup", PENDING, True,
    "a TFJob or PVC with the child's name is left by an earlier run of the same name (deleted, garbage "
    "collection pending) or is being deleted; retried with backoff until it is gone, then created anew")  # fmt: skip
CODE_NOT_FOUND = _status("CodeNotFound", PENDING, True,
    "`spec.training.code.configMap` does not exist in the run's namespace, or lacks the key "
    "`spec.training.code.key`: the message names both, one message for either (`waiting for ConfigMap <name> ... in "
    "namespace <ns> with the key <key> ...: not found, or it has no key <key>`; never the keys the ConfigMap has, "
    "which its run's author may not be allowed to read); nothing is "
    "created; checked again with backoff (5 s, 10 s, 20 s ... up to 5 min), so the ConfigMap may come after the "
    "run ([training.code](#your-own-model-trainingcode))")  # fmt: skip
TFJOB_CRD_MISSING = _status("TFJobCRDMissing", PENDING, True,
    "the TFJob CRD (`tfjobs.kubeflow.org`) is not installed, or not served yet (not Established: just created, or "
    "its names clash with another CRD's); the message says how to install the training-operator; retried with the "
    "same backoff")  # fmt: skip
API_UNAVAILABLE = _status("APIUnavailable", PENDING, True,
    "an API call failed in a way that may pass (5xx, timeout, 403); retried with backoff")  # fmt: skip
QUEUED = _status("Queued", PENDING, False,
    "`spec.queueName` is set and Kueue has not admitted the run yet (its TFJob stays suspended); the message "
    "names the LocalQueue")  # fmt: skip
PREEMPTED = _status("Preempted", SUSPENDED, False,
    "Kueue took back a run's admission after it had started (a run of a higher WorkloadPriorityClass needed "
    "the quota): its TFJob is suspended and the worker pods go. The message names the LocalQueue and the last "
    "finished epoch; when Kueue admits the run again its workers continue from that epoch "
    "([scheduling.md](scheduling.md#priority-and-preemption))")  # fmt: skip
RESUMING = _status("Resuming", PENDING, False,
    "`spec.suspend` went back to `false`; the TFJob is being unsuspended and its pods made again")  # fmt: skip
RESUMING_AFTER_DISRUPTION = _status("ResumingAfterDisruption", PENDING, True,
    "the TFJob failed only because Kubernetes took workers away (a drain or another eviction, a node lost or "
    "declared out of service, a preemption) or because their peers lost them, and `spec.disruption.resume` is "
    "`true` with resumes left: the operator deletes the failed TFJob, waits for its pods to go, and creates it "
    "again; the workers continue from the last finished epoch. The message names the workers, their nodes and "
    "why, the epoch and the attempt; `status.disruptions` keeps each "
    "([clusters.md](clusters.md#when-kubernetes-takes-a-worker-away))")  # fmt: skip
RESUME_TIMED_OUT = _status("ResumeTimedOut", FAILED, True,
    "a run resumed after a disruption whose workers did not start again within `spec.disruption.waitSeconds`: "
    "the node of its ReadWriteOnce volume (and backup) did not come back, a pod of a lost node never went, or no "
    "node has room; the message names the nodes the run lost and what the workers wait for "
    "([clusters.md](clusters.md#when-kubernetes-takes-a-worker-away))")  # fmt: skip
SUSPENDING = _status("Suspending", SUSPENDED, False,
    "`spec.suspend` is `true`; the TFJob's pods are going")  # fmt: skip
RUN_SUSPENDED = _status("RunSuspended", SUSPENDED, False,
    "`spec.suspend` is `true` and the TFJob is suspended: no worker pods; the message gives the last finished "
    "epoch and the command that resumes the run")  # fmt: skip
NETWORK_POLICY_NOT_HELD = _status("NetworkPolicyNotHeld", SUSPENDED, True,
    "the run's NetworkPolicy was deleted or changed and the operator could not make it again (the API refused the "
    "write, or a policy of the run's name is not the run's): the TFJob is suspended, so that no worker serves "
    "TensorFlow's unauthenticated port unguarded, and the message says why. The operator tries again with backoff "
    "(5 s, 10 s, 20 s ... up to 5 min) and, once the policy is back, resumes the TFJob; the workers continue from "
    f"their backup ([operator.md]({_NETWORK}))")  # fmt: skip
TFJOB_RUNNING = _status("TFJobRunning", RUNNING, False,
    "the TFJob is running")  # fmt: skip
WORKERS_NOT_ALL_RUNNING = _status("WorkersNotAllRunning", RUNNING, True,
    "the TFJob runs (it does once one worker runs) but fewer workers run than the run has (`workersReady` a/b, "
    "a < b), and a missing worker cannot start or be scheduled, as for `WorkerPodsNotStarting`; training waits "
    "for every worker, so no epoch finishes meanwhile. The message says how many run and names each such worker "
    "with the kubelet's or scheduler's words: `1 of 2 workers run; training waits for all "
    "(MultiWorkerMirroredStrategy): worker mnist-cnn-worker-1 cannot be scheduled: 0/2 nodes are available: 1 "
    "node(s) didn't match pod anti-affinity rules, 1 node(s) had volume node affinity conflict ...`. Looked at as "
    "for `WorkerPodsNotStarting` (20 s after the run is short of workers, and every 20 s after); the phase stays "
    "Running, and the TFJob's own updates keep the reason while workers are missing; back to `TFJobRunning` once "
    "every worker runs or the cause is gone")  # fmt: skip
TFJOB_RESTARTING = _status("TFJobRestarting", RUNNING, False,
    "a worker is being restarted (it resumes from its backup)")  # fmt: skip
TRAINING_SUCCEEDED = _status("TrainingSucceeded", SUCCEEDED, False,
    "all workers succeeded; `metrics`, `headline`, `model` set; message \"accuracy A, model exported to P\" "
    "(the headline metric's name and value: `mae 0.1234, ...` for a run whose headline is mae)")  # fmt: skip
METRICS_UNAVAILABLE = _status("MetricsUnavailable", SUCCEEDED, False,
    "all workers succeeded but the chief's termination message is missing, not JSON, or lacks the headline "
    f"metric (`{summary.METRIC}`; in a summary without one, `{summary.ACCURACY}`, else `{summary.LOSS}`) or "
    f"`{summary.MODEL_PATH}`: the message says which; no `metrics`/`model` (or only what could be read)")  # fmt: skip
TFJOB_FAILED = _status("TFJobFailed", FAILED, True,
    "the TFJob failed (a worker failed with no restart left, backoff limit, deadline); the message carries the "
    "TFJob's message and names each failed worker once, with its exit code and last log line, by its most "
    f"telling exit: its own error (exit < {exits.RETRYABLE_FROM}) or an OOM kill before a kill at the backoff "
    "limit (143), read from the container's current and previous state; peers that only lost that worker "
    f"({exits.PEER_LOST}) last: `worker "
    "mnist-cnn-worker-1 exited with code 2: ValueError: ...`. A worker Kubernetes took away comes first, with its "
    "node and why (its pod's DisruptionTarget condition; a pod already deleted, as on a node tainted out-of-service, "
    "by its events): `worker digits-worker-1 on node dtr-n2 evicted through the "
    "Eviction API (kubectl drain, or another eviction)`, or `... deleted by the taint manager: its node has a "
    "NoExecute taint (NotReady, unreachable or out of service)` "
    "([clusters.md](clusters.md#when-kubernetes-takes-a-worker-away)). "
    "The reason is the TFJob's own failure reason when it gives one")  # fmt: skip
USER_CODE_ERROR = _status("UserCodeError", FAILED, True,
    f"a worker exited with the user-code exit code ({exits.USER_CODE}): the run's own code "
    "(`spec.training.code`) does not import, lacks `build_model` or `load_data`, returns the wrong thing, its "
    "model does not fit its data, or it raised. The message is that worker's one line, naming the file, line "
    "and error, then the worker: `my_model.py:12 in load_data: ValueError: ... (worker wine-worker-0, exit "
    f"code {exits.USER_CODE})`. Permanent: change the code and create a new run. Under `restartPolicy: "
    "OnFailure` the operator, seeing the error in the chief's log or its exit code in the chief's pod (the last "
    "container's, once the kubelet has restarted it), sets the TFJob's backoffLimit to 0, so it "
    "fails at the next restart rather than after `backoffLimit` restarts (an error in the first two epochs is "
    "seen within `--progress-interval`, a later one at the next read of the chief's log, within a minute: "
    "[operator.md](operator.md#how-it-reconciles), step 4)")  # fmt: skip
DIVERGED = _status("Diverged", FAILED, True,
    f"a worker exited with the divergence exit code ({exits.DIVERGED}): the training loss became NaN or infinite, "
    "and the trainer stopped every worker at that step rather than train on until a deadline "
    "([trainer.md](trainer.md#a-diverged-loss)). The message is that worker's line, naming the epoch, then the "
    "worker: `training diverged: the loss became nan in epoch 2/10 (by step 50/117, learning rate 5); lower the "
    f"learning rate, or look for NaN or infinite values in the data (worker mnist-cnn-worker-0, exit code "
    f"{exits.DIVERGED})`. No model is exported. Permanent: training on from the last backup would diverge "
    "again, so a restarted worker stops at once with the same line, and under `restartPolicy: OnFailure` the TFJob "
    "fails at the next restart after the operator sees the line, as for `UserCodeError`; create a new run with a "
    "lower learning rate")  # fmt: skip
CODE_CHANGED = _status("CodeChanged", FAILED, True,
    f"a worker exited with the code-changed exit code ({exits.CODE_CHANGED}): the run's code file is not the one "
    "whose SHA-256 the operator recorded in `status.code` before it created the TFJob (and passed to every worker, "
    "which checks the file before it runs any of it). Its ConfigMap was replaced (deleted and created again, or "
    "edited) after the run started, and a worker (re)started with the new file. The message is that worker's line, "
    "with both digests: `wine.py: the code changed: its sha256 is <now>, not <recorded> as recorded ... (worker "
    f"wine-worker-0, exit code {exits.CODE_CHANGED})`. None of the new file ran. Permanent: the file stays what it "
    "is, so under `restartPolicy: OnFailure` the TFJob fails at the next restart after the operator sees the line, "
    "as for `UserCodeError`; create a new run to train the new code "
    "([own-model.md](own-model.md#sending-your-code-with-a-run))")  # fmt: skip
MODEL_NAME_OWNED = _status("ModelNameOwned", FAILED, True,
    f"a worker exited with the model-name-owned exit code ({exits.MODEL_NAME_OWNED}): another run owns the model "
    "name this run would publish a version of (`spec.export.modelName` on its volume, or `spec.export.storageUri`; "
    "the first run to export there owns it) and does not list this run in its `spec.export.allowedPublishers`. "
    "Checked by every worker before training, so nothing was trained or published. The message is that worker's "
    "line, naming the owner: `model digits-cnn: its versions belong to run alice, whose "
    "spec.export.allowedPublishers does not list this run: choose another spec.export.modelName, or have a run "
    f"named alice list bob there (worker bob-worker-0, exit code {exits.MODEL_NAME_OWNED})`. "
    "Permanent, as for `UserCodeError`; create a new run with another model name, or once the owner lists it "
    "([models.md](models.md#who-may-publish-a-model))")  # fmt: skip
_STORE = "([object-storage.md](object-storage.md#when-it-fails))"
_PREFLIGHT = ("the trainer's check of its `s3://` dataset, before training (one listing with a client of its own: "
              "TensorFlow's own s3:// lists nothing, silently, in these cases)")
_PERMANENT = ("Permanent: the TFJob fails at the next restart after the operator sees the line, as for "
              "`UserCodeError`; fix it, then create a new run")
OBJECT_STORE_KEYS_REFUSED = _status("ObjectStoreKeysRefused", FAILED, True,
    f"{_PREFLIGHT} found the store refusing the run's keys (`InvalidAccessKeyId`, `SignatureDoesNotMatch` or "
    f"`AccessDenied`; exit code {exits.OBJECT_STORE_KEYS}): the Secret of `spec.objectStore.credentialsSecret` holds "
    "wrong keys, or keys that may not list or read the bucket. The message is the worker's line, naming the URI, "
    f"the endpoint and S3's code, never a key. {_PERMANENT} {_STORE}")  # fmt: skip
BUCKET_NOT_FOUND = _status("BucketNotFound", FAILED, True,
    f"{_PREFLIGHT} found no bucket of that name at the endpoint (`NoSuchBucket`; exit code "
    f"{exits.OBJECT_STORE_NO_BUCKET}). {_PERMANENT} {_STORE}")  # fmt: skip
DATASET_NOT_FOUND = _status("DatasetNotFound", FAILED, True,
    f"{_PREFLIGHT} found no object at the dataset's key and none under it as a prefix (exit code "
    f"{exits.OBJECT_STORE_NO_DATA}). {_PERMANENT} {_STORE}")  # fmt: skip
OBJECT_STORE_REFUSED = _status("ObjectStoreRefused", FAILED, True,
    f"{_PREFLIGHT} was refused for another reason (exit code {exits.OBJECT_STORE_REFUSED}): an `https` endpoint whose "
    "certificate no CA the worker has signed (give it in `spec.objectStore.caConfigMap`), a region the store does "
    f"not serve, another S3 error; the message names S3's code. {_PERMANENT} {_STORE}")  # fmt: skip
OBJECT_STORE_UNREACHABLE = _status("ObjectStoreUnreachable", FAILED, True,
    f"{_PREFLIGHT} got no answer from the endpoint, or only 5xx, after the client's bounded tries with back-off "
    f"(`{env.AWS_MAX_ATTEMPTS}`; exit code {exits.OBJECT_STORE_UNREACHABLE}, retryable: the workers are restarted, "
    "under `restartPolicy` OnFailure or ExitCode, until the store answers or `backoffLimit` is spent; then the run "
    f"fails with this reason and the worker's line) {_STORE}")  # fmt: skip
# The trainer's exit code -> the run's reason (status/compute.py).
OBJECT_STORE_FAILURES = {
    exits.OBJECT_STORE_KEYS: OBJECT_STORE_KEYS_REFUSED, exits.OBJECT_STORE_NO_BUCKET: BUCKET_NOT_FOUND,
    exits.OBJECT_STORE_NO_DATA: DATASET_NOT_FOUND, exits.OBJECT_STORE_REFUSED: OBJECT_STORE_REFUSED,
    exits.OBJECT_STORE_UNREACHABLE: OBJECT_STORE_UNREACHABLE,
}  # fmt: skip
IMAGE_NOT_ALLOWED = _status("ImageNotAllowed", FAILED, True,
    "`spec.image` is neither the operator's default trainer image nor matched by its `--allowed-images` "
    "patterns (both compared as normalized references), or is not a valid image reference; nothing was created "
    "(also checked again when a suspended run is resumed). The message names the flag and the patterns "
    "([operator.md](operator.md#image-references-and-the-allow-list))")  # fmt: skip
USER_CODE_NOT_ALLOWED = _status("UserCodeNotAllowed", FAILED, True,
    "`spec.training.code.configMap` is set but the operator runs with `--user-code=disallowed`: code sent with "
    "a run is turned off on this cluster; nothing was created. The message names the flag "
    "([operator.md](operator.md#what-a-run-lets-its-author-do)); code in an allowed image "
    "(`spec.training.code.module`) still runs")  # fmt: skip
POD_LABEL_NOT_ALLOWED = _status("PodLabelNotAllowed", FAILED, True,
    "a key of `spec.podLabels` is not matched by the operator's `--allowed-pod-labels` (none by default), or is "
    "one no flag allows (add-ons' and Kubernetes' own); nothing was created. The message names the key and the "
    "flag ([operator.md](operator.md#what-a-run-lets-its-author-do))")  # fmt: skip
POD_ANNOTATION_NOT_ALLOWED = _status("PodAnnotationNotAllowed", FAILED, True,
    "a key of `spec.podAnnotations` is not matched by the operator's `--allowed-pod-annotations` (none by "
    "default), or is one no flag allows (for example `sidecar.istio.io/*`); nothing was created. The message "
    "names the key and the flag ([operator.md](operator.md#what-a-run-lets-its-author-do))")  # fmt: skip
PRIORITY_CLASS_NOT_ALLOWED = _status("PriorityClassNotAllowed", FAILED, True,
    "`spec.priorityClassName`, `spec.schedulingPolicy.priorityClass` or `spec.workloadPriorityClass` is not "
    "matched by the operator's "
    "`--allowed-priority-classes` (none by default; a `system-*` class, or the operator's own `dtr-operator`, only "
    "by its exact name); nothing was "
    "created ([operator.md](operator.md#what-a-run-lets-its-author-do))")  # fmt: skip
TOLERATION_NOT_ALLOWED = _status("TolerationNotAllowed", FAILED, True,
    "a toleration in `spec.tolerations` tolerates a control-plane or node-role taint, a cordoned node's, or "
    "(without a key) every taint, and the operator's `--allowed-toleration-keys` does not allow it; nothing was "
    "created ([operator.md](operator.md#what-a-run-lets-its-author-do))")  # fmt: skip
NODE_SELECTOR_NOT_ALLOWED = _status("NodeSelectorNotAllowed", FAILED, True,
    "`spec.nodeSelector` or a `spec.affinity.nodeAffinity` term selects nodes by a node-role key "
    "(`node-role.kubernetes.io/*`: control-plane or dedicated nodes) that the operator's "
    "`--allowed-toleration-keys` does not allow; nothing was created "
    "([operator.md](operator.md#what-a-run-lets-its-author-do))")  # fmt: skip
AFFINITY_NOT_ALLOWED = _status("AffinityNotAllowed", FAILED, True,
    "a pod (anti-)affinity term in `spec.affinity` selects pods of other namespaces (`namespaces`, "
    "`namespaceSelector`) and the operator runs with `--cross-namespace-affinity=refused` (the default), or a "
    "required anti-affinity term spreads over a topology other than `kubernetes.io/hostname` that "
    "`--allowed-anti-affinity-topologies` does not allow; nothing was created "
    "([operator.md](operator.md#what-a-run-lets-its-author-do))")  # fmt: skip
STORAGE_TOO_LARGE = _status("StorageTooLarge", FAILED, True,
    "`spec.storage.size`, or `spec.training.datasetSource.maxSize`, is more than the operator's `--max-storage`; "
    "nothing was created "
    "([operator.md](operator.md#what-a-run-lets-its-author-do))")  # fmt: skip
STORAGE_CLASS_NOT_ALLOWED = _status("StorageClassNotAllowed", FAILED, True,
    "`spec.storage.storageClassName` is not matched by the operator's `--allowed-storage-classes` (none by "
    "default: the cluster's default class only); nothing was created "
    "([operator.md](operator.md#what-a-run-lets-its-author-do))")  # fmt: skip
OBJECT_STORE_NOT_ALLOWED = _status("ObjectStoreNotAllowed", FAILED, True,
    "`spec.objectStore.endpoint` is not one the operator's `--allowed-object-stores` lists (none by default: no "
    "run may name an object store until an admin lists it); nothing was created. The message names the endpoint, "
    "the flag and the endpoints it lists "
    "([object-storage.md](object-storage.md#endpoints-and-the-allow-list))")  # fmt: skip
CLAIM_NOT_ALLOWED = _status("ClaimNotAllowed", FAILED, True,
    "the PVC named in `spec.storage.claimName` does not carry the label that opens it to runs "
    "([operator.md](operator.md#what-a-run-lets-its-author-do)) and the operator runs with `--claims=labelled` "
    "(the default); nothing was created, the PVC is untouched. The message names the label and the flag")  # fmt: skip
NAME_CONFLICT = _status("NameConflict", FAILED, True,
    "a TFJob or PVC with the child's name exists and does not belong to this run (left untouched)")  # fmt: skip
TFJOB_DELETED = _status("TFJobDeleted", FAILED, True,
    "the run's TFJob was deleted before the run finished (also noticed after an operator restart); not "
    "re-created: create a new run")  # fmt: skip
STALLED = _status("Stalled", FAILED, True,
    "the run stalled (no epoch finished for `stallFactor` x its mean epoch time, and at least `minStallSeconds`) "
    "with `spec.watchdog.onStall: Restart` and its `maxRestarts` restarts used up; its TFJob is suspended so its "
    "pods go ([below](#stalled-runs))")  # fmt: skip
INVALID_SPEC = _status("InvalidSpec", FAILED, True,
    "the stored spec cannot be read (only possible for objects stored under an older schema), or it contradicts "
    "itself in a way the schema cannot state, so the run could never run all its workers: a required pod "
    "anti-affinity term over `kubernetes.io/hostname` that matches the run's own workers with more than one "
    "worker and a volume the operator creates `ReadWriteOnce` "
    "([storage and anti-affinity](#storage-and-pod-anti-affinity)); nothing was created. `dtr render` and `dtr run` "
    "refuse such a spec with the same message")  # fmt: skip
INVALID_TFJOB = _status("InvalidTFJob", FAILED, True,
    "the API refused the TFJob or PVC for good (e.g. an admission webhook; 4xx other than 401/403/409)")  # fmt: skip
CHILDREN_CREATED = _declare(Reason("ChildrenCreated", CONDITION, None, False,
    "the `Created` condition's reason once the run's TFJob (and the PVC it creates) exist"))  # fmt: skip
NO_EPOCH_PROGRESS = _declare(Reason("NoEpochProgress", CONDITION, None, False,
    "the `Stalled` condition's reason while it holds: `no epoch finished for 312 s (5 x mean epoch 62 s); silent: "
    "worker-1`; the run stays Running and its message says it is stalled "
    "([below](#stalled-runs))"))  # fmt: skip
EPOCH_FINISHED = _declare(Reason("EpochFinished", CONDITION, None, False,
    "the `Stalled` condition's reason once an epoch has finished again after a stall"))  # fmt: skip
OTHER_POLICY_ADMITS = _declare(Reason("OtherPolicyAdmits", CONDITION, None, False,
    "the `IsolationWeakened` condition's reason while it holds: another NetworkPolicy of the namespace selects the "
    f"run's workers and admits TensorFlow's port (TCP {PORT}) from elsewhere, which adds to the run's own policy; the "
    f"message names each and from where: `NetworkPolicy allow-monitoring admits TCP {PORT} from pods of the "
    "namespaces its namespaceSelector picks` "
    f"([operator.md]({_NETWORK}))"))  # fmt: skip
POD_SECURITY_NOT_ENFORCED = _declare(Reason("PodSecurityNotEnforced", CONDITION, None, False,
    "the `IsolationWeakened` condition's reason while no other policy widens the run's but its namespace enforces "
    "no Pod Security level that keeps host-network pods out (label `pod-security.kubernetes.io/enforce` not "
    "`baseline` or `restricted`): such a pod reaches the workers past any NetworkPolicy "
    "([operator.md](operator.md#pod-security-a-precondition))"))  # fmt: skip
NO_OTHER_POLICY = _declare(Reason("NoOtherPolicyAdmits", CONDITION, None, False,
    "the `IsolationWeakened` condition's reason once no other NetworkPolicy admits the workers' port any more and "
    "the namespace enforces Pod Security"))  # fmt: skip

# ---- events only (docs/api.md#events) -----------------------------------------------------------

CREATED = _event("Created", False,
    "`created PVC <name>-data and TFJob <name>` (only what this operator created). It also stands for the move to "
    "`TFJobSubmitted` that follows at once, which gets no event of its own (`TFJobSubmitted` is posted only when "
    "the TFJob was found rather than created, e.g. after a restart)")  # fmt: skip
SUSPENDED_EVENT = _event("Suspended", False, "`spec.suspend` became `true`: the TFJob's `runPolicy.suspend` is set")
RESUMED = _event("Resumed", False, "`spec.suspend` became `false`: the TFJob's `runPolicy.suspend` is cleared")
SUSPEND_REFUSED = _event("SuspendRefused", True,
    "the API refused to change the TFJob's `runPolicy.suspend`; retried with backoff, and a run that trains keeps "
    "training")  # fmt: skip
WORKER_PODS_RELEASED = _event("WorkerPodsReleased", False,
    "the run failed and its pods that still ran are deleted (TFJob `cleanPodPolicy: Running`); each worker's log "
    "stays on the run's volume")  # fmt: skip
STALLED_EVENT = _event("Stalled", True,
    "the stall watchdog found no epoch finished for too long: the message is the `Stalled` condition's, naming the "
    "silent workers (those whose log shows no line, not even the trainer's heartbeat, for the last "
    f"{progress.SILENT_SECONDS} s)")  # fmt: skip
STALL_RESTART = _event("StallRestart", True,
    "`spec.watchdog.onStall: Restart`: the TFJob of a stalled run is suspended (its pods go) and resumed once the "
    "training-operator says it is suspended; the new workers resume from their backup (`restart N of M`)")  # fmt: skip
NETWORK_POLICY_RESTORED = _event("NetworkPolicyRestored", True,
    "the run's NetworkPolicy was deleted, or its spec or labels changed, and the operator made it again as it "
    "makes it (the message says which); someone with rights on NetworkPolicies in the namespace did it")  # fmt: skip
STALL_ENDED = _event("StallEnded", False,
    "an epoch finished after a stall: the `Stalled` condition is False again (reason `EpochFinished`)")  # fmt: skip
# On a DistTrainingSweep (reconcile/sweeps.py; docs/experiments.md#sweeps).
INVALID_SWEEP = _event("InvalidSweep", True,
    "a sweep the operator cannot run (its space, objective or algorithm): it fails at once, the message naming the "
    "field")  # fmt: skip
TRIAL_REFUSED = _event("TrialRefused", True,
    "the API server refused a sweep's trial (the template with its point): the trial counts as failed")  # fmt: skip
TRIAL_STOPPED = _event("TrialStopped", False,
    "a sweep stopped a trial early (the median rule or successive halving, or the sweep failed): its run is deleted, "
    "its curve stays in the sweep's status")  # fmt: skip
SWEEP_SUCCEEDED = _event("SweepSucceeded", False, "the sweep ended: the message names its best trial and value")
SWEEP_FAILED = _event("SweepFailed", True,
    "the sweep ended failed: more trials failed than `spec.maxFailedTrials`, or none reported the "
    "objective")  # fmt: skip

REASONS = tuple(_declared)
# Reasons whose events are Warnings (every Failed run's event is one too, whatever the TFJob calls it).
WARNING_REASONS = frozenset(r.name for r in REASONS if r.warning)
