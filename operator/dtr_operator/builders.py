"""RunSpec -> the manifests the operator creates: a Kubeflow TFJob, (maybe) a PVC, a NetworkPolicy, (maybe) a
PodDisruptionBudget. Pure.

The same builders serve the operator and `dtr run` (which runs the TFJob's workers as local
processes), so a run behaves the same with or without a cluster.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from dtr_contract import env, flags, layout
from dtr_contract import params as run_params
from dtr_contract.container import PORT, TERMINATION_MESSAGE_PATH

from . import objectstore
from .api import (
    API_VERSION,
    CONTAINER_NAME,
    KEEP_PODS,
    KIND,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY,
    NETWORK_POLICY_API_VERSION,
    NETWORK_POLICY_KIND,
    PDB_API_VERSION,
    PDB_KIND,
    PORT_NAME,
    RUN_LABEL,
    SUSPENDED_BY,
    SUSPENDED_BY_ANNOTATION,
    TFJOB_API_VERSION,
)
from .fields import SPEC
from .grammar import quantity
from .labels import template_labels, workers_selector
from .schema import Field
from .spec import RunSpec, SchedulingPolicy

VOLUME_NAME = "dtr-data"
CODE_VOLUME = "dtr-code"  # the run's code from its ConfigMap (spec.training.code.configMap)
CODE_FILE_MODE = 0o444  # read-only for everyone: the workers run as RUN_AS, not as the file's owner
# The root filesystem is read-only; Python and TensorFlow still want a scratch dir.
SCRATCH_VOLUME = "tmp"
SCRATCH_PATH = "/tmp"
SCRATCH_SIZE = "256Mi"
TRAINER_COMMAND = ("python", "-m", "dtr_trainer")
RUN_AS = 1000
# spec.training.datasetSource's caps, as the table declares them (their defaults: a run stored before they existed)
_DATASET_CAPS = tuple(SPEC.child("training").child("datasetSource").child(n) for n in ("maxSize", "timeoutSeconds"))


def run_labels(run: RunSpec) -> dict[str, str]:
    return {RUN_LABEL: run.name, **MANAGED_BY}


def export_dir(run: RunSpec) -> str:
    """Where model versions go: spec.export.storageUri in the object store, else models/<modelName> on the volume."""
    return run.storage_uri or layout.export_dir(run.model_name)


def logs_dir(run: RunSpec) -> str:
    """TensorBoard's logs and each worker's own log file (worker-<i>.log) on the run's volume."""
    return layout.logs_dir(run.name)


def code_args(run: RunSpec, code_sha256: str | None = None) -> list[str]:
    """Which model the trainer builds: the run's own code (a file mounted from its ConfigMap, or a module in
    its image), else the built-in spec.training.model; then the headline metric, when the run names one.

    code_sha256: the file's digest as the operator recorded it (status.code). The workers mount the ConfigMap by
    name, so the trainer checks the file against it: a ConfigMap replaced since never runs under the old digest."""
    code = run.code
    if code is None:
        args = [flags.MODEL, run.training.model]
    elif code.file_key is not None:
        args = [flags.CODE, layout.code_file(code.file_key)]
        args += [flags.CODE_SHA256, code_sha256] if code_sha256 else []
    else:
        args = [flags.CODE_MODULE, str(code.module)]
    return args + ([flags.METRIC, run.training.metric] if run.training.metric else [])


def trainer_args(run: RunSpec, code_sha256: str | None = None) -> list[str]:
    """The trainer command line (docs/architecture.md, "The trainer command line"); code_sha256: code_args'."""
    t = run.training
    args = [
        *code_args(run, code_sha256),
        *dataset_args(run),
        flags.EPOCHS, str(t.epochs),
        flags.BATCH_SIZE_PER_WORKER, str(t.batch_size_per_worker),
    ]
    if t.steps_per_epoch is not None:
        args += [flags.STEPS_PER_EPOCH, str(t.steps_per_epoch)]
    args += [
        flags.LEARNING_RATE, repr(t.learning_rate),
        flags.SEED, str(t.seed),
        flags.VALIDATE_EVERY, str(t.validate_every),
        *([flags.PARAMS, run_params.to_flag(t.params)] if t.params else []),
        flags.DATA_DIR, layout.data_dir(),
        flags.EXPORT_DIR, export_dir(run),
        *([flags.ALLOWED_PUBLISHERS, ",".join(run.allowed_publishers)] if run.allowed_publishers else []),
        flags.BACKUP_DIR, backup_dir(run),
        *([flags.BACKUP_URI, uri] if (uri := backup_uri(run)) else []),
        *([flags.BACKUP_ON_SIGTERM] if run.disruption.save_on_stop else []),
        flags.TENSORBOARD_DIR, logs_dir(run),
        flags.LOG_DIR, logs_dir(run),
        flags.TERMINATION_MESSAGE_PATH, TERMINATION_MESSAGE_PATH,
    ]
    return args


def dataset_args(run: RunSpec) -> list[str]:
    """The data: a file the trainer downloads and checks (datasetSource), else the dataset by name or path."""
    source = run.training.dataset_source
    if source is None:
        return [flags.DATASET, run.training.dataset]
    max_size, seconds = (source.get(f.name, f.default) for f in _DATASET_CAPS)
    return [flags.DATASET_URL, source["url"], flags.DATASET_SHA256, source["sha256"],
            flags.DATASET_MAX_BYTES, str(int(quantity(max_size) or 0)), flags.DATASET_TIMEOUT_SECONDS, str(seconds)]


def backup_dir(run: RunSpec) -> str:
    """BackupAndRestore's state: per run object (its uid), so a run deleted and re-created under the same
    name on a kept volume starts afresh instead of resuming the old run's epochs. Without a uid (dtr run,
    dtr render): per name."""
    return layout.backup_dir(run.name, run.uid)


def backup_uri(run: RunSpec) -> str | None:
    """spec.storage.backupUri per run object, as backup_dir is on a volume: <backupUri>/<name>/<uid>. Two runs naming
    one prefix, or a run deleted and made again from the same file, never resume (nor clean up) each other's
    generations. Without a uid (dtr run, dtr render): per name."""
    if run.storage.backup_uri is None:
        return None
    return "/".join(part for part in (run.storage.backup_uri, run.name, run.uid) if part)


def _attr(run: RunSpec, attr: str) -> Any:
    """The value at a dotted attribute path of RunSpec ("training.model"); None under an unset part."""
    value: Any = run
    for name in attr.split("."):
        value = None if value is None else getattr(value, name)
    return value


def _api(value: Any) -> Any:
    """A value kept whole on RunSpec in the API's shape (tuples as lists, copies); empty as unset."""
    if isinstance(value, tuple | list):
        return [copy.deepcopy(dict(item)) if isinstance(item, Mapping) else item for item in value] or None
    if isinstance(value, Mapping):
        return copy.deepcopy({k: dict(v) if isinstance(v, Mapping) else v for k, v in value.items()}) or None
    return value


def _api_object(f: Field, run: RunSpec) -> dict[str, Any]:
    """The fields under f, as the API has them, only those set; a mutable one never (see effective_spec)."""
    out: dict[str, Any] = {}
    for sub in f.fields:
        if sub.mutable or (sub.not_with is not None and sub.not_with[0] in out):
            continue
        if (value := _api_field(sub, run)) is not None:
            out[sub.name] = value
    return out


def _api_field(f: Field, run: RunSpec) -> Any:
    if any(sub.attr for sub in f.fields):  # an object of its own fields, unless its part of RunSpec is unset
        return None if f.attr and _attr(run, f.attr) is None else _api_object(f, run)
    return _api(_attr(run, f.attr)) if f.attr else None


def effective_spec(run: RunSpec) -> dict[str, Any]:
    """The run's spec as the operator parsed it, every default applied, in the API's shape; the inverse of
    spec.parse_run, driven by the same field table (parse_run of it gives the same RunSpec back but for suspend:
    tests/unit/operator/test_properties.py). Not spec.suspend: it changes after creation, and this is what the run
    trains with (lineage)."""
    return _api_object(SPEC, run)


def trainer_env(run: RunSpec, tracking_uri: str = "") -> list[dict[str, Any]]:
    """The container's env: unbuffered output, who the run is (the trainer's lineage file), its object store, the
    admin's MLflow server (--mlflow-tracking-uri; docs/tracking.md)."""
    named = {"PYTHONUNBUFFERED": "1", env.RUN_NAME: run.name, env.RUN_UID: run.uid, env.RUN_SWEEP: run.sweep,
             env.RUN_TRIAL: None if run.trial is None else str(run.trial), env.RUN_NAMESPACE: run.namespace,
             env.RUN_SPEC: json.dumps(effective_spec(run), separators=(",", ":")), env.TRAINER_IMAGE: run.image}
    return [*({"name": k, "value": v} for k, v in named.items() if v is not None),  # no uid: a run from a file
            *objectstore.trainer_env(run.object_store),
            *([{"name": env.MLFLOW_TRACKING_URI, "value": tracking_uri}] if tracking_uri else [])]


def _container(run: RunSpec, code_sha256: str | None, tracking_uri: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": run.image,
        "imagePullPolicy": run.image_pull_policy,
        "command": list(TRAINER_COMMAND),
        "args": trainer_args(run, code_sha256),
        "env": trainer_env(run, tracking_uri),
        "ports": [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}],
        "volumeMounts": [
            {"name": VOLUME_NAME, "mountPath": layout.MOUNT_PATH},
            {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_PATH},
            *code_mounts(run),
            *objectstore.mounts(run.object_store),
        ],
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        # On success the trainer writes its JSON summary there; on a crash the log tail explains it.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            # Writes go to the run's volume or the scratch dir, nowhere else.
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
        },
    }
    if run.resources:
        container["resources"] = copy.deepcopy(dict(run.resources))
    return container


def code_volumes(run: RunSpec) -> list[dict[str, Any]]:
    """The run's ConfigMap as a volume holding only its one key, read-only; none without one."""
    code = run.code
    if code is None or code.config_map is None or code.file_key is None:
        return []
    items = [{"key": code.file_key, "path": code.file_key, "mode": CODE_FILE_MODE}]
    return [{"name": CODE_VOLUME,
             "configMap": {"name": code.config_map, "items": items, "defaultMode": CODE_FILE_MODE}}]  # fmt: skip


def code_mounts(run: RunSpec) -> list[dict[str, Any]]:
    return [{"name": CODE_VOLUME, "mountPath": layout.CODE_DIR, "readOnly": True} for _ in code_volumes(run)]


def worker_pod_name(run: RunSpec, index: int) -> str:
    """The name the training-operator gives worker `index`'s pod (worker 0 is the chief: no Chief replica)."""
    return f"{run.tfjob_name}-worker-{index}"




def _run_policy(run: RunSpec) -> dict[str, Any]:
    policy: dict[str, Any] = {
        # Keep finished pods so `kubectl logs` and the chief's termination message stay readable. A failed
        # run's pods that still run (restarting under OnFailure) are released later (reconcile.py).
        "cleanPodPolicy": KEEP_PODS,
        "backoffLimit": run.backoff_limit,
        # A queued run starts suspended: Kueue unsuspends it when its LocalQueue admits it.
        "suspend": run.suspend or run.queue_name is not None,
    }
    if run.active_deadline_seconds is not None:
        policy["activeDeadlineSeconds"] = run.active_deadline_seconds
    if run.ttl_seconds_after_finished is not None:
        policy["ttlSecondsAfterFinished"] = run.ttl_seconds_after_finished
    if run.scheduling_policy is not None:
        policy["schedulingPolicy"] = _gang(run.scheduling_policy)
    return policy


def _gang(gang: SchedulingPolicy) -> dict[str, Any]:
    """spec.schedulingPolicy in the API's shape, which is also the TFJob's runPolicy.schedulingPolicy."""
    fields = (("minAvailable", gang.min_available), ("queue", gang.queue),
              ("priorityClass", gang.priority_class), ("scheduleTimeoutSeconds", gang.schedule_timeout_seconds))
    return {key: value for key, value in fields if value is not None}


def _placement_fields(run: RunSpec) -> dict[str, Any]:
    """The pod spec fields of spec's placement (same names in the run and in a pod), only those set."""
    placement = run.placement
    fields = (("nodeSelector", dict(placement.node_selector)),
              ("tolerations", [dict(t) for t in placement.tolerations]),
              ("affinity", copy.deepcopy(dict(placement.affinity or {}))),
              ("priorityClassName", placement.priority_class_name))  # fmt: skip
    return {key: value for key, value in fields if value}


def _pod_metadata(run: RunSpec) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": template_labels(run.name, run.placement.pod_labels)}
    if run.placement.pod_annotations:
        metadata["annotations"] = dict(run.placement.pod_annotations)
    return metadata


def _pod_spec(run: RunSpec, code_sha256: str | None, tracking_uri: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        # The trainer never calls the API: no ServiceAccount token in its pods.
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            # Re-permission the volume only when its root is not ours yet: never a recursive chown of a
            # claim on every start (security review M4).
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(run, code_sha256, tracking_uri)],
        "volumes": [
            run_volume(run),
            {"name": SCRATCH_VOLUME, "emptyDir": {"sizeLimit": SCRATCH_SIZE}},
            *code_volumes(run),
            *objectstore.volumes(run.object_store),
        ],
    }
    return {**spec, **_placement_fields(run)}


def run_volume(run: RunSpec) -> dict[str, Any]:
    """What the workers mount at the volume's path: the run's claim, or without one (spec.storage.volume false) a
    directory of each pod's own, as large as spec.storage.size (the backups then go to the bucket)."""
    if not run.has_volume:
        return {"name": VOLUME_NAME, "emptyDir": {"sizeLimit": run.storage.size}}
    return {"name": VOLUME_NAME, "persistentVolumeClaim": {"claimName": run.pvc_name}}


def build_tfjob(run: RunSpec, code_sha256: str | None = None, tracking_uri: str = "") -> dict[str, Any]:
    """The kubeflow.org/v1 TFJob for a run (no owner reference; see owned_by); code_sha256: code_args';
    tracking_uri: trainer_env's."""
    labels = run_labels(run)
    if run.queue_name is not None:
        labels[KUEUE_QUEUE_LABEL] = run.queue_name
    if run.workload_priority_class is not None:
        labels[KUEUE_PRIORITY_LABEL] = run.workload_priority_class
    return {
        "apiVersion": TFJOB_API_VERSION,
        "kind": "TFJob",
        "metadata": {"name": run.tfjob_name, "namespace": run.namespace, "labels": labels,
                     **({"annotations": {SUSPENDED_BY_ANNOTATION: SUSPENDED_BY}} if run.suspend else {})},
        "spec": {
            "runPolicy": _run_policy(run),
            # Every worker saves (MWMS needs it); wait for all of them, not just worker 0.
            "successPolicy": "AllWorkers",
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": run.workers,
                    "restartPolicy": run.restart_policy,
                    "template": {"metadata": _pod_metadata(run), "spec": _pod_spec(run, code_sha256, tracking_uri)},
                }
            },
        },
    }


def build_pvc(run: RunSpec) -> dict[str, Any] | None:
    """The PVC the operator creates, or None when the run uses an existing claim."""
    if not run.creates_pvc:
        return None
    spec: dict[str, Any] = {
        "accessModes": [run.storage.access_mode],
        "resources": {"requests": {"storage": run.storage.size}},
    }
    if run.storage.storage_class_name is not None:
        spec["storageClassName"] = run.storage.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": run.pvc_name, "namespace": run.namespace, "labels": run_labels(run)},
        "spec": spec,
    }


def build_network_policy(run: RunSpec) -> dict[str, Any]:
    """The NetworkPolicy that guards the run's workers (no owner reference; see owned_by).

    TensorFlow's gRPC server on PORT authenticates no one and runs any graph it is sent: only the pods of
    the same run, in the same namespace, may reach it; nothing else may reach the workers at all. Egress
    is left open (DNS, spec.training.datasetSource).
    """
    return {
        "apiVersion": NETWORK_POLICY_API_VERSION,
        "kind": NETWORK_POLICY_KIND,
        "metadata": {"name": run.name, "namespace": run.namespace, "labels": run_labels(run)},
        "spec": network_policy_spec(run.name),
    }


def network_policy_spec(run_name: str) -> dict[str, Any]:
    """The spec of the NetworkPolicy of the run of this name (build_network_policy): the operator holds its policy
    to it (netpolicy.py)."""
    run_pods = {"matchLabels": {RUN_LABEL: run_name}}
    return {
        "podSelector": run_pods,
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": run_pods}], "ports": [{"protocol": "TCP", "port": PORT}]}],
    }


def build_pdb(run: RunSpec) -> dict[str, Any] | None:
    """The PodDisruptionBudget over the run's workers (spec.disruption.protect), or None (no owner reference; see
    owned_by). While every worker is there and ready, the Eviction API refuses to evict any of them (429), so a drain
    waits. minAvailable is every worker rather than maxUnavailable 0: with an integer minAvailable the disruption
    controller counts the pods the selector picks, with maxUnavailable it needs the scale subresource of their
    controller, which a TFJob has not (the budget's status would say SyncFailed)."""
    if not run.disruption.protect:
        return None
    return {
        "apiVersion": PDB_API_VERSION,
        "kind": PDB_KIND,
        "metadata": {"name": run.name, "namespace": run.namespace, "labels": run_labels(run)},
        "spec": {"minAvailable": run.workers, "selector": workers_selector(run.tfjob_name)},
    }


def owner_reference(run: RunSpec) -> dict[str, Any]:
    if not run.uid:
        raise ValueError(f"run {run.namespace}/{run.name} has no uid; only runs read from the API can own objects")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": run.name,
        "uid": run.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(manifest: dict[str, Any], run: RunSpec) -> dict[str, Any]:
    """A copy of manifest with the run as its controller (garbage-collected with the run)."""
    out = copy.deepcopy(manifest)
    out["metadata"]["ownerReferences"] = [owner_reference(run)]
    return out


def children(run: RunSpec, code_sha256: str | None = None,
             tracking_uri: str = "") -> tuple[dict[str, Any] | None, dict[str, Any]]:  # fmt: skip
    """(PVC or None, TFJob) as the operator creates them, owner references included; code_sha256: code_args';
    tracking_uri: the operator's --mlflow-tracking-uri (trainer_env).

    The TFJob is always owned by the run. A created PVC is owned only with reclaimPolicy Delete:
    with Retain it must outlive the run (it holds the model), so it carries only the run label.
    """
    pvc = build_pvc(run)
    if pvc is not None and run.storage.reclaim_policy == "Delete":
        pvc = owned_by(pvc, run)
    return pvc, owned_by(build_tfjob(run, code_sha256, tracking_uri), run)


def pinned_code_sha256(tfjob: Mapping[str, Any]) -> str | None:
    """The code digest a TFJob's workers check (code_args), or None: a TFJob made before the operator passed one,
    or a run whose code is not a file."""
    for container in _containers(tfjob):
        args = list(container.get("args") or []) if container.get("name") == CONTAINER_NAME else []
        if flags.CODE_SHA256 in args[:-1]:
            return str(args[args.index(flags.CODE_SHA256) + 1])
    return None


def _containers(tfjob: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    replicas = ((tfjob.get("spec") or {}).get("tfReplicaSpecs") or {}).values()
    pods = [((replica or {}).get("template") or {}).get("spec") or {} for replica in replicas]
    return [container for pod in pods for container in pod.get("containers") or []]


def is_owned_by(obj: dict[str, Any], run_uid: str | None) -> bool:
    """Whether obj is controlled by the run with this uid (never adopt anything else)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return bool(run_uid) and any(r.get("uid") == run_uid for r in refs)


def left_by_earlier_run(obj: dict[str, Any], run: RunSpec) -> bool:
    """Whether obj is going away: being deleted, or controlled by an earlier run of the same name.

    Names are unique per namespace, so such a run no longer exists and the garbage collector is
    about to remove obj: the new run waits for that instead of calling it a conflict.
    """
    meta = obj.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return True
    return any(
        ref.get("controller") and ref.get("kind") == KIND and ref.get("name") == run.name and ref.get("uid") != run.uid
        for ref in meta.get("ownerReferences") or []
    )


def is_reusable_pvc(pvc: dict[str, Any], run: RunSpec) -> bool:
    """Whether an existing PVC named like our created claim is ours to mount.

    Ours: owned by this run, or unowned and labelled with our run name (a PVC retained by an
    earlier run of the same name; it is reused, never adopted, so the trainer writes the next model
    version beside the old one and the PVC stays after this run too).
    """
    if is_owned_by(pvc, run.uid):
        return True
    meta = pvc.get("metadata") or {}
    return not meta.get("ownerReferences") and (meta.get("labels") or {}).get(RUN_LABEL) == run.name
