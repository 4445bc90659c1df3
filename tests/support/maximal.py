"""The largest DistTrainingRun the CRD admits: every list and map full, every string at its maxLength (within its
grammar), for the tiers that measure what a tenant's largest runs cost (tests/unit/operator/test_slim.py,
tests/integration/test_operator_crd.py, bench/operator/memory.py).

Bounds are read from the field table (fields.py), so the run grows with it. It is suspended and names a claim
that does not exist: it waits (WaitingForPVC) and never needs a training-operator. Where two fields exclude each
other (claimName or size; configMap or module; queueName and workloadPriorityClass, or suspend), the one kept is
the larger or the one a waiting run needs.
"""

from __future__ import annotations

from typing import Any

from dtr_contract import params as run_params
from dtr_operator import fields
from dtr_operator.fields import SPEC
from dtr_operator.schema import MAX_KEY_LENGTH, MAX_KEY_PREFIX, Field

_PREFIX = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * (MAX_KEY_PREFIX - 3 * 64)])  # a 253-character DNS subdomain


def key(i: int, length: int = MAX_KEY_LENGTH) -> str:
    """A distinct label key of `length` characters (a prefix of 253 when long enough)."""
    name = f"k{i:02d}"
    if length < len(_PREFIX) + 2 + len(name):
        return (name + "x" * length)[:length]
    return f"{_PREFIX}/{name}".ljust(length, "x")


def _at(path: str) -> Field:
    f = SPEC
    for name in path.split("."):
        f = f.items if name == "[]" and f.items is not None else f.child(name)
    return f


def _len(path: str) -> int:
    n = _at(path).max_length
    assert n is not None, path
    return n


def _items(path: str) -> int:
    n = _at(path).max_items
    assert n is not None, path
    return n


def _labels(path: str, value: str = "v") -> dict[str, str]:
    return {key(i): value * _len(f"{path}.[]") for i in range(_items(path))}


def _requirement(path: str, operator: str = "In") -> dict[str, Any]:
    values = [f"{i}".ljust(_len(f"{path}.values.[]"), "v") for i in range(_items(f"{path}.values"))]
    return {"key": key(0, _len(f"{path}.key")), "operator": operator, "values": values}


def _node_term(path: str) -> dict[str, Any]:
    return {
        "matchExpressions": [_requirement(f"{path}.matchExpressions.[]")] * _items(f"{path}.matchExpressions"),
        "matchFields": [_requirement(f"{path}.matchFields.[]")] * _items(f"{path}.matchFields"),
    }


def _selector(path: str) -> dict[str, Any]:
    expressions = [_requirement(f"{path}.matchExpressions.[]")] * _items(f"{path}.matchExpressions")
    return {"matchLabels": _labels(f"{path}.matchLabels"), "matchExpressions": expressions}


def _pod_term(path: str) -> dict[str, Any]:
    return {
        "labelSelector": _selector(f"{path}.labelSelector"),
        "namespaces": [f"ns{i}".ljust(_len(f"{path}.namespaces.[]"), "n") for i in range(_items(f"{path}.namespaces"))],
        "topologyKey": key(0, _len(f"{path}.topologyKey")),
        "namespaceSelector": _selector(f"{path}.namespaceSelector"),
        "matchLabelKeys": [key(1)] * _items(f"{path}.matchLabelKeys"),
        "mismatchLabelKeys": [key(2)] * _items(f"{path}.mismatchLabelKeys"),
    }


def _weighted(path: str, term: str, make: Any) -> list[dict[str, Any]]:
    return [{"weight": 100, term: make(f"{path}.[].{term}")}] * _items(path)


def _pod_affinity(path: str) -> dict[str, Any]:
    required = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    preferred = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    return {required.rsplit(".", 1)[1]: [_pod_term(f"{required}.[]")] * _items(required),
            preferred.rsplit(".", 1)[1]: _weighted(preferred, "podAffinityTerm", _pod_term)}  # fmt: skip


def affinity() -> dict[str, Any]:
    terms = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    preferred = "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [_node_term(f"{terms}.[]")] * _items(terms)},
            "preferredDuringSchedulingIgnoredDuringExecution": _weighted(preferred, "preference", _node_term),
        },
        "podAffinity": _pod_affinity("affinity.podAffinity"),
        "podAntiAffinity": _pod_affinity("affinity.podAntiAffinity"),
    }


def _quantities(path: str) -> dict[str, str]:
    return {key(i): "1" * (_len(f"{path}.[]") - 2) + "Gi" for i in range(_items(path))}


def maximal_spec(claim: str = "missing") -> dict[str, Any]:
    """The largest spec: suspended, waiting for the PVC `claim` (padded to its maxLength)."""
    code_key = _len("training.code.key")
    return {
        "workers": 64,
        "image": "r" * _len("image"),
        "training": {
            "code": {"configMap": "c" * _len("training.code.configMap"), "key": "k" * (code_key - 3) + ".py"},
            "dataset": "d" * (_len("training.dataset") - 4) + ".npz",
            "datasetSource": {"url": "https://h/" + "p" * (_len("training.datasetSource.url") - 10),
                              "sha256": "0" * 64,
                              "maxSize": "1." + "0" * (_len("training.datasetSource.maxSize") - 4) + "Gi",
                              "timeoutSeconds": _at("training.datasetSource.timeoutSeconds").maximum},
            "metric": "m" * _len("training.metric"),
            "validateEvery": _at("training.validateEvery").maximum,
            "params": {f"p{i:02}".ljust(run_params.MAX_NAME_LENGTH, "p"): "v" * _len("training.params.[]")
                       for i in range(_items("training.params"))},
        },
        "storage": {"claimName": claim.ljust(_len("storage.claimName"), "x")},
        "export": {"modelName": "e" * _len("export.modelName"),
                   "allowedPublishers": [f"p{i:02}".ljust(_len("export.allowedPublishers.[]"), "p")
                                         for i in range(_items("export.allowedPublishers"))]},
        "resources": {"limits": _quantities("resources.limits"), "requests": _quantities("resources.requests")},
        "suspend": True,
        "nodeSelector": _labels("nodeSelector"),
        "tolerations": [{"key": key(i, _len("tolerations.[].key")), "operator": "Equal",
                         "value": "v" * _len("tolerations.[].value"), "effect": "NoExecute",
                         "tolerationSeconds": 2**62} for i in range(_items("tolerations"))],
        "affinity": affinity(),
        "priorityClassName": "p" * _len("priorityClassName"),
        "podLabels": _labels("podLabels"),
        "podAnnotations": _labels("podAnnotations", "a"),
        "schedulingPolicy": {"minAvailable": 64, "queue": "q" * _len("schedulingPolicy.queue"),
                             "priorityClass": "p" * _len("schedulingPolicy.priorityClass"),
                             "scheduleTimeoutSeconds": 2**31 - 1},
        "watchdog": {"enabled": True, "stallFactor": 99.99999999999999, "minStallSeconds": 604800,
                     "onStall": "Restart", "maxRestarts": 20},
        "disruption": {"resume": False, "maxResumes": 20, "waitSeconds": 604800, "protect": True},
    }


# The longest image reference the grammar admits (imageref.py): a name of 255 characters, a tag of 128, a digest.
EXPANDING_IMAGE = f"r.io/{'r' * 250}:{'t' * 128}@sha256:{'0' * 64}"


def expanding_spec() -> dict[str, Any]:
    """The largest spec that expands, for bench/operator/run.py --largest: maximal_spec with a PVC of its own (its
    class at its maxLength) instead of a claim that does not exist, and the longest valid image reference
    (maximal_spec's, 512 characters in one path component, is no valid reference: such a run fails,
    ImageNotAllowed); it needs its code's ConfigMap (code_config_map) and the operator flags of EXPANDING_ARGS,
    nothing else. Still suspended: its TFJob of 64 workers asks for no pod (a burst of 1000 would ask for 64 000)."""
    spec = maximal_spec()
    spec["image"] = EXPANDING_IMAGE
    spec["storage"] = {"size": "1Gi", "storageClassName": "s" * _len("storage.storageClassName"),
                       "accessMode": "ReadWriteMany", "reclaimPolicy": "Delete"}  # fmt: skip
    return spec


def code_config_map(namespace: str) -> dict[str, Any]:
    """The ConfigMap that expanding_spec's runs name, with their key: without it they wait (CodeNotFound)."""
    code = maximal_spec()["training"]["code"]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": code["configMap"], "namespace": namespace},
            "data": {code["key"]: "def build_model(): ...\n"}}  # fmt: skip


# What `dtr operator` must allow for expanding_spec to expand rather than fail (policy.py refuses all of it by default).
EXPANDING_ARGS = (
    "--allowed-images=r.io/*", "--allowed-pod-labels=*", "--allowed-pod-annotations=*",
    "--allowed-priority-classes=*", "--allowed-toleration-keys=*", "--allowed-anti-affinity-topologies=*",
    "--allowed-storage-classes=*", "--cross-namespace-affinity=allowed",
)  # fmt: skip


def max_name() -> str:
    return "r" * fields.MAX_NAME_LENGTH


KOPF_PREFIX = "kopf.zalando.org/"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# deploy/base/admission.yaml's bounds on a run's own metadata (tests/integration/test_operator_crd_bounds.py holds
# the policy to them on the real API server)
MAX_LABELS, MAX_OWN_ANNOTATION_BYTES, MAX_KOPF_BYTES, MAX_LAST_APPLIED = 32, 16384, 8192, 98304
MAX_FINALIZERS = MAX_OWNER_REFERENCES = 8


def _fill(prefix: str, count: int, budget: int) -> dict[str, str]:
    """count annotations whose keys and values add up to budget characters."""
    keys = [f"{prefix}{key(i, 60)}" for i in range(count)]
    each = budget // count
    return {k: "v" * (each - len(k)) for k in keys}


def largest_metadata(owners: list[dict[str, str]]) -> dict[str, Any]:
    """The largest metadata the admission policy admits for a run: every label at the longest key and value, every
    annotation budget full (its own, kopf's, kubectl's last-applied), 8 finalizers, and an owner reference to each
    of `owners` (objects that exist: the garbage collector deletes a run whose owners are all gone)."""
    return {
        "labels": {key(i): "v" * 63 for i in range(MAX_LABELS)},
        "annotations": {**_fill("", 16, MAX_OWN_ANNOTATION_BYTES), **_fill(KOPF_PREFIX, 4, MAX_KOPF_BYTES),
                        LAST_APPLIED: "v" * MAX_LAST_APPLIED},
        "finalizers": [f"{_PREFIX}/{'f' * 60}{i:02d}" for i in range(MAX_FINALIZERS)],
        "ownerReferences": owners[:MAX_OWNER_REFERENCES],
    }
