"""The spec of a DistTrainingRun, one field at a time: the one place a field of the API is declared. Pure data.

Each Field says what the API server needs (type, default, bounds, enum, pattern, the CEL rules and their
messages, whether it may change after creation), what the operator needs (where the parsed value lives on
RunSpec, where it goes in the TFJob, the PVC or the trainer's command line) and what a reader needs (the
description). Everything else is derived from SPEC:

- crd.py generates the CRD's spec schema; `make docs` writes it to crds/disttrainingrun.yaml and
  `python docs/gen.py --check` (a unit test) fails when the committed file differs;
- spec.parse_run admits a run the way the API server does (known fields, types, bounds, enums, patterns,
  schema defaults, the CEL rules' Python twins), then applies the operator's own defaults;
- builders.effective_spec writes a RunSpec back in the API's shape;
- docs/gen.py renders docs/api.md's field table.

A Field and what is read off it (bounds, rules, messages) are schema.py's; the grammars of names and values,
grammar.py's. How to add a field: docs/api.md#adding-a-spec-field.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from dtr_contract import disk, flags, layout

from . import grammar
from .fields_disruption import DISRUPTION
from .fields_objectstore import OBJECT_STORE, SPEC_RULES, STORAGE_URI, STORAGE_URI_RULE, is_s3, s3_uri_cel
from .fields_params import PARAMS, VALIDATE_EVERY
from .fields_storage import STORAGE, no_volume_rule
from .schema import MAX_KEY_LENGTH, Field, Pattern, Rule, To, cel_regex

DEFAULT_TRAINER_IMAGE = "localhost/distml/trainer:0.1.0"  # --trainer-image's default (docs/images.md#names)
DEFAULT_CODE_KEY = "model.py"  # spec.training.code.key when configMap is set and key is not
CONFIGMAP_LIMIT = "1 MiB"  # the API server's limit on a ConfigMap's data (so on a file sent in one)


def _quantity_text(n: int) -> str:
    """Bytes as the quantity a person writes: 1Gi, 1Ti."""
    return f"{n >> 40}Ti" if n % (1 << 40) == 0 else f"{n >> 30}Gi"


DATASET_MAX_SIZE_LIMIT = _quantity_text(disk.DATASET_MAX_BYTES_LIMIT)  # spec.training.datasetSource.maxSize's bound

# "<name>-worker-<index>" must stay a 63-character DNS label for up to 64 workers (index <= 63):
# 52 + len("-worker-63") = 62, one character to spare.
MAX_NAME_LENGTH = 52
BUILTIN_DATASETS = ("mnist", "fashion_mnist", "digits", "synthetic")
MAX_ALLOWED_PUBLISHERS = 16  # spec.export.allowedPublishers: run names (each a few lines of a record on the volume)
RESERVED_LABEL_PREFIXES = ("distml.dev/", "training.kubeflow.org/")


def _npz_or_builtin(value: str) -> bool:
    return value in BUILTIN_DATASETS or (value.endswith(".npz") and grammar.relative_path(value))


def _dataset_allowed(training: Mapping[str, Any]) -> bool:
    """The dataset rule's twin: an s3:// URI (fields_objectstore.py); with code, any relative path its load_data
    reads; else a built-in or a .npz."""
    dataset = training.get("dataset")
    if dataset is None or is_s3(dataset):
        return dataset is None or grammar.s3_uri(dataset)
    return grammar.relative_path(dataset) if "code" in training else _npz_or_builtin(dataset)


def _keys(what: str) -> Rule:
    return Rule(
        f"self.all(k, k.matches('^{cel_regex(grammar.LABEL_KEY)}$'))",
        f"keys must be {what} keys: {grammar.KEY_GRAMMAR}",
        lambda m: all(re.fullmatch(grammar.LABEL_KEY, k) for k in m),
    )


def _string_map(name: str, attr: str, description: str, entries: int, value_max: int, value: Pattern | None,
                what: str, to: To, rules: tuple[Rule, ...] = ()) -> Field:  # fmt: skip
    return Field(name, "map", description, attr=attr, max_items=entries, max_key_length=MAX_KEY_LENGTH, to=to,
                 rules=(_keys(what), *rules),
                 items=Field("value", "string", max_length=value_max, pattern=value))  # fmt: skip


def _quantities(name: str, description: str) -> Field:
    quantity = Field("quantity", "quantity", max_length=64,
                     pattern=Pattern(grammar.QUANTITY, "must be a quantity such as 500m or 2Gi"))  # fmt: skip
    return Field(name, "map", description, max_items=4, max_key_length=MAX_KEY_LENGTH, items=quantity)


# ---- affinity: the pod spec's, with bounds (a run's body stays small: docs/performance.md#operator-memory) ----

_ATOMIC = {"x-kubernetes-list-type": "atomic"}


def _strings(name: str, items: int, length: int, description: str = "") -> Field:
    return Field(name, "array", description, max_items=items, extra=_ATOMIC,
                 items=Field("item", "string", max_length=length))  # fmt: skip


def _requirement(operators: tuple[str, ...]) -> Field:
    return Field("requirement", "object", fields=(
        Field("key", "string", "The label key (a node's field with matchFields).", max_length=MAX_KEY_LENGTH),
        Field("operator", "string", "How key relates to values.", enum=operators),
        _strings("values", 4, 63, "The values (none with Exists and DoesNotExist; one with Gt and Lt)."),
    ))  # fmt: skip


_NODE_REQUIREMENT = _requirement(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))
_NODE_TERM = Field("term", "object", fields=(
    Field("matchExpressions", "array", "Requirements on the node's labels.", max_items=2, items=_NODE_REQUIREMENT,
          extra=_ATOMIC),
    Field("matchFields", "array", "Requirements on the node's fields.", max_items=1, items=_NODE_REQUIREMENT,
          extra=_ATOMIC),
))  # fmt: skip
_LABEL_SELECTOR = Field("labelSelector", "object", "The pods it selects (absent: none).", fields=(
    Field("matchLabels", "map", "Labels the pods must have.", max_items=2, max_key_length=MAX_KEY_LENGTH,
          items=Field("value", "string", max_length=63)),
    Field("matchExpressions", "array", "Requirements on the pods' labels.", max_items=1, extra=_ATOMIC,
          items=_requirement(("In", "NotIn", "Exists", "DoesNotExist"))),
))  # fmt: skip
_POD_TERM = Field("term", "object", fields=(
    _LABEL_SELECTOR,
    _strings("namespaces", 2, 63, "The namespaces the pods are in (default: the run's)."),
    Field("topologyKey", "string", "The node label whose value defines the domain (e.g. kubernetes.io/hostname).",
          max_length=MAX_KEY_LENGTH),
    Field("namespaceSelector", "object", "The namespaces, by their labels, the pods are in.", fields=(
        dataclasses.replace(_LABEL_SELECTOR.child("matchLabels"), max_items=1),
        _LABEL_SELECTOR.child("matchExpressions"),
    )),
    _strings("matchLabelKeys", 1, MAX_KEY_LENGTH, "Label keys of the worker pod whose values join labelSelector."),
    _strings("mismatchLabelKeys", 1, MAX_KEY_LENGTH, "Label keys whose values the pods must not share."),
))  # fmt: skip
_WEIGHT = Field("weight", "integer", "Its weight ({bounds}).", format="int32", minimum=1, maximum=100)


def _preferred(term: str, of: Field) -> Field:
    weighted = Field("weighted", "object",
                     fields=(_WEIGHT, dataclasses.replace(of, name=term, description="The term.")))  # fmt: skip
    return Field("preferredDuringSchedulingIgnoredDuringExecution", "array", "Terms the scheduler prefers.",
                 max_items=2, items=weighted, extra=_ATOMIC)  # fmt: skip


_NODE_AFFINITY = Field("nodeAffinity", "object", "Node affinity, as in a pod spec.", fields=(
    Field("requiredDuringSchedulingIgnoredDuringExecution", "object", "Terms a node must meet (any one).", fields=(
        Field("nodeSelectorTerms", "array", "The terms, ORed.", max_items=2, items=_NODE_TERM, extra=_ATOMIC),
    )),
    _preferred("preference", _NODE_TERM),
))  # fmt: skip


def _pod_affinity(name: str, what: str) -> Field:
    return Field(name, "object", f"{what}, as in a pod spec.", fields=(
        Field("requiredDuringSchedulingIgnoredDuringExecution", "array", "Terms every worker pod must meet.",
              max_items=2, items=_POD_TERM, extra=_ATOMIC),
        _preferred("podAffinityTerm", _POD_TERM),
    ))  # fmt: skip


_LABEL_VALUE = Pattern(grammar.LABEL_VALUE, "must be a label value")
_RELATIVE = f"self.dataset.matches('^{grammar.NPZ_PATH}$') && !self.dataset.startsWith('/') && " \
            f"!self.dataset.matches('{grammar.DOT_SEGMENT}')"
_DATASET_RULE = (
    f"!has(self.dataset) || ({s3_uri_cel('dataset')}) || (has(self.code) ? ({_RELATIVE}) : (self.dataset in "
    f"[{', '.join(repr(d) for d in BUILTIN_DATASETS)}] || (self.dataset.endsWith('.npz') && {_RELATIVE})))"
)
_DNS_SUBDOMAIN = "a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"

CODE = Field("code", "object",
    "Your own model and data loader instead of the built-in model (docs/own-model.md): a Python file in a "
    f"ConfigMap of the run's namespace (configMap, key), mounted read-only at {layout.CODE_DIR} in every worker, "
    "or a module importable in spec.image (module). Exactly one of configMap and module.",
    attr="code", doc="`dtr submit FILE.py` creates the ConfigMap: [own-model.md](own-model.md).", fields=(
    Field("configMap", "string",
          f"A ConfigMap in the run's namespace holding the file (at most {CONFIGMAP_LIMIT}, the API server's limit "
          "on a ConfigMap). The operator waits (CodeNotFound) until it and its key exist, and records the file's "
          "SHA-256 in status.code before it starts the workers.",
          attr="code.config_map", min_length=1, max_length=253, to=To("pod", "spec.volumes.2.configMap.name"),
          pattern=Pattern(grammar.DNS1123_SUBDOMAIN, f"must be a ConfigMap name, {_DNS_SUBDOMAIN}", cel=True)),
    Field("module", "string",
          "A Python module importable in spec.image that defines build_model and load_data (an image of your own "
          "built FROM the trainer image; spec.image must pass the operator's --allowed-images).",
          attr="code.module", min_length=1, max_length=253, to=To("trainer", flags.CODE_MODULE),
          pattern=Pattern(grammar.PY_MODULE, "must be a Python module name: identifiers joined by '.'", cel=True)),
    Field("key", "string",
          "The file's key in the ConfigMap: a file name ending in .py (default {default}). Only with configMap.",
          attr="code.key", default=DEFAULT_CODE_KEY, schema_default=False, max_length=253,
          not_with=("module", "is only for a file in code.configMap"),
          pattern=Pattern(grammar.CODE_KEY,
                          "must be a ConfigMap key naming a Python file: letters, digits, '-', '_' and "
                          "'.', ending in .py", cel=True)),
), rules=(
    Rule("has(self.configMap) != has(self.module)",
         "must set exactly one of configMap (a file sent with the run) and module (a module in your image)",
         lambda c: ("configMap" in c) != ("module" in c)),
))  # fmt: skip

DATASET_SOURCE = Field("datasetSource", "object",
    "Training data downloaded over HTTPS once into the volume's data cache (data/cache/sha256/<sha256>/<file>) "
    "and checked against its SHA-256 before any worker trains on it; then dataset is not passed. A mismatch fails "
    "the run naming both digests.",
    attr="training.dataset_source", doc="[trainer.md](trainer.md#data-from-a-url)", fields=(
    Field("url", "string", "An https:// URL ending in the file's name (no user:password@; a query is allowed).",
          min_length=1, max_length=2048, to=To("trainer", flags.DATASET_URL),
          pattern=Pattern(grammar.HTTPS_URL, "must be an https:// URL with a host and a file name, without credentials",
                          cel=True)),
    Field("sha256", "string", "The file's SHA-256, 64 lower-case hex digits (sha256sum FILE).",
          min_length=64, max_length=64,
          to=To("trainer", flags.DATASET_SHA256),
          pattern=Pattern(grammar.SHA256_HEX, "must be 64 lower-case hex digits (a SHA-256)", cel=True)),
    Field("maxSize", "string",
          "The largest file the workers download, a Kubernetes quantity such as 500Mi (default {default}, at most "
          f"{DATASET_MAX_SIZE_LIMIT}, and no more than the operator's --max-storage). A larger Content-Length is "
          "refused before a byte is written, a longer body stopped at it; either fails the run.",
          default=_quantity_text(disk.DATASET_MAX_BYTES), max_length=32, to=To("trainer", flags.DATASET_MAX_BYTES),
          rules=(Rule(f"isQuantity(self) && !quantity(self).isLessThan(quantity('1')) && "
                      f"!quantity(self).isGreaterThan(quantity('{DATASET_MAX_SIZE_LIMIT}'))",
                      f"must be a Kubernetes quantity from 1 (byte) to {DATASET_MAX_SIZE_LIMIT}, such as 500Mi",
                      lambda v: grammar.quantity_within(v, "1", DATASET_MAX_SIZE_LIMIT)),),
          doc="[operator.md](operator.md#disk-what-holds-a-run-to-its-size)"),
    Field("timeoutSeconds", "integer",
          "Seconds the download may take, every try and the pauses between them together ({bounds}); a slower one "
          "fails the run.",
          default=disk.DATASET_TIMEOUT_SECONDS, format="int32", minimum=disk.DATASET_TIMEOUT_LIMITS[0],
          maximum=disk.DATASET_TIMEOUT_LIMITS[1], to=To("trainer", flags.DATASET_TIMEOUT_SECONDS)),
), rules=(
    Rule("has(self.url) && has(self.sha256)", "must set both url and sha256 (the download is checked against it)",
         lambda d: "url" in d and "sha256" in d),
))  # fmt: skip

TRAINING = Field("training", "object", "The model, the data and the optimisation settings passed to the trainer.",
                 attr="training", default={}, fields=(
    Field("model", "string",
          "Model architecture: cnn (small Keras CNN), dropout (the CNN with dropout) or batch_norm (the CNN with "
          "batch normalisation). Ignored with code.",
          attr="training.model", default="cnn", enum=("cnn", "dropout", "batch_norm"), to=To("trainer", flags.MODEL)),
    CODE,
    Field("dataset", "string",
          "Training data: mnist, fashion_mnist (Keras loaders, cached on the volume), digits (scikit-learn's "
          "bundled 8x8 digits upscaled to 28x28; needs no network), synthetic, or a relative path to a .npz file "
          "under <volume>/data/ (no leading '/', no '..'). With code: passed to its load_data as given, and may "
          "also name any file or directory under <volume>/data/. Or an s3:// URI in spec.objectStore: a file, or a "
          "prefix of many (TFRecord, .npz or .csv; docs/object-storage.md).",
          attr="training.dataset", default="mnist", min_length=1, max_length=253, to=To("trainer", flags.DATASET)),
    DATASET_SOURCE,
    Field("epochs", "integer", "Passes over the training data ({bounds}).", attr="training.epochs", default=3,
          format="int32", minimum=1, maximum=1000, to=To("trainer", flags.EPOCHS)),
    Field("batchSizePerWorker", "integer",
          "Batch size on each worker ({bounds}); the global batch is batchSizePerWorker x workers.",
          attr="training.batch_size_per_worker", default=64, format="int32", minimum=1, maximum=4096,
          to=To("trainer", flags.BATCH_SIZE_PER_WORKER)),
    Field("stepsPerEpoch", "integer",
          "Steps per epoch ({bounds}). Unset: derived by the trainer from the dataset size and the global batch.",
          attr="training.steps_per_epoch", format="int32", minimum=1, maximum=1_000_000,
          to=To("trainer", flags.STEPS_PER_EPOCH), doc_default="unset: derived by the trainer"),
    Field("learningRate", "number", "Adam learning rate ({bounds}).", attr="training.learning_rate",
          default=0.001, minimum=0, exclusive_minimum=True, maximum=10, to=To("trainer", flags.LEARNING_RATE)),
    Field("seed", "integer", "Random seed for weights and data order ({bounds}).", attr="training.seed", default=42,
          format="int64", minimum=0, maximum=2**31 - 1, to=To("trainer", flags.SEED)),
    Field("metric", "string",
          "The evaluation metric the run reports as its headline (status.headline, the METRIC column), by its "
          "Keras name, e.g. mae. Unset: accuracy when the model reports it, else loss.",
          attr="training.metric", min_length=1, max_length=63, to=To("trainer", flags.METRIC),
          pattern=Pattern(grammar.METRIC_NAME,
                          "must be a metric name: letters, digits and '_', not starting with a digit", cel=True),
          doc_default="accuracy, else loss"),
    VALIDATE_EVERY,
    PARAMS,
), rules=(
    Rule(_DATASET_RULE,
         f"must be {', '.join(BUILTIN_DATASETS)}, or a relative path on the volume (letters, digits, '._-/'; no "
         "leading '/', no '.' or '..' segments) to a .npz file, or with spec.training.code to any file or "
         "directory its load_data reads, or an s3:// URI (s3://<bucket>[/<prefix>], no '.' or '..' segment)",
         _dataset_allowed, subject="dataset", field_path=True),
))  # fmt: skip

EXPORT = Field("export", "object", "Where the trained model goes.", default={}, rules=(STORAGE_URI_RULE,), fields=(
    STORAGE_URI,
    Field("modelName", "string",
          f"Model name; the model lands at {layout.export_dir('<modelName>')}/<version>/ (TF Serving layout, "
          "version = 1 + the largest existing version). Default: metadata.name.",
          attr="model_name", min_length=1, max_length=63, to=To("trainer", flags.EXPORT_DIR),
          pattern=Pattern(grammar.MODEL_NAME, "must be lower-case letters, digits, '-', '_' and '.', starting and "
                          "ending with a letter or digit (it is one directory name)", cel=True),
          doc_default="`metadata.name`", not_with=("storageUri", "names a model on the volume")),
    Field("allowedPublishers", "array",
          "Other runs of the namespace, by name, that may also publish versions of this model (modelName, or "
          "storageUri) while a run of this run's name owns it. The first run to export a model there owns it (a run "
          "created again under its name is the same owner, and its list replaces the last one); another run's export "
          "is refused before it trains (ModelNameOwned) unless the owner lists it here.",
          attr="allowed_publishers", max_items=MAX_ALLOWED_PUBLISHERS, extra=_ATOMIC,
          doc="What it stops and what it does not: [models.md](models.md#who-may-publish-a-model)",
          items=Field("run", "string", max_length=MAX_NAME_LENGTH,
                      pattern=Pattern(grammar.DNS1035_LABEL, "must be a run name (a DNS-1035 label)"))),
))  # fmt: skip

TOLERATION = Field("toleration", "object", fields=(
    Field("key", "string", "The taint key; empty with operator Exists matches every taint.",
          max_length=MAX_KEY_LENGTH),
    Field("operator", "string", "Exists or Equal (default Equal).", enum=("Exists", "Equal")),
    Field("value", "string", "The taint value to match (Equal only).", max_length=63),
    Field("effect", "string", "The taint effect to match; unset matches every effect.",
          enum=("NoSchedule", "PreferNoSchedule", "NoExecute")),
    Field("tolerationSeconds", "integer", "With NoExecute, how long the pod stays bound after the taint appears.",
          format="int64"),
), rules=(
    Rule("!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
         "a toleration with operator Exists must not set value",
         lambda t: t.get("operator") != "Exists" or not t.get("value"), named=False),
    Rule("!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
         "tolerationSeconds is only for effect NoExecute",
         lambda t: "tolerationSeconds" not in t or t.get("effect") == "NoExecute", named=False),
))  # fmt: skip

SCHEDULING_POLICY = Field("schedulingPolicy", "object",
    "Gang scheduling of the workers, passed to the TFJob's runPolicy.schedulingPolicy (used when the "
    "training-operator runs with a gang scheduler: Volcano or scheduler-plugins).",
    attr="scheduling_policy", doc="[scheduling.md](scheduling.md#gang-scheduling)", fields=(
    Field("minAvailable", "integer", "Workers that must be placed together before any starts (at most spec.workers).",
          attr="scheduling_policy.min_available", format="int32", minimum=1,
          to=To("tfjob", "spec.runPolicy.schedulingPolicy.minAvailable")),
    Field("queue", "string", "The gang scheduler's queue (Volcano).", attr="scheduling_policy.queue",
          max_length=253, to=To("tfjob", "spec.runPolicy.schedulingPolicy.queue")),
    Field("priorityClass", "string", "The PriorityClass of the gang (PodGroup).",
          attr="scheduling_policy.priority_class", max_length=253,
          to=To("tfjob", "spec.runPolicy.schedulingPolicy.priorityClass")),
    Field("scheduleTimeoutSeconds", "integer", "How long the gang may wait to be placed (scheduler-plugins).",
          attr="scheduling_policy.schedule_timeout_seconds", format="int32", minimum=1,
          to=To("tfjob", "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds")),
))  # fmt: skip

WATCHDOG = Field("watchdog", "object",
    "The stall watchdog: a Running run where no epoch has finished for stallFactor x its mean epoch time (and at "
    "least minStallSeconds) gets the condition Stalled and a Warning event naming the silent workers; with "
    "onStall Restart its workers are also restarted from their backup.",
    attr="watchdog", default={}, doc="[below](#stalled-runs)", fields=(
    Field("enabled", "boolean", "false turns the watchdog off for this run (default true).",
          attr="watchdog.enabled", default=True),
    Field("stallFactor", "number",
          "k: stalled when no epoch has finished for k x the mean epoch time ({bounds}, default {default}).",
          # Whole bounds: the API server checks an integer value against a fractional minimum as truncated (1 passed
          # a minimum of 1.5), which the parser would not.
          attr="watchdog.stall_factor", default=5, minimum=2, maximum=100),
    Field("minStallSeconds", "integer",
          "The floor: never stalled sooner than this many seconds after the last epoch ended, or, before the "
          "first epoch (which includes loading the data and tracing), after the workers started running "
          "({bounds}, default {default}).",
          attr="watchdog.min_stall_seconds", default=600, format="int32", minimum=10, maximum=604800),
    Field("onStall", "string",
          "What a stall does: Report (the condition and the event) or Restart (also suspend and resume the TFJob: "
          "its pods go and are made again, and resume from their backup).",
          attr="watchdog.on_stall", default="Report", enum=("Report", "Restart")),
    Field("maxRestarts", "integer",
          "With onStall Restart: restarts for stalls before the run fails with reason Stalled ({bounds}, default "
          "{default}).",
          attr="watchdog.max_restarts", default=3, format="int32", minimum=0, maximum=20),
))  # fmt: skip

SPEC = Field("spec", "object",
    "What to train, where to put it and where to run it. Immutable after creation except spec.suspend: to change "
    "a run, create a new DistTrainingRun.",
    default={}, fields=(
    Field("workers", "integer",
          "Number of worker replicas in the TFJob ({bounds}). Worker 0 is the chief: it exports the model and "
          "reports the metrics.",
          attr="workers", default=2, format="int32", minimum=1, maximum=64,
          to=To("tfjob", "spec.tfReplicaSpecs.Worker.replicas")),
    Field("image", "string",
          "Trainer image run by every worker. Default: the operator's --trainer-image ({default}). Another image "
          "must match the operator's --allowed-images, or the run fails (ImageNotAllowed).",
          attr="image", default=DEFAULT_TRAINER_IMAGE, schema_default=False, min_length=1, max_length=512,
          to=To("container", "image"), doc_default="the operator's `--trainer-image` (`{default}`)",
          doc="[operator.md](operator.md#what-a-run-lets-its-author-do)"),
    Field("imagePullPolicy", "string", "Pull policy of the trainer image.", attr="image_pull_policy",
          default="IfNotPresent", enum=("Always", "IfNotPresent", "Never"), to=To("container", "imagePullPolicy")),
    TRAINING,
    STORAGE,
    EXPORT,
    Field("resources", "object", "Compute resources of each worker's tensorflow container (as in a Pod's resources).",
          attr="resources", to=To("container", "resources"), fields=(
        _quantities("limits", 'Maximum resources per worker, e.g. cpu "2", memory 4Gi.'),
        _quantities("requests", 'Resources reserved per worker, e.g. cpu "1", memory 2Gi.'),
    )),
    Field("restartPolicy", "string",
          "Worker restart policy, passed to the TFJob: OnFailure (restart a failed worker; it resumes from its "
          "backup), ExitCode (restart only on retryable exit codes >= 128), or Never.",
          attr="restart_policy", default="OnFailure", enum=("Never", "OnFailure", "ExitCode"),
          to=To("tfjob", "spec.tfReplicaSpecs.Worker.restartPolicy"),
          doc="Why `OnFailure` stays the default: [below](#restartpolicy-onfailure-or-exitcode)."),
    Field("backoffLimit", "integer", "Worker restarts allowed before the run fails ({bounds}).",
          attr="backoff_limit", default=3, format="int32", minimum=0, maximum=100,
          to=To("tfjob", "spec.runPolicy.backoffLimit")),
    Field("activeDeadlineSeconds", "integer",
          "Fail the run if it has been running longer than this many seconds (optional, {bounds}).",
          attr="active_deadline_seconds", format="int64", minimum=1,
          to=To("tfjob", "spec.runPolicy.activeDeadlineSeconds")),
    Field("ttlSecondsAfterFinished", "integer",
          "Delete the finished TFJob (and its pods) this many seconds after it ends (optional, {bounds}: the "
          "operator reads the chief's final metrics from its pod after the job ends, and a shorter TTL would race "
          "it). The run, its status and the PVC stay.",
          attr="ttl_seconds_after_finished", format="int32", minimum=60,
          to=To("tfjob", "spec.runPolicy.ttlSecondsAfterFinished")),
    Field("suspend", "boolean",
          "true suspends the run: its TFJob is suspended and the worker pods go; false resumes it, and the "
          "workers continue from their last finished epoch (BackupAndRestore). The one field that can change "
          "after creation. Not with queueName (Kueue suspends those).",
          attr="suspend", default=False, mutable=True, to=To("tfjob", "spec.runPolicy.suspend"),
          doc="[scheduling.md](scheduling.md#suspend-and-resume)"),
    _string_map("nodeSelector", "placement.node_selector",
                "Node labels every worker pod's node must have (the pod's nodeSelector).", 8, 63, _LABEL_VALUE,
                "label", To("pod", "spec.nodeSelector")),
    Field("tolerations", "array", "Taints the worker pods tolerate (the pod's tolerations).",
          attr="placement.tolerations", max_items=8, items=TOLERATION, to=To("pod", "spec.tolerations"),
          extra={"x-kubernetes-list-type": "atomic"}),
    Field("affinity", "object",
          "The worker pods' affinity (nodeAffinity, podAffinity, podAntiAffinity), as in a pod spec, with fewer "
          "terms (kubectl explain shows each bound); checked in full by the API server when the operator creates "
          "the TFJob.",
          attr="placement.affinity", to=To("pod", "spec.affinity"),
          doc="A required podAntiAffinity term that puts the workers on separate nodes needs "
              "storage.accessMode ReadWriteMany or claimName: [below](#storage-and-pod-anti-affinity).", fields=(
        _NODE_AFFINITY,
        _pod_affinity("podAffinity", "Pod affinity"),
        _pod_affinity("podAntiAffinity", "Pod anti-affinity"),
    )),
    Field("priorityClassName", "string", "The worker pods' PriorityClass (it must exist when the pods are created).",
          attr="placement.priority_class_name", max_length=253, to=To("pod", "spec.priorityClassName"),
          pattern=Pattern(grammar.DNS1123_SUBDOMAIN, "must be a PriorityClass name (a DNS subdomain)")),
    _string_map("podLabels", "placement.pod_labels",
                "Extra labels on every worker pod (e.g. for cost reports): only keys the operator's "
                "--allowed-pod-labels admits (none by default). Keys under distml.dev/ and "
                "training.kubeflow.org/ are the operator's and the training-operator's.",
                8, 63, _LABEL_VALUE, "label", To("pod", "metadata.labels"), rules=(
        Rule(f"self.all(k, {' && '.join(f'!k.startsWith({p!r})' for p in RESERVED_LABEL_PREFIXES)})",
             f"keys under {' and '.join(RESERVED_LABEL_PREFIXES)} are reserved",
             lambda m: not any(k.startswith(RESERVED_LABEL_PREFIXES) for k in m)),
    )),
    _string_map("podAnnotations", "placement.pod_annotations",
                "Extra annotations on every worker pod (e.g. for a profiler): only keys the operator's "
                "--allowed-pod-annotations admits (none by default; never a service mesh's).", 8, 1024, None,
                "annotation", To("pod", "metadata.annotations")),
    Field("queueName", "string",
          "A Kueue LocalQueue in the run's namespace: the TFJob gets the label kueue.x-k8s.io/queue-name and is "
          "created suspended, and Kueue starts it when the queue admits it (docs/scheduling.md).",
          attr="queue_name", max_length=63, to=To("tfjob", "metadata.labels[kueue.x-k8s.io/queue-name]"),
          pattern=Pattern(grammar.DNS1123_LABEL, "must be a LocalQueue name (a DNS label)"),
          doc="[scheduling.md](scheduling.md#queues-kueue)"),
    Field("workloadPriorityClass", "string",
          "A Kueue WorkloadPriorityClass (only with queueName): the TFJob gets the label "
          "kueue.x-k8s.io/priority-class, and Kueue orders the queue by its value and may preempt a run of a "
          "lower one, which waits suspended with its epochs kept. Only a name the operator's "
          "--allowed-priority-classes admits (none by default).",
          attr="workload_priority_class", max_length=63,
          to=To("tfjob", "metadata.labels[kueue.x-k8s.io/priority-class]"),
          pattern=Pattern(grammar.DNS1123_SUBDOMAIN, "must be a WorkloadPriorityClass name (a DNS subdomain)"),
          doc="[scheduling.md](scheduling.md#priority-and-preemption)"),
    SCHEDULING_POLICY,
    WATCHDOG,
    DISRUPTION,
    OBJECT_STORE,
), rules=(
    *SPEC_RULES,
    no_volume_rule(BUILTIN_DATASETS),
    Rule("!has(self.queueName) || !self.suspend",
         "cannot be true with spec.queueName: Kueue suspends and resumes queued runs (docs/scheduling.md)",
         lambda s: "queueName" not in s or not s.get("suspend"), subject="suspend"),
    Rule("!has(self.workloadPriorityClass) || has(self.queueName)",
         "needs spec.queueName: only Kueue reads it (docs/scheduling.md)",
         lambda s: "workloadPriorityClass" not in s or "queueName" in s, subject="workloadPriorityClass"),
    Rule("!has(self.schedulingPolicy) || !has(self.schedulingPolicy.minAvailable) || "
         "self.schedulingPolicy.minAvailable <= self.workers",
         "must be at most spec.workers",
         lambda s: (s.get("schedulingPolicy") or {}).get("minAvailable", 0) <= s["workers"],
         subject="schedulingPolicy.minAvailable"),
))  # fmt: skip

# metadata is not part of the schema, so the API server checks the name with rules at the root.
NAME = Field("name", "string", rules=(
    Rule(f"self.metadata.name.matches('^{grammar.DNS1035_LABEL}$')",
         "must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter and ending with a "
         "letter or digit",
         lambda name: re.fullmatch(grammar.DNS1035_LABEL, name) is not None, subject="metadata.name"),
    Rule(f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
         f"must be at most {MAX_NAME_LENGTH} characters, so that the worker pods and services "
         '"<name>-worker-<index>" stay valid 63-character names',
         lambda name: len(name) <= MAX_NAME_LENGTH, subject="metadata.name"),
))  # fmt: skip


def find(path: str) -> Field:
    """The field at a dotted path under spec, e.g. "training.model"."""
    f = SPEC
    for name in path.split("."):
        f = f.child(name)
    return f
