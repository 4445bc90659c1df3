"""The run's spec as typed values, parsed from a DistTrainingRun dict. Pure: no I/O.

Every field, its default and its rules are declared once, in fields.py, which also generates the CRD's schema
(crd.py). parse_run admits a run as the API server does with that schema (known fields, types, bounds, enums,
patterns, the schema's defaults, then the CEL rules' Python twins), applies the operator's own defaults and
returns a RunSpec; so `dtr render` and `dtr run`, which never see an API server, accept and reject what
`kubectl apply` would, with the field named. One rule more, which no schema states: a run that contradicts itself
so that it could never run all its workers is refused too (never_runs); the operator fails such a run InvalidSpec.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dtr_contract import params as run_params

from . import fields
from .api import API_VERSION, KIND, SWEEP_LABEL, TRIAL_LABEL
from .fields import DEFAULT_TRAINER_IMAGE, NAME, SPEC, find
from .objectstore import ObjectStoreSpec
from .schema import INT_RANGE, Field, bounds_text, message, rules, walk
from .spec_conflicts import never_runs

# What the trainer must know too (tests/trainer/test_contract.py reads them here).
MODELS = find("training.model").enum
BUILTIN_DATASETS = fields.BUILTIN_DATASETS


class SpecError(ValueError):
    """A run the API server would reject: every error found (as kubectl lists them), each naming its field;
    `where` the file and run they are in, when known."""

    def __init__(self, *errors: str, where: str = "") -> None:
        self.errors, self.where = errors, where
        text = errors[0] if len(errors) == 1 else f"{len(errors)} errors: " + "; ".join(errors)
        super().__init__(f"{where}: {text}" if where else text)

    def listed(self) -> str:
        """For a terminal: the place, then one error per line."""
        if len(self.errors) == 1:
            return str(self)
        head = f"{self.where}: " if self.where else ""
        return f"{head}{len(self.errors)} errors:\n" + "\n".join(f"  {e}" for e in self.errors)


def _collect(checks: Iterable[Callable[[], Any]]) -> list[Any]:
    """Each check's value, in order; every SpecError among them raised at the end as one (all its errors)."""
    values: list[Any] = []
    errors: list[str] = []
    for check in checks:
        try:
            values.append(check())
        except SpecError as err:
            errors.extend(err.errors)
    if errors:
        raise SpecError(*errors)
    return values


def _did_you_mean(word: str, known: Iterable[str]) -> str:
    """ (did you mean 'x'?) for a near miss of a known word, case aside; else nothing."""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.7)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def _default(path: str) -> Any:
    return find(path).default


@dataclass(frozen=True)
class TrainingSpec:
    model: str = _default("training.model")
    dataset: str = _default("training.dataset")
    epochs: int = _default("training.epochs")
    batch_size_per_worker: int = _default("training.batchSizePerWorker")
    steps_per_epoch: int | None = None
    learning_rate: float = _default("training.learningRate")
    seed: int = _default("training.seed")
    metric: str | None = None  # unset: the trainer's choice (accuracy, else loss)
    dataset_source: Mapping[str, Any] | None = None  # {url, sha256, maxSize, timeoutSeconds}: no --dataset
    params: Mapping[str, Any] = field(default_factory=dict)  # spec.training.params: ctx.params (fields_params.py)
    validate_every: int = _default("training.validateEvery")


@dataclass(frozen=True)
class CodeSpec:
    """spec.training.code: the run's own model and data loader, a file in a ConfigMap or a module in the image."""

    config_map: str | None = None
    module: str | None = None
    key: str = _default("training.code.key")  # the file's key in config_map (meaningless with module)

    @property
    def file_key(self) -> str | None:
        """The ConfigMap's key the workers read, or None for a module."""
        return self.key if self.config_map else None


@dataclass(frozen=True)
class StorageSpec:
    claim_name: str | None = None
    size: str = _default("storage.size")
    storage_class_name: str | None = None
    access_mode: str = _default("storage.accessMode")
    reclaim_policy: str = _default("storage.reclaimPolicy")
    volume: bool = _default("storage.volume")  # false: no claim; an emptyDir per pod, the backups in backup_uri
    backup_uri: str | None = None  # spec.storage.backupUri: the epoch backups in the object store


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
class WatchdogSpec:
    """spec.watchdog: when a Running run counts as stalled, and what the operator does then (watchdog.py)."""

    enabled: bool = _default("watchdog.enabled")
    stall_factor: float = _default("watchdog.stallFactor")
    min_stall_seconds: int = _default("watchdog.minStallSeconds")
    on_stall: str = _default("watchdog.onStall")
    max_restarts: int = _default("watchdog.maxRestarts")


@dataclass(frozen=True)
class DisruptionSpec:
    """spec.disruption: whether a run Kubernetes took workers away from starts again, and how often (disruption.py)."""

    resume: bool = _default("disruption.resume")
    max_resumes: int = _default("disruption.maxResumes")
    wait_seconds: int = _default("disruption.waitSeconds")
    protect: bool = _default("disruption.protect")  # a PodDisruptionBudget over the workers (reconcile/budget.py)
    save_on_stop: bool = _default("disruption.saveOnStop")  # the trainer's --backup-on-sigterm


@dataclass(frozen=True)
class RunSpec:
    """A DistTrainingRun with every default applied."""

    name: str
    namespace: str
    workers: int
    image: str
    image_pull_policy: str
    training: TrainingSpec
    storage: StorageSpec
    model_name: str
    resources: Mapping[str, Mapping[str, str | int]] = field(default_factory=dict)
    restart_policy: str = _default("restartPolicy")
    backoff_limit: int = _default("backoffLimit")
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    suspend: bool = _default("suspend")
    placement: Placement = field(default_factory=Placement)
    queue_name: str | None = None
    workload_priority_class: str | None = None
    scheduling_policy: SchedulingPolicy | None = None
    code: CodeSpec | None = None  # spec.training.code (a part of its own: the trainer's flags do not map it 1:1)
    watchdog: WatchdogSpec = field(default_factory=WatchdogSpec)
    disruption: DisruptionSpec = field(default_factory=DisruptionSpec)
    object_store: ObjectStoreSpec | None = None  # spec.objectStore (objectstore.py)
    storage_uri: str | None = None  # spec.export.storageUri: model versions in the object store, not the volume
    allowed_publishers: tuple[str, ...] | None = None  # spec.export.allowedPublishers: the trainer's ownership.py
    uid: str | None = None
    generation: int | None = None
    sweep: str | None = None  # a sweep's trial: the sweep's name (its labels, as the sweep made them)
    trial: int | None = None  # and the trial's index

    @property
    def pvc_name(self) -> str:
        """The claim the workers mount: the user's, or the one the operator creates (without a volume: none)."""
        return self.storage.claim_name or created_pvc_name(self.name)

    @property
    def has_volume(self) -> bool:
        """Whether the workers mount a claim (spec.storage.volume), or each its own emptyDir."""
        return self.storage.volume

    @property
    def creates_pvc(self) -> bool:
        return self.has_volume and self.storage.claim_name is None

    @property
    def tfjob_name(self) -> str:
        return self.name


# The parts of RunSpec that group fields (fields.py's attr "training.model" lives on RunSpec.training).
PARTS: dict[str, type] = {"training": TrainingSpec, "storage": StorageSpec, "placement": Placement,
                          "scheduling_policy": SchedulingPolicy, "code": CodeSpec,
                          "watchdog": WatchdogSpec, "disruption": DisruptionSpec,
                          "object_store": ObjectStoreSpec}  # fmt: skip


def created_pvc_name(run_name: str) -> str:
    return f"{run_name}-data"


# ---- admitting a value as the API server would -------------------------------------------------


def _fail(path: str, why: str) -> SpecError:
    return SpecError(f"{path}: {why}")


def _mapping(value: Any, path: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, f"must be an object, got {type(value).__name__}")
    return value


def _int_range(f: Field) -> tuple[int | None, int | None]:
    """The schema's bounds, else what the format holds (int32, int64)."""
    lo, hi = INT_RANGE.get(f.format or "", (None, None))
    return (lo if f.minimum is None else int(f.minimum)), (hi if f.maximum is None else int(f.maximum))


def _integer(f: Field, value: Any, path: str) -> int:
    # YAML `true` is a bool, which Python also counts as an int; the API server would refuse it.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, f"must be an integer, got {value!r}")
    lo, hi = _int_range(f)
    too_low, too_high = lo is not None and value < lo, hi is not None and value > hi
    if too_low or too_high:
        declared = f.minimum is not None and f.maximum is not None
        bounds = f"between {lo} and {hi}" if declared else f"at least {lo}" if too_low else f"at most {hi}"
        raise _fail(path, f"must be {bounds}, got {value}")
    return value


def _number(f: Field, value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(path, f"must be a number, got {value!r}")
    above = f.minimum is None or (value > f.minimum if f.exclusive_minimum else value >= f.minimum)
    if not (above and (f.maximum is None or value <= f.maximum)):  # NaN is neither
        raise _fail(path, f"must be {bounds_text(f).replace(', ', ' and ')}, got {value}")
    return float(value)


def _string(f: Field, value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, f"must be a string, got {value!r}")
    if f.min_length and len(value) < f.min_length:
        raise _fail(path, "must not be empty")
    if f.max_length is not None and len(value) > f.max_length:
        raise _fail(path, f"must be at most {f.max_length} characters")
    return _word(f, value, path)


def _word(f: Field, value: str, path: str) -> str:
    """A string that must be one of the enum's or match the schema's pattern (a CEL pattern is a rule)."""
    if f.enum and value not in f.enum:
        raise _fail(path, f"unsupported value {value!r}{_did_you_mean(value, f.enum)}: must be one of "
                          f"{', '.join(f.enum)}")  # fmt: skip
    if f.pattern is not None and not f.pattern.cel and not f.pattern.matches(value):
        raise _fail(path, f"{f.pattern.why}, got {value!r}")
    return value


def _boolean(f: Field, value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(path, f"must be true or false, got {value!r}")
    return value


def _quantity(f: Field, value: Any, path: str) -> int | str:
    """An int or a string in Kubernetes' quantity grammar (the CRD's int-or-string with a pattern)."""
    assert f.pattern is not None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str) or not f.pattern.matches(value):
        raise _fail(path, f"{f.pattern.why}, got {value!r}")
    if f.max_length is not None and len(value) > f.max_length:
        raise _fail(path, f"must be at most {f.max_length} characters")
    return value


def _object(f: Field, value: Any, path: str) -> dict[str, Any]:
    """An object: its declared fields admitted, absent ones defaulted as the schema says (or kept whole when it
    declares none: x-kubernetes-preserve-unknown-fields)."""
    obj = _mapping(value, path)
    if not f.fields:
        return dict(obj)
    unknown = [f"{path}.{name}: unknown field{_did_you_mean(str(name), f.names) or _known(f)}"
               for name in sorted(set(obj) - f.names, key=str)]  # fmt: skip
    present = _present(f, obj)
    try:
        values = _collect(lambda sub=sub, item=item: admit(sub, item, f"{path}.{sub.name}") for sub, item in present)
    except SpecError as err:
        raise SpecError(*unknown, *err.errors) from None
    if unknown:
        raise SpecError(*unknown)
    return {sub.name: value for (sub, _), value in zip(present, values, strict=True)}


def _present(f: Field, obj: Mapping[Any, Any]) -> list[tuple[Field, Any]]:
    """The declared fields obj sets, with the schema's defaults for those it leaves out (null is absent, as the
    API server treats it)."""
    present = []
    for sub in f.fields:
        item = obj.get(sub.name)
        if item is None and sub.schema_default:
            item = copy.deepcopy(sub.default)
        if item is not None:
            present.append((sub, item))
    return present


def _known(f: Field) -> str:
    return f" (known: {', '.join(sorted(f.names))})"


def _map(f: Field, value: Any, path: str) -> dict[str, Any]:
    entries = _mapping(value, path)
    if f.max_items is not None and len(entries) > f.max_items:
        raise _fail(path, f"must have at most {f.max_items} entries")
    if not all(isinstance(k, str) for k in entries):
        raise _fail(path, f"keys must be strings, got {sorted(map(repr, entries))}")
    assert f.items is not None
    items = f.items
    values = _collect(lambda k=k, v=v: admit(items, v, f"{path}.{k}") for k, v in entries.items())
    return dict(zip(entries, values, strict=True))


def _array(f: Field, value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):  # {} is not a list: the API server refuses it too
        raise _fail(path, f"must be a list, got {type(value).__name__}")
    if f.max_items is not None and len(value) > f.max_items:
        raise _fail(path, f"must have at most {f.max_items} items")
    assert f.items is not None
    items = f.items
    return _collect(lambda i=i, item=item: admit(items, item, f"{path}[{i}]") for i, item in enumerate(value))


def _params(f: Field, value: Any, path: str) -> dict[str, Any]:
    """spec.training.params: its names, entries and values as dtr_contract.params bounds them (the CRD cannot all)."""
    if wrong := run_params.problems(_mapping(value, path)):
        raise SpecError(*(f"{path}{'.' if name else ''}{name}: {why}" for name, why in wrong))
    return dict(value)


_ADMIT: dict[str, Callable[[Field, Any, str], Any]] = {
    "integer": _integer, "number": _number, "string": _string, "boolean": _boolean, "quantity": _quantity,
    "object": _object, "map": _map, "array": _array, "params": _params,
}  # fmt: skip


def admit(f: Field, value: Any, path: str) -> Any:
    """value (not null) as the API server stores it under f's schema: checked, defaulted; or SpecError."""
    admitted = _ADMIT[f.type](f, value, path)
    broken = [message(rule, path) for rule in rules(f, path) if not rule.holds(admitted)]
    if broken:
        raise SpecError(*broken)
    return admitted


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise _fail("metadata.name", "is required")
    for rule in NAME.rules:
        if not rule.holds(name):
            raise SpecError(message(rule, ""))
    return name


# ---- the operator's side: its own defaults, then RunSpec ---------------------------------------


def _operator_defaults(spec: dict[str, Any], given: Mapping[str, Any]) -> None:
    """Set in spec what the operator defaults and the schema does not, where the field is absent (given: by
    path, the defaults known only at run time). A field whose object is absent stays absent."""
    static = {path: f.default for path, f in walk(SPEC) if not f.schema_default and f.default is not None}
    for path, value in (static | dict(given)).items():
        *parents, key = path.split(".")[1:]  # below "spec"
        obj: dict[str, Any] = spec
        for name in parents:
            obj = obj.get(name, {})
        obj.setdefault(key, value)


def _stored(value: Any) -> Any:
    """A value kept whole on RunSpec: lists as tuples; objects without their empty objects; empty as unset."""
    if isinstance(value, list):
        return tuple(copy.deepcopy(item) for item in value) or None
    if isinstance(value, Mapping):
        return {k: copy.deepcopy(v) for k, v in value.items() if v != {}} or None
    return value


def _attrs(f: Field, obj: Mapping[str, Any] | None, out: dict[str, Any]) -> None:
    """out[attr] = the value of every field under f that has a place on RunSpec (None: unset)."""
    for sub in f.fields:
        value = None if obj is None else obj.get(sub.name)
        structured = any(s.attr for s in sub.fields)
        if sub.attr:
            out[sub.attr] = value if structured else _stored(value)
        if structured:
            _attrs(sub, value, out)


def _run_spec(values: Mapping[str, Any], **meta: Any) -> RunSpec:
    """RunSpec from the values by attr ("training.model"); unset values take the dataclasses' defaults."""
    top: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {head: {} for head in PARTS}
    for attr, value in values.items():
        head, _, rest = attr.partition(".")
        if value is not None and rest:
            parts[head][rest] = value
        elif value is not None and head not in PARTS:
            top[head] = value
    for head, part in PARTS.items():
        present = values.get(head, True) is not None  # a part the table declares optional may be absent
        top[head] = part(**parts[head]) if present else None
    return RunSpec(**top, **meta)


def _trial_of(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep and trial index a run's labels name (a sweep's trial), else nothing."""
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    sweep, index = labels.get(SWEEP_LABEL), labels.get(TRIAL_LABEL)
    if isinstance(sweep, str) and sweep and isinstance(index, str) and index.isdigit():
        return {"sweep": sweep, "trial": int(index)}
    return {}


def parse_run(obj: Mapping[str, Any], default_image: str = DEFAULT_TRAINER_IMAGE) -> RunSpec:
    """A DistTrainingRun dict (from the API or a file) -> RunSpec, or SpecError naming the field."""
    if obj.get("apiVersion", API_VERSION) != API_VERSION or obj.get("kind", KIND) != KIND:
        raise SpecError(f"not a {KIND} ({API_VERSION}): apiVersion={obj.get('apiVersion')!r} kind={obj.get('kind')!r}")
    meta = _mapping({} if obj.get("metadata") is None else obj.get("metadata"), "metadata")
    raw = copy.deepcopy(SPEC.default) if obj.get("spec") is None else obj.get("spec")
    name, spec = _collect((lambda: check_name(meta.get("name")), lambda: admit(SPEC, raw, "spec")))
    _operator_defaults(spec, {"spec.image": default_image, "spec.export.modelName": name})
    values: dict[str, Any] = {}
    _attrs(SPEC, spec, values)
    run = _run_spec(values, name=name, namespace=str(meta.get("namespace") or "default"), uid=meta.get("uid"),
                    generation=meta.get("generation"), **_trial_of(meta))  # fmt: skip
    if why := never_runs(run):
        raise SpecError(why)
    return run
