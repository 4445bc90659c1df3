"""spec.py: every field's default, accepted values and rejections (with the field named)."""

from __future__ import annotations

import pytest
import yaml
from dtr_operator.builders import build_tfjob
from dtr_operator.fields import MAX_NAME_LENGTH, SPEC
from dtr_operator.labels import template_labels
from dtr_operator.spec import (
    DEFAULT_TRAINER_IMAGE,
    RunSpec,
    SpecError,
    StorageSpec,
    TrainingSpec,
    parse_run,
)

from support.repo import REPO
from support.runs import make_run

# A node affinity as a pod spec has it (the CRD's schema is the pod spec's, bounded).
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}}


def test_defaults_for_an_empty_spec():
    run = parse_run(make_run({}))
    assert run == RunSpec(
        name="mnist-cnn",
        namespace="ml",
        workers=2,
        image=DEFAULT_TRAINER_IMAGE,
        image_pull_policy="IfNotPresent",
        training=TrainingSpec("cnn", "mnist", 3, 64, None, 0.001, 42),
        storage=StorageSpec(None, "1Gi", None, "ReadWriteOnce", "Retain"),
        model_name="mnist-cnn",
        resources={},
        restart_policy="OnFailure",
        backoff_limit=3,
        active_deadline_seconds=None,
        ttl_seconds_after_finished=None,
    )
    assert run.pvc_name == "mnist-cnn-data" and run.creates_pvc and run.tfjob_name == "mnist-cnn"


def test_missing_spec_and_namespace_take_defaults():
    run = parse_run({"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "metadata": {"name": "a"}})
    assert run.namespace == "default" and run.workers == 2


def test_operator_default_image_applies_only_when_unset():
    assert parse_run(make_run({}), default_image="reg/t:9").image == "reg/t:9"
    assert parse_run(make_run({"image": "mine:1"}), default_image="reg/t:9").image == "mine:1"


# (spec, attribute path on RunSpec, expected value): every field, a non-default value.
ACCEPTED = [
    ({"workers": 1}, "workers", 1),
    ({"workers": 64}, "workers", 64),
    ({"image": "reg.example/trainer:2"}, "image", "reg.example/trainer:2"),
    ({"imagePullPolicy": "Always"}, "image_pull_policy", "Always"),
    ({"imagePullPolicy": "Never"}, "image_pull_policy", "Never"),
    ({"training": {"model": "dropout"}}, "training.model", "dropout"),
    ({"training": {"model": "batch_norm"}}, "training.model", "batch_norm"),
    ({"training": {"dataset": "fashion_mnist"}}, "training.dataset", "fashion_mnist"),
    ({"training": {"dataset": "digits"}}, "training.dataset", "digits"),
    ({"training": {"dataset": "synthetic"}}, "training.dataset", "synthetic"),
    ({"training": {"dataset": "sets/my-data_v1.2.npz"}}, "training.dataset", "sets/my-data_v1.2.npz"),
    ({"training": {"dataset": "a..b.npz"}}, "training.dataset", "a..b.npz"),
    ({"training": {"epochs": 1000}}, "training.epochs", 1000),
    ({"training": {"batchSizePerWorker": 1}}, "training.batch_size_per_worker", 1),
    ({"training": {"stepsPerEpoch": 7}}, "training.steps_per_epoch", 7),
    ({"training": {"learningRate": 0.1}}, "training.learning_rate", 0.1),
    ({"training": {"learningRate": 1}}, "training.learning_rate", 1.0),
    ({"training": {"seed": 0}}, "training.seed", 0),
    ({"storage": {"claimName": "shared.data-1"}}, "storage.claim_name", "shared.data-1"),
    ({"storage": {"size": "500Mi"}}, "storage.size", "500Mi"),
    ({"storage": {"size": "2G"}}, "storage.size", "2G"),
    ({"storage": {"storageClassName": "fast"}}, "storage.storage_class_name", "fast"),
    ({"storage": {"accessMode": "ReadWriteMany"}}, "storage.access_mode", "ReadWriteMany"),
    ({"storage": {"reclaimPolicy": "Delete"}}, "storage.reclaim_policy", "Delete"),
    ({"storage": {"claimName": "x", "reclaimPolicy": "Retain"}}, "storage.reclaim_policy", "Retain"),
    ({"export": {"modelName": "digits_v2.small"}}, "model_name", "digits_v2.small"),
    ({"resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}, "resources", {"limits": {"cpu": "2", "memory": "4Gi"}}),
    ({"resources": {"requests": {"cpu": 1}}}, "resources", {"requests": {"cpu": 1}}),
    ({"restartPolicy": "Never"}, "restart_policy", "Never"),
    ({"restartPolicy": "ExitCode"}, "restart_policy", "ExitCode"),
    ({"backoffLimit": 0}, "backoff_limit", 0),
    ({"activeDeadlineSeconds": 600}, "active_deadline_seconds", 600),
    ({"ttlSecondsAfterFinished": 60}, "ttl_seconds_after_finished", 60),
    # null is "unset", as the API server treats it: the default applies.
    ({"workers": None}, "workers", 2),
    ({"image": None}, "image", DEFAULT_TRAINER_IMAGE),
    ({"training": {"learningRate": None}}, "training.learning_rate", 0.001),
    ({"storage": {"claimName": "c", "size": None}}, "storage.claim_name", "c"),
    ({"restartPolicy": None}, "restart_policy", "OnFailure"),
    # Placement, queueing, gang scheduling and suspend (docs/scheduling.md).
    ({"suspend": True}, "suspend", True),
    ({}, "suspend", False),
    ({"nodeSelector": {"pool": "gpu", "kubernetes.io/arch": "amd64"}}, "placement.node_selector",
     {"pool": "gpu", "kubernetes.io/arch": "amd64"}),
    ({"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}, "placement.tolerations",
     ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},)),
    ({"tolerations": [{"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 30}]},
     "placement.tolerations", ({"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 30},)),
    ({"tolerations": [{"key": "", "operator": "Exists"}]}, "placement.tolerations",
     ({"key": "", "operator": "Exists"},)),
    ({"affinity": AFFINITY}, "placement.affinity",
     AFFINITY),
    ({"priorityClassName": "batch-low"}, "placement.priority_class_name", "batch-low"),
    ({"podLabels": {"team": "ml", "example.com/cost-center": "a1", "empty": ""}}, "placement.pod_labels",
     {"team": "ml", "example.com/cost-center": "a1", "empty": ""}),
    ({"podAnnotations": {"sidecar.istio.io/inject": "false"}}, "placement.pod_annotations",
     {"sidecar.istio.io/inject": "false"}),
    ({"queueName": "team-a"}, "queue_name", "team-a"),
    ({"queueName": "q", "workloadPriorityClass": "a" * 63}, "workload_priority_class", "a" * 63),  # the longest
    ({"schedulingPolicy": {"queue": ""}}, "scheduling_policy.queue", ""),  # no minLength: the API server takes it
    ({"schedulingPolicy": {"minAvailable": 2, "queue": "q", "priorityClass": "p", "scheduleTimeoutSeconds": 60}},
     "scheduling_policy.min_available", 2),
    ({}, "training.params", {}),
    ({"training": {"params": {"width": 64, "dropout": 0.2, "opt": "sgd", "deep": False, "w" * 32: "x" * 32}}},
     "training.params", {"width": 64, "dropout": 0.2, "opt": "sgd", "deep": False, "w" * 32: "x" * 32}),
    ({}, "training.validate_every", 1),
    ({"training": {"validateEvery": 0}}, "training.validate_every", 0),
]  # fmt: skip


def _attr(obj, path):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize(("spec", "attr", "expected"), ACCEPTED)
def test_accepted_values(spec, attr, expected):
    assert _attr(parse_run(make_run(spec)), attr) == expected


def test_claim_name_replaces_the_created_pvc():
    run = parse_run(make_run({"storage": {"claimName": "shared"}}))
    assert run.pvc_name == "shared" and not run.creates_pvc


# (spec or None for a name test, name, the field the message must name, a word of the reason)
_SOURCE = {"url": "https://data.example/t.npz", "sha256": "ab" * 32}
REJECTED = [
    ({}, "Mnist", "metadata.name", "DNS-1035"),
    ({}, "1abc", "metadata.name", "DNS-1035"),
    ({}, "abc-", "metadata.name", "DNS-1035"),
    ({}, "a.b", "metadata.name", "DNS-1035"),
    ({}, "a" * (MAX_NAME_LENGTH + 1), "metadata.name", "at most 52"),
    ({}, "", "metadata.name", "required"),
    ({"workers": 0}, "r", "spec.workers", "between 1 and 64"),
    ({"workers": 65}, "r", "spec.workers", "between 1 and 64"),
    ({"workers": "2"}, "r", "spec.workers", "integer"),
    ({"workers": True}, "r", "spec.workers", "integer"),
    ({"image": ""}, "r", "spec.image", "empty"),
    ({"image": 3}, "r", "spec.image", "string"),
    ({"imagePullPolicy": "Sometimes"}, "r", "spec.imagePullPolicy", "one of"),
    ({"training": {"model": "resnet"}}, "r", "spec.training.model", "one of"),
    ({"training": {"dataset": "imagenet"}}, "r", "spec.training.dataset", ".npz"),
    ({"training": {"dataset": "/etc/x.npz"}}, "r", "spec.training.dataset", "leading"),
    ({"training": {"dataset": "../x.npz"}}, "r", "spec.training.dataset", ".."),
    ({"training": {"dataset": "a/../../x.npz"}}, "r", "spec.training.dataset", ".."),
    ({"training": {"dataset": "./x.npz"}}, "r", "spec.training.dataset", ".."),
    ({"training": {"dataset": "x.npz/.."}}, "r", "spec.training.dataset", ".."),
    ({"training": {"dataset": "x y.npz"}}, "r", "spec.training.dataset", ".npz"),
    ({"training": {"dataset": "data.csv"}}, "r", "spec.training.dataset", ".npz"),
    ({"training": {"epochs": 0}}, "r", "spec.training.epochs", "between 1 and 1000"),
    ({"training": {"epochs": 1001}}, "r", "spec.training.epochs", "between 1 and 1000"),
    ({"training": {"epochs": 2.5}}, "r", "spec.training.epochs", "integer"),
    ({"training": {"batchSizePerWorker": 0}}, "r", "spec.training.batchSizePerWorker", "between 1 and 4096"),
    ({"training": {"batchSizePerWorker": 4097}}, "r", "spec.training.batchSizePerWorker", "between 1 and 4096"),
    ({"training": {"stepsPerEpoch": 0}}, "r", "spec.training.stepsPerEpoch", "between 1 and 1000000"),
    ({"training": {"learningRate": 0}}, "r", "spec.training.learningRate", "greater than 0"),
    ({"training": {"learningRate": 11}}, "r", "spec.training.learningRate", "at most 10"),
    ({"training": {"learningRate": "fast"}}, "r", "spec.training.learningRate", "number"),
    ({"training": {"seed": -1}}, "r", "spec.training.seed", "between 0 and 2147483647"),
    ({"training": {"optimizer": "sgd"}}, "r", "spec.training.optimizer", "unknown field"),
    ({"storage": {"claimName": "x", "size": "1Gi"}}, "r", "spec.storage.size", "claimName"),
    ({"storage": {"claimName": "x", "storageClassName": "s"}}, "r", "spec.storage.storageClassName", "claimName"),
    ({"storage": {"claimName": "x", "reclaimPolicy": "Delete"}}, "r", "spec.storage.reclaimPolicy", "never deletes"),
    ({"storage": {"claimName": "Bad_Name"}}, "r", "spec.storage.claimName", "PVC name"),
    ({"storage": {"size": "lots"}}, "r", "spec.storage.size", "quantity"),
    ({"storage": {"size": "0"}}, "r", "spec.storage.size", "positive"),
    ({"storage": {"size": "-1Gi"}}, "r", "spec.storage.size", "positive"),
    ({"training": {"datasetSource": {**_SOURCE, "maxSize": "0"}}}, "r", "spec.training.datasetSource.maxSize",
     "from 1 (byte) to 1Ti"),
    ({"training": {"datasetSource": {**_SOURCE, "maxSize": "500m"}}}, "r", "spec.training.datasetSource.maxSize",
     "from 1 (byte)"),
    ({"training": {"datasetSource": {**_SOURCE, "maxSize": "1025Gi"}}}, "r", "spec.training.datasetSource.maxSize",
     "to 1Ti"),
    ({"training": {"datasetSource": {**_SOURCE, "maxSize": "1GB"}}}, "r", "spec.training.datasetSource.maxSize",
     "quantity"),
    ({"training": {"datasetSource": {**_SOURCE, "timeoutSeconds": 59}}}, "r",
     "spec.training.datasetSource.timeoutSeconds", "between 60 and 86400"),
    ({"storage": {"size": 5}}, "r", "spec.storage.size", "string"),
    ({"storage": {"accessMode": "ReadOnlyMany"}}, "r", "spec.storage.accessMode", "one of"),
    ({"storage": {"reclaimPolicy": "Recycle"}}, "r", "spec.storage.reclaimPolicy", "one of"),
    ({"export": {"modelName": "../etc"}}, "r", "spec.export.modelName", "directory"),
    ({"export": {"modelName": "a/b"}}, "r", "spec.export.modelName", "directory"),
    ({"export": {"modelName": "UPPER"}}, "r", "spec.export.modelName", "directory"),
    ({"export": {"modelName": "m" * 64}}, "r", "spec.export.modelName", "at most 63"),
    ({"export": {"path": "/x"}}, "r", "spec.export.path", "unknown field"),
    ({"resources": {"limits": {"cpu": "two"}}}, "r", "spec.resources.limits.cpu", "quantity"),
    ({"resources": {"limits": "2"}}, "r", "spec.resources.limits", "object"),
    ({"resources": {"claims": []}}, "r", "spec.resources.claims", "unknown field"),
    ({"restartPolicy": "Always"}, "r", "spec.restartPolicy", "one of"),
    ({"backoffLimit": -1}, "r", "spec.backoffLimit", "between 0 and 100"),
    ({"backoffLimit": 101}, "r", "spec.backoffLimit", "between 0 and 100"),
    ({"activeDeadlineSeconds": 0}, "r", "spec.activeDeadlineSeconds", "at least 1"),
    ({"ttlSecondsAfterFinished": -1}, "r", "spec.ttlSecondsAfterFinished", "at least 60"),
    ({"ttlSecondsAfterFinished": 59}, "r", "spec.ttlSecondsAfterFinished", "at least 60"),
    # int32 (the API server checks the format too: "must be of type integer with format int32").
    ({"ttlSecondsAfterFinished": 2**31}, "r", "spec.ttlSecondsAfterFinished", "at most 2147483647"),
    ({"replicas": 2}, "r", "spec.replicas", "unknown field"),
    ({"training": []}, "r", "spec.training", "object"),
    ({"suspend": "yes"}, "r", "spec.suspend", "true or false"),
    ({"queueName": "q", "suspend": True}, "r", "spec.suspend", "Kueue"),
    ({"queueName": "Team_A"}, "r", "spec.queueName", "DNS label"),
    ({"workloadPriorityClass": "high"}, "r", "spec.workloadPriorityClass", "needs spec.queueName"),
    ({"queueName": "q", "workloadPriorityClass": "a" * 64}, "r", "spec.workloadPriorityClass", "at most 63"),
    ({"queueName": "q", "workloadPriorityClass": "Urgent"}, "r", "spec.workloadPriorityClass", "DNS subdomain"),
    ({"nodeSelector": {"pool": 1}}, "r", "spec.nodeSelector.pool", "string"),
    ({"nodeSelector": {"bad key!": "x"}}, "r", "spec.nodeSelector", "label keys"),
    ({"nodeSelector": {"pool": "not ok"}}, "r", "spec.nodeSelector.pool", "label value"),
    ({"nodeSelector": {f"k{i}": "v" for i in range(9)}}, "r", "spec.nodeSelector", "at most 8"),
    ({"tolerations": {"key": "gpu"}}, "r", "spec.tolerations", "list"),
    ({"tolerations": {}}, "r", "spec.tolerations", "list"),
    ({"tolerations": [{"key": 0, "operator": "Exists"}]}, "r", "spec.tolerations[0].key", "string"),
    ({"tolerations": [{"operator": "Maybe"}]}, "r", "spec.tolerations[0].operator", "one of"),
    ({"tolerations": [{"effect": "NoRun"}]}, "r", "spec.tolerations[0].effect", "one of"),
    ({"tolerations": [{"operator": "Exists", "value": "v"}]}, "r", "spec.tolerations[0]", "must not set value"),
    ({"tolerations": [{"key": "k", "tolerationSeconds": 5}]}, "r", "spec.tolerations[0]", "NoExecute"),
    ({"tolerations": [{"key": "k", "weight": 5}]}, "r", "spec.tolerations[0].weight", "unknown field"),
    ({"tolerations": [{"key": "k"}] * 9}, "r", "spec.tolerations", "at most 8"),
    ({"affinity": {"nodeAffinity": []}}, "r", "spec.affinity.nodeAffinity", "object"),
    ({"affinity": {"topology": {}}}, "r", "spec.affinity.topology", "unknown field"),
    ({"priorityClassName": "High_Priority"}, "r", "spec.priorityClassName", "DNS subdomain"),
    ({"podLabels": {"distml.dev/run": "x"}}, "r", "spec.podLabels", "reserved"),
    ({"podLabels": {"training.kubeflow.org/job-name": "x"}}, "r", "spec.podLabels", "reserved"),
    ({"podLabels": {"team": "not ok"}}, "r", "spec.podLabels.team", "label value"),
    ({"podLabels": {"team": "x" * 64}}, "r", "spec.podLabels.team", "at most 63"),
    ({"podAnnotations": {"/bad": "x"}}, "r", "spec.podAnnotations", "annotation keys"),
    ({"schedulingPolicy": {"minAvailable": 3}}, "r", "spec.schedulingPolicy.minAvailable", "at most spec.workers"),
    ({"schedulingPolicy": {"minAvailable": 0}}, "r", "spec.schedulingPolicy.minAvailable", "at least 1"),
    ({"schedulingPolicy": {"gang": True}}, "r", "spec.schedulingPolicy.gang", "unknown field"),
    ({"training": {"params": {"1w": 1}}}, "r", "spec.training.params", "'1w' is not a name"),
    ({"training": {"params": {"w" * 33: 1}}}, "r", "spec.training.params", "at most 32"),
    ({"training": {"params": {"w": "x" * 33}}}, "r", "spec.training.params.w", "at most 32 characters"),
    ({"training": {"params": {"w": {}}}}, "r", "spec.training.params.w", "a number, a string or true/false"),
    ({"training": {"params": {"w": [1]}}}, "r", "spec.training.params.w", "a number, a string or true/false"),
    ({"training": {"params": {f"p{i}": i for i in range(13)}}}, "r", "spec.training.params", "at most 12 entries"),
    ({"training": {"params": [1]}}, "r", "spec.training.params", "must be an object"),
    ({"training": {"validateEvery": -1}}, "r", "spec.training.validateEvery", "between 0 and 1000"),
]


@pytest.mark.parametrize(("spec", "name", "field", "word"), REJECTED)
def test_rejected_values_name_the_field(spec, name, field, word):
    with pytest.raises(SpecError) as err:
        parse_run(make_run(spec, name=name))
    message = str(err.value)
    assert message.startswith(f"{field}: "), message
    assert word in message, message
    assert "\n" not in message


def test_wrong_kind_is_rejected():
    with pytest.raises(SpecError, match="not a DistTrainingRun"):
        parse_run({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}})


def test_the_longest_name_keeps_worker_pod_names_valid():
    name = "a" * MAX_NAME_LENGTH
    run = parse_run(make_run({"workers": 64}, name=name))
    assert len(f"{run.name}-worker-{run.workers - 1}") <= 63


# ---- a run that contradicts itself: required anti-affinity over the nodes with a ReadWriteOnce volume ----------

HOSTNAME = "kubernetes.io/hostname"
OWN_WORKERS = {"matchLabels": {"distml.dev/run": "mnist-cnn"}}


def anti_affinity(selector=OWN_WORKERS, topology=HOSTNAME, required=True, **more):
    term = {"labelSelector": selector, "topologyKey": topology, **more}
    if required:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    weighted = [{"weight": 100, "podAffinityTerm": term}]
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": weighted}}


@pytest.mark.parametrize(
    "affinity",
    [
        anti_affinity(),
        anti_affinity({"matchLabels": {"training.kubeflow.org/job-name": "mnist-cnn",
                                       "training.kubeflow.org/replica-type": "worker"}}),
        anti_affinity({"matchExpressions": [{"key": "distml.dev/run", "operator": "Exists"}]}),
        anti_affinity({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}),
        anti_affinity({"matchExpressions": [{"key": "distml.dev/run", "operator": "In", "values": ["mnist-cnn"]}]}),
        anti_affinity({"matchExpressions": [{"key": "distml.dev/run", "operator": "NotIn", "values": ["other"]}]}),
        anti_affinity({}),  # an empty selector picks every pod
        anti_affinity({"matchLabels": {"training.kubeflow.org/replica-index": "0"}}),  # worker 0 apart from the rest
        anti_affinity(namespaces=["ml"]),
        anti_affinity(namespaceSelector={}),
        anti_affinity(matchLabelKeys=["distml.dev/run"]),
    ],
)
def test_a_required_term_that_splits_the_workers_is_refused_with_a_readwriteonce_volume(affinity):
    with pytest.raises(SpecError) as err:
        parse_run(make_run({"workers": 2, "affinity": affinity}))
    assert str(err.value) == (
        "spec.affinity.podAntiAffinity: a required term puts each of the 2 workers on its own node "
        "(kubernetes.io/hostname), but spec.storage.accessMode ReadWriteOnce mounts the run's volume on one node only: "
        "use accessMode ReadWriteMany with a class every node mounts, or a preferred term")


def test_the_run_label_and_the_pod_labels_a_term_selects_are_the_ones_the_tfjob_gives_its_workers():
    run = parse_run(make_run({"workers": 2, "podLabels": {"team": "ml"}}))
    template = build_tfjob(run)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    assert template == template_labels(run.name, run.placement.pod_labels)
    with pytest.raises(SpecError, match="a required term puts each of the 2 workers"):
        parse_run(make_run({"workers": 2, "podLabels": {"team": "ml"},
                            "affinity": anti_affinity({"matchLabels": {"team": "ml"}})}))  # fmt: skip


@pytest.mark.parametrize(
    "spec",
    [
        {"workers": 2, "affinity": anti_affinity(), "storage": {"accessMode": "ReadWriteMany"}},
        {"workers": 2, "affinity": anti_affinity(required=False)},
        {"workers": 1, "affinity": anti_affinity()},
        {"workers": 2, "affinity": anti_affinity(), "storage": {"claimName": "shared"}},
        {"workers": 2, "affinity": anti_affinity({"matchLabels": {"distml.dev/run": "other-run"}})},
        {"workers": 2, "affinity": anti_affinity({"matchLabels": {"team": "ml"}})},
        {"workers": 2, "affinity": anti_affinity({"matchExpressions": [
            {"key": "distml.dev/run", "operator": "NotIn", "values": ["mnist-cnn"]}]})},
        {"workers": 2, "affinity": anti_affinity(None)},  # no selector picks no pod
        {"workers": 2, "affinity": anti_affinity(topology="topology.kubernetes.io/zone")},
        {"workers": 2, "affinity": anti_affinity(namespaces=["other"])},
        {"workers": 2, "affinity": anti_affinity(namespaceSelector={"matchLabels": {"team": "ml"}})},
        {"workers": 2, "affinity": anti_affinity(matchLabelKeys=["training.kubeflow.org/replica-index"])},
        {"workers": 2, "affinity": {"podAffinity": anti_affinity()["podAntiAffinity"]}},
    ],
)
def test_runs_whose_workers_can_share_a_node_or_a_volume_across_nodes_are_accepted(spec):
    run = parse_run(make_run(spec))
    assert run.workers == spec["workers"]


# ---- the CRD and spec.py must agree ---------------------------------------------------------


def _crd_spec_schema():
    crd = yaml.safe_load((REPO / "crds" / "disttrainingrun.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _leaves(schema, path=""):
    for key, sub in (schema.get("properties") or {}).items():
        here = f"{path}.{key}" if path else key
        if sub.get("type") == "object" and "properties" in sub and key != "resources":
            yield from _leaves(sub, here)
        else:
            yield here, sub


def _set(spec, path, value):
    parts = path.split(".")
    for p in parts[:-1]:
        spec = spec.setdefault(p, {})
    spec[parts[-1]] = value


# A leaf whose object has a rule needing its siblings is set beside them (datasetSource needs url and sha256).
_SIBLINGS = {"training.datasetSource.": _SOURCE}


def _base(path):
    """The run a leaf is set in: empty, or with the siblings the leaf's object needs."""
    spec = {}
    for prefix, siblings in _SIBLINGS.items():
        if path.startswith(prefix):
            _set(spec, prefix.rstrip("."), dict(siblings))
    return make_run(spec)


def test_crd_and_parser_share_defaults():
    for path, schema in _leaves(_crd_spec_schema()):
        if "default" not in schema:
            continue
        explicit = _base(path)
        _set(explicit["spec"], path, schema["default"])
        assert parse_run(explicit) == parse_run(_base(path)), path


def test_crd_and_parser_share_enums():
    for path, schema in _leaves(_crd_spec_schema()):
        for value in schema.get("enum", []):
            run = make_run({})
            _set(run["spec"], path, value)
            parse_run(run)  # accepted
        if "enum" in schema:
            run = make_run({})
            _set(run["spec"], path, "NotAnOption")
            with pytest.raises(SpecError, match=f"spec.{path}"):
                parse_run(run)


def test_crd_and_parser_share_integer_ranges():
    for path, schema in _leaves(_crd_spec_schema()):
        if schema.get("type") != "integer":
            continue
        for bound, delta in (("minimum", -1), ("maximum", 1)):
            if bound not in schema:
                continue
            ok = _base(path)
            _set(ok["spec"], path, schema[bound])
            parse_run(ok)
            bad = _base(path)
            _set(bad["spec"], path, schema[bound] + delta)
            with pytest.raises(SpecError, match=f"spec.{path}"):
                parse_run(bad)


def test_every_crd_field_has_a_description():
    crd = yaml.safe_load((REPO / "crds" / "disttrainingrun.yaml").read_text())
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing = []

    def walk(schema, path):
        for key, sub in (schema.get("properties") or {}).items():
            here = f"{path}.{key}"
            if key != "metadata" and not sub.get("description"):
                missing.append(here)
            walk(sub, here)
            if isinstance(sub.get("items"), dict):
                walk(sub["items"], here + "[]")

    walk(root, "")
    assert not missing, missing


def test_the_crd_and_the_parser_know_the_same_spec_fields_and_only_suspend_is_mutable():
    schema = _crd_spec_schema()
    assert list(schema["properties"]) == [f.name for f in SPEC.fields]
    assert [f.name for f in SPEC.fields if f.mutable] == ["suspend"]
    rules = " ".join(v["rule"] for v in schema["x-kubernetes-validations"])
    for f in SPEC.fields:
        guarded = f"self.{f.name} == oldSelf.{f.name}" in rules
        where = "missing" if not guarded else "on a mutable field"
        assert guarded == (not f.mutable), f"spec.{f.name}: immutability rule {where}"
