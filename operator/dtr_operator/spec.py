"""The run's spec as typed values: defaults and validation, parsed from a DistTrainingRun dict.

Pure: no I/O. The API server validates runs with the CRD schema (crds/disttrainingrun.yaml); this
module applies the same defaults and rules so that `dtr render` and `dtr run`, which never see an API
server, accept and reject exactly what `kubectl apply` would (tests/unit/test_spec.py checks the two
agree on defaults, enums and ranges).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GROUP = "distml.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "DistTrainingRun"
PLURAL = "disttrainingruns"

DEFAULT_TRAINER_IMAGE = "distml/trainer:0.1.0"

MODELS = ("cnn", "dropout", "batch_norm")
BUILTIN_DATASETS = ("mnist", "fashion_mnist", "digits", "synthetic")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
ACCESS_MODES = ("ReadWriteOnce", "ReadWriteMany")
RECLAIM_POLICIES = ("Retain", "Delete")
RESTART_POLICIES = ("Never", "OnFailure", "ExitCode")

# "<name>-worker-<index>" must stay a 63-character DNS label for up to 64 workers (index <= 63):
# 52 + len("-worker-63") = 62, one character to spare.
MAX_NAME_LENGTH = 52
MAX_WORKERS = 64
# The operator reads the chief's termination message after the TFJob ends; a shorter TTL races it.
MIN_TTL_SECONDS = 60

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_PVC_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_MODEL_NAME = re.compile(r"[a-z0-9]([-a-z0-9_.]*[a-z0-9])?")
_NPZ_PATH = re.compile(r"[A-Za-z0-9._/-]+")
_DOT_SEGMENT = re.compile(r"(^|/)\.\.?(/|$)")
# Same grammar as Kubernetes' resource.Quantity (and the CRD's pattern for resources).
_QUANTITY = re.compile(
    r"[+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?"
)


# Kubernetes' label key and value grammars (the CRD has the same patterns).
_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
RESERVED_LABEL_PREFIXES = ("distml.dev/", "training.kubeflow.org/")
KEY_GRAMMAR = (
    "an optional DNS-subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and "
    "ending with a letter or digit"
)
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
AFFINITY_KINDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
MAX_MAP_ENTRIES = 32
MAX_TOLERATIONS = 32

DEFAULT_WORKERS = 2
DEFAULT_PULL_POLICY = "IfNotPresent"

# spec's fields, as the CRD has them (tests/unit/test_spec.py checks the two agree, and that every field
# but MUTABLE has the CRD's immutability rule).
SPEC_FIELDS = (
    "workers", "image", "imagePullPolicy", "training", "storage", "export", "resources",
    "restartPolicy", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished",
    "suspend", "nodeSelector", "tolerations", "affinity", "priorityClassName", "podLabels",
    "podAnnotations", "queueName", "schedulingPolicy",
)  # fmt: skip
MUTABLE = ("suspend",)


class SpecError(ValueError):
    """A run the API server would reject; the message names the field."""


@dataclass(frozen=True)
class TrainingSpec:
    model: str = "cnn"
    dataset: str = "mnist"
    epochs: int = 3
    batch_size_per_worker: int = 64
    steps_per_epoch: int | None = None
    learning_rate: float = 0.001
    seed: int = 42


@dataclass(frozen=True)
class StorageSpec:
    claim_name: str | None = None
    size: str = "1Gi"
    storage_class_name: str | None = None
    access_mode: str = "ReadWriteOnce"
    reclaim_policy: str = "Retain"


@dataclass(frozen=True)
class Placement:
    """Where and how the worker pods are scheduled: passed through to every worker pod."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] | None = None
    priority_class_name: str | None = None
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SchedulingPolicy:
    """Gang scheduling, passed to the TFJob's runPolicy.schedulingPolicy."""

    min_available: int | None = None
    queue: str | None = None
    priority_class: str | None = None
    schedule_timeout_seconds: int | None = None


@dataclass(frozen=True)
class RunSpec:
    """A DistTrainingRun with every default applied."""

    name: str
    namespace: str
    workers: int  # DEFAULT_WORKERS
    image: str
    image_pull_policy: str  # DEFAULT_PULL_POLICY
    training: TrainingSpec
    storage: StorageSpec
    model_name: str
    resources: Mapping[str, Mapping[str, str | int]] = field(default_factory=dict)
    restart_policy: str = "OnFailure"
    backoff_limit: int = 3
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    suspend: bool = False
    placement: Placement = field(default_factory=Placement)
    queue_name: str | None = None
    scheduling_policy: SchedulingPolicy | None = None
    uid: str | None = None
    generation: int | None = None

    @property
    def pvc_name(self) -> str:
        """The claim the workers mount: the user's, or the one the operator creates."""
        return self.storage.claim_name or created_pvc_name(self.name)

    @property
    def creates_pvc(self) -> bool:
        return self.storage.claim_name is None

    @property
    def tfjob_name(self) -> str:
        return self.name


def created_pvc_name(run_name: str) -> str:
    return f"{run_name}-data"


# ---- reading fields ---------------------------------------------------------------------------


def _fail(path: str, why: str) -> SpecError:
    return SpecError(f"{path}: {why}")


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(path, f"must be an object, got {type(value).__name__}")
    return value


def _get(obj: Mapping[str, Any], key: str, default: Any) -> Any:
    """obj[key], or default when it is absent or null (the API server defaults nulls the same way)."""
    value = obj.get(key)
    return default if value is None else value


def _no_unknown(obj: Mapping[str, Any], known: set[str], path: str) -> None:
    unknown = sorted(set(obj) - known)
    if unknown:
        raise _fail(f"{path}.{unknown[0]}", f"unknown field (known: {', '.join(sorted(known))})")


def _int(obj: Mapping[str, Any], key: str, path: str, default: int | None, lo: int, hi: int | None) -> int | None:
    value = _get(obj, key, default)
    if value is None:
        return None
    where = f"{path}.{key}"
    # YAML `true` is a bool, which Python also counts as an int; the API server would refuse it.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        bounds = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise _fail(where, f"must be {bounds}, got {value}")
    return value


def _count(obj: Mapping[str, Any], key: str, path: str, default: int, lo: int, hi: int | None) -> int:
    """_int for a field with a default: never None."""
    value = _int(obj, key, path, default, lo, hi)
    assert value is not None
    return value


def _str(obj: Mapping[str, Any], key: str, path: str, default: str | None, max_len: int) -> str | None:
    value = _get(obj, key, default)
    if value is None:
        return None
    where = f"{path}.{key}"
    if not isinstance(value, str):
        raise _fail(where, f"must be a string, got {value!r}")
    if not value:
        raise _fail(where, "must not be empty")
    if len(value) > max_len:
        raise _fail(where, f"must be at most {max_len} characters")
    return value


def _enum(obj: Mapping[str, Any], key: str, path: str, default: str, allowed: tuple[str, ...]) -> str:
    value = _str(obj, key, path, default, 64)
    assert value is not None
    if value not in allowed:
        raise _fail(f"{path}.{key}", f"unsupported value {value!r}: must be one of {', '.join(allowed)}")
    return value


# ---- rules that the CRD expresses in CEL ------------------------------------------------------


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise _fail("metadata.name", "is required")
    if not _DNS1035.fullmatch(name):
        raise _fail(
            "metadata.name",
            "must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter "
            "and ending with a letter or digit",
        )
    if len(name) > MAX_NAME_LENGTH:
        raise _fail(
            "metadata.name",
            f"must be at most {MAX_NAME_LENGTH} characters, so that the worker pods and services "
            '"<name>-worker-<index>" stay valid 63-character names',
        )
    return name


def check_dataset(dataset: str) -> str:
    if dataset in BUILTIN_DATASETS:
        return dataset
    if (
        dataset.endswith(".npz")
        and _NPZ_PATH.fullmatch(dataset)
        and not dataset.startswith("/")
        and not _DOT_SEGMENT.search(dataset)
    ):
        return dataset
    raise _fail(
        "spec.training.dataset",
        f"must be {', '.join(BUILTIN_DATASETS)}, or a relative path to a .npz file on the volume "
        f"(letters, digits, '._-/'; no leading '/', no '.' or '..' segments), got {dataset!r}",
    )


def is_quantity(value: str) -> bool:
    return bool(_QUANTITY.fullmatch(value))


def _is_positive_quantity(value: str) -> bool:
    if not is_quantity(value) or value.startswith("-"):
        return False
    number = re.match(r"[+]?([0-9]*\.?[0-9]*)", value)
    return number is not None and any(c in "123456789" for c in number.group(1))


# ---- parsing ----------------------------------------------------------------------------------


def _training(obj: Mapping[str, Any]) -> TrainingSpec:
    path = "spec.training"
    _no_unknown(
        obj,
        {"model", "dataset", "epochs", "batchSizePerWorker", "stepsPerEpoch", "learningRate", "seed"},
        path,
    )
    lr = _get(obj, "learningRate", TrainingSpec.learning_rate)
    if isinstance(lr, bool) or not isinstance(lr, int | float):
        raise _fail(f"{path}.learningRate", f"must be a number, got {lr!r}")
    if not 0 < lr <= 10:
        raise _fail(f"{path}.learningRate", f"must be greater than 0 and at most 10, got {lr}")
    dataset = _str(obj, "dataset", path, TrainingSpec.dataset, 253)
    assert dataset is not None
    return TrainingSpec(
        model=_enum(obj, "model", path, TrainingSpec.model, MODELS),
        dataset=check_dataset(dataset),
        epochs=_count(obj, "epochs", path, TrainingSpec.epochs, 1, 1000),
        batch_size_per_worker=_count(obj, "batchSizePerWorker", path, TrainingSpec.batch_size_per_worker, 1, 4096),
        steps_per_epoch=_int(obj, "stepsPerEpoch", path, None, 1, 1_000_000),
        learning_rate=float(lr),
        seed=_count(obj, "seed", path, TrainingSpec.seed, 0, 2**31 - 1),
    )


def _storage(obj: Mapping[str, Any]) -> StorageSpec:
    path = "spec.storage"
    _no_unknown(obj, {"claimName", "size", "storageClassName", "accessMode", "reclaimPolicy"}, path)
    claim = _str(obj, "claimName", path, None, 253)
    if claim is not None and not _PVC_NAME.fullmatch(claim):
        raise _fail(
            f"{path}.claimName",
            "must be a PVC name: lower-case letters, digits, '-' and '.', starting and ending with a "
            "letter or digit",
        )
    reclaim = _enum(obj, "reclaimPolicy", path, StorageSpec.reclaim_policy, RECLAIM_POLICIES)
    if claim is not None:
        for key in ("size", "storageClassName"):
            if obj.get(key) is not None:
                raise _fail(
                    f"{path}.{key}",
                    f"cannot be set with {path}.claimName: {key} is only for the PVC the operator creates",
                )
        if reclaim == "Delete":
            raise _fail(
                f"{path}.reclaimPolicy",
                f"Delete cannot be set with {path}.claimName: the operator never deletes a PVC it did not create",
            )
    size = _str(obj, "size", path, StorageSpec.size, 64)
    assert size is not None
    if not _is_positive_quantity(size):
        raise _fail(f"{path}.size", f"must be a positive Kubernetes quantity, such as 500Mi or 1Gi, got {size!r}")
    return StorageSpec(
        claim_name=claim,
        size=size,
        storage_class_name=_str(obj, "storageClassName", path, None, 253),
        access_mode=_enum(obj, "accessMode", path, StorageSpec.access_mode, ACCESS_MODES),
        reclaim_policy=reclaim,
    )


def _model_name(obj: Mapping[str, Any], default: str) -> str:
    path = "spec.export"
    _no_unknown(obj, {"modelName"}, path)
    name = _str(obj, "modelName", path, default, 63)
    assert name is not None
    if not _MODEL_NAME.fullmatch(name):
        raise _fail(
            f"{path}.modelName",
            "must be lower-case letters, digits, '-', '_' and '.', starting and ending with a letter "
            "or digit (it is one directory name)",
        )
    return name


def _resources(obj: Mapping[str, Any]) -> dict[str, dict[str, str | int]]:
    path = "spec.resources"
    _no_unknown(obj, {"limits", "requests"}, path)
    out: dict[str, dict[str, str | int]] = {}
    for kind in ("limits", "requests"):
        amounts = _object(obj.get(kind), f"{path}.{kind}")
        if len(amounts) > 16:
            raise _fail(f"{path}.{kind}", "must have at most 16 entries")
        for resource, amount in amounts.items():
            where = f"{path}.{kind}.{resource}"
            if isinstance(amount, bool) or not isinstance(amount, int | str):
                raise _fail(where, f"must be a quantity such as 500m or 2Gi, got {amount!r}")
            if isinstance(amount, str) and not is_quantity(amount):
                raise _fail(where, f"must be a quantity such as 500m or 2Gi, got {amount!r}")
        if amounts:
            out[kind] = dict(amounts)
    return out


def _string_map(obj: Mapping[str, Any], key: str, value_max: int, value_pattern: re.Pattern[str] | None,
                what: str) -> dict[str, str]:  # fmt: skip
    """spec.<key>: a map of label-style keys to strings."""
    path = f"spec.{key}"
    entries = _object(obj.get(key), path)
    if len(entries) > MAX_MAP_ENTRIES:
        raise _fail(path, f"must have at most {MAX_MAP_ENTRIES} entries")
    for k, v in entries.items():
        if not isinstance(k, str) or not _LABEL_KEY.fullmatch(k):
            raise _fail(path, f"keys must be {what} keys: {KEY_GRAMMAR}; got {k!r}")
        if not isinstance(v, str):
            raise _fail(f"{path}.{k}", f"must be a string, got {v!r}")
        if len(v) > value_max or (value_pattern is not None and not value_pattern.fullmatch(v)):
            raise _fail(f"{path}.{k}", f"must be a {what} value (at most {value_max} characters), got {v!r}")
    return dict(entries)


def _toleration(item: Any, path: str) -> dict[str, Any]:
    tol = dict(_object(item, path))
    _no_unknown(tol, {"key", "operator", "value", "effect", "tolerationSeconds"}, path)
    key = tol.get("key")
    if key is not None and (not isinstance(key, str) or len(key) > 316):  # "" is every key (with Exists)
        raise _fail(f"{path}.key", f"must be a string of at most 316 characters, got {key!r}")
    if tol.get("operator") is not None:
        _enum(tol, "operator", path, "Equal", TOLERATION_OPERATORS)
    if tol.get("effect") is not None:
        _enum(tol, "effect", path, "NoSchedule", TAINT_EFFECTS)
    value = tol.get("value")
    if value is not None and (not isinstance(value, str) or len(value) > 63):
        raise _fail(f"{path}.value", f"must be a string of at most 63 characters, got {value!r}")
    if tol.get("operator") == "Exists" and value:
        raise _fail(path, "a toleration with operator Exists must not set value")
    if tol.get("tolerationSeconds") is not None:
        _int(tol, "tolerationSeconds", path, None, -(2**63), 2**63 - 1)
        if tol.get("effect") != "NoExecute":
            raise _fail(path, "tolerationSeconds is only for effect NoExecute")
    return tol


def _placement(spec: Mapping[str, Any]) -> Placement:
    node_selector = _string_map(spec, "nodeSelector", 63, _LABEL_VALUE, "label")
    tolerations = _get(spec, "tolerations", [])  # {} is not a list: the API server refuses it too
    if not isinstance(tolerations, list):
        raise _fail("spec.tolerations", f"must be a list, got {type(tolerations).__name__}")
    if len(tolerations) > MAX_TOLERATIONS:
        raise _fail("spec.tolerations", f"must have at most {MAX_TOLERATIONS} items")
    affinity = _object(spec.get("affinity"), "spec.affinity")
    _no_unknown(affinity, set(AFFINITY_KINDS), "spec.affinity")
    for kind in AFFINITY_KINDS:
        _object(affinity.get(kind), f"spec.affinity.{kind}")
    priority = _str(spec, "priorityClassName", "spec", None, 253)
    if priority is not None and not _DNS1123_SUBDOMAIN.fullmatch(priority):
        raise _fail("spec.priorityClassName", f"must be a PriorityClass name (a DNS subdomain), got {priority!r}")
    labels = _string_map(spec, "podLabels", 63, _LABEL_VALUE, "label")
    reserved = sorted(k for k in labels if k.startswith(RESERVED_LABEL_PREFIXES))
    if reserved:
        prefixes = " and ".join(RESERVED_LABEL_PREFIXES)
        raise _fail("spec.podLabels", f"keys under {prefixes} are reserved, got {reserved[0]!r}")
    return Placement(
        node_selector=node_selector,
        tolerations=tuple(_toleration(t, f"spec.tolerations[{i}]") for i, t in enumerate(tolerations)),
        affinity=dict(affinity) or None,
        priority_class_name=priority,
        pod_labels=labels,
        pod_annotations=_string_map(spec, "podAnnotations", 4096, None, "annotation"),
    )


def _scheduling_policy(spec: Mapping[str, Any], workers: int) -> SchedulingPolicy | None:
    if spec.get("schedulingPolicy") is None:
        return None
    path = "spec.schedulingPolicy"
    obj = _object(spec.get("schedulingPolicy"), path)
    _no_unknown(obj, {"minAvailable", "queue", "priorityClass", "scheduleTimeoutSeconds"}, path)
    policy = SchedulingPolicy(
        min_available=_int(obj, "minAvailable", path, None, 1, 2**31 - 1),
        queue=_str(obj, "queue", path, None, 253),
        priority_class=_str(obj, "priorityClass", path, None, 253),
        schedule_timeout_seconds=_int(obj, "scheduleTimeoutSeconds", path, None, 1, 2**31 - 1),
    )
    if policy.min_available is not None and policy.min_available > workers:
        raise _fail(f"{path}.minAvailable", f"must be at most spec.workers ({workers}), got {policy.min_available}")
    return policy


def _suspend_and_queue(spec: Mapping[str, Any]) -> tuple[bool, str | None]:
    suspend = _get(spec, "suspend", False)
    if not isinstance(suspend, bool):
        raise _fail("spec.suspend", f"must be true or false, got {suspend!r}")
    queue = _str(spec, "queueName", "spec", None, 63)
    if queue is not None and not _DNS1123_LABEL.fullmatch(queue):
        raise _fail("spec.queueName", f"must be a LocalQueue name (a DNS label), got {queue!r}")
    if queue is not None and suspend:
        raise _fail("spec.suspend", "cannot be true with spec.queueName: Kueue suspends and resumes queued runs")
    return suspend, queue


def parse_run(obj: Mapping[str, Any], default_image: str = DEFAULT_TRAINER_IMAGE) -> RunSpec:
    """A DistTrainingRun dict (from the API or a file) -> RunSpec, or SpecError naming the field."""
    if obj.get("apiVersion", API_VERSION) != API_VERSION or obj.get("kind", KIND) != KIND:
        raise SpecError(f"not a {KIND} ({API_VERSION}): apiVersion={obj.get('apiVersion')!r} kind={obj.get('kind')!r}")
    meta = _object(obj.get("metadata"), "metadata")
    name = check_name(meta.get("name"))
    spec = _object(obj.get("spec"), "spec")
    _no_unknown(spec, set(SPEC_FIELDS), "spec")
    image = _str(spec, "image", "spec", default_image, 512)
    assert image is not None
    workers = _count(spec, "workers", "spec", DEFAULT_WORKERS, 1, MAX_WORKERS)
    suspend, queue = _suspend_and_queue(spec)
    return RunSpec(
        name=name,
        namespace=str(meta.get("namespace") or "default"),
        uid=meta.get("uid"),
        generation=meta.get("generation"),
        workers=workers,
        image=image,
        image_pull_policy=_enum(spec, "imagePullPolicy", "spec", DEFAULT_PULL_POLICY, PULL_POLICIES),
        training=_training(_object(spec.get("training"), "spec.training")),
        storage=_storage(_object(spec.get("storage"), "spec.storage")),
        model_name=_model_name(_object(spec.get("export"), "spec.export"), default=name),
        resources=_resources(_object(spec.get("resources"), "spec.resources")),
        restart_policy=_enum(spec, "restartPolicy", "spec", RunSpec.restart_policy, RESTART_POLICIES),
        backoff_limit=_count(spec, "backoffLimit", "spec", RunSpec.backoff_limit, 0, 100),
        active_deadline_seconds=_int(spec, "activeDeadlineSeconds", "spec", None, 1, None),
        ttl_seconds_after_finished=_int(spec, "ttlSecondsAfterFinished", "spec", None, MIN_TTL_SECONDS, None),
        suspend=suspend,
        placement=_placement(spec),
        queue_name=queue,
        scheduling_policy=_scheduling_policy(spec, workers),
    )
