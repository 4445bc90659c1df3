"""What a run may ask of the cluster beyond its own pods, as the cluster's admin allows it with operator flags. Pure.

The operator creates every worker pod with its own rights, so the pod fields a run sets are the operator's
requests, not its author's: labels and annotations that steer cluster add-ons, a priority class, tolerations
of the control plane's taints or a node selection by its role, affinity that reaches other namespaces or
closes whole zones, another team's volume, a large volume of a costly class. Each is refused
unless a flag allows it (docs/operator.md#what-a-run-lets-its-author-do); a refused run fails before anything
is created, with its own reason (reasons.py) and a message naming the field and the flag.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import objectstore
from .api import HOSTNAME_LABEL
from .grammar import quantity
from .reasons import (
    AFFINITY_NOT_ALLOWED,
    CLAIM_NOT_ALLOWED,
    NODE_SELECTOR_NOT_ALLOWED,
    OBJECT_STORE_NOT_ALLOWED,
    POD_ANNOTATION_NOT_ALLOWED,
    POD_LABEL_NOT_ALLOWED,
    PRIORITY_CLASS_NOT_ALLOWED,
    STORAGE_CLASS_NOT_ALLOWED,
    STORAGE_TOO_LARGE,
    TOLERATION_NOT_ALLOWED,
)
from .spec import RunSpec
from .spec_conflicts import REQUIRED, required_anti_affinity

# The label an admin puts on a PVC that runs of its namespace may name in spec.storage.claimName.
CLAIM_LABEL, CLAIM_LABEL_VALUE = "distml.dev/runs", "allowed"

# Label and annotation keys no flag allows: each makes a cluster add-on or the kubelet act on the pod (inject a
# sidecar of another image with its own volumes, weaken AppArmor or seccomp, join another network or take an
# IP, fetch secrets, project a cloud token), or belongs to Kubernetes and its SIG projects (kubernetes.io,
# k8s.io, x-k8s.io: autoscaler eviction, bandwidth, Kueue's and the scheduler's own), or to the gang schedulers
# whose queue the run names in spec.schedulingPolicy. Security review H3.
REFUSED_KEYS = (
    "istio.io/*", "*.istio.io/*", "*apparmor*", "*seccomp*",
    "k8s.v1.cni.cncf.io/*", "v1.multus-cni.io/*", "cni.projectcalico.org/*",
    "vault.hashicorp.com/*", "linkerd.io/*", "*.linkerd.io/*", "azure.workload.identity/*", "dapr.io/*",
    "kubernetes.io/*", "*.kubernetes.io/*", "k8s.io/*", "*.k8s.io/*", "*.x-k8s.io/*", "volcano.sh/*", "*.volcano.sh/*",
    # Security review R11: more that inject, or hand the pod an identity: kube2iam/kiam's role, AAD pod identity,
    # OpenTelemetry's operator, Consul, Kuma, Datadog, GKE's Cloud Storage FUSE, EKS, Karpenter's disruption.
    "iam.amazonaws.com/*", "*.amazonaws.com/*", "aadpodidbinding", "*.opentelemetry.io/*", "consul.hashicorp.com/*",
    "*.hashicorp.com/*", "kuma.io/*", "*.kuma.io/*", "*.datadoghq.com/*", "gke-gcsfuse/*", "karpenter.sh/*",
    "*.karpenter.sh/*",
)  # fmt: skip
# ...except Kubernetes' recommended labels, which no component acts on (the operator sets managed-by itself).
RECOMMENDED_KEYS = "app.kubernetes.io/*"

# Taints a run tolerates only when --allowed-toleration-keys names them: the control plane's and other node
# roles', and a cordoned node's. A toleration without a key (operator Exists) tolerates every taint: it needs `*`.
# The same flag answers for node labels with these keys in spec.nodeSelector and nodeAffinity terms: both ask
# "may the run land on control-plane or dedicated nodes" (an untainted dedicated pool needs no toleration).
GUARDED_TAINTS = ("node-role.kubernetes.io/*", "node.kubernetes.io/unschedulable",
                  # A node's lifecycle (review R11): tolerated, a worker stays on a node that is failing or declared
                  # out of service (its volume's detach waits on it); not node labels (instance-type stays free).
                  "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", "node.kubernetes.io/*-pressure",
                  "node.kubernetes.io/network-unavailable", "node.kubernetes.io/out-of-service")  # fmt: skip
# nodeAffinity operators that pull a run onto the nodes carrying a key; NotIn and DoesNotExist keep it off them.
TARGETING_OPERATORS = ("In", "Exists", "Gt", "Lt")
# The one topology a required anti-affinity term may always spread over: each worker closes its own node to the
# pods it repels, as the LimitPodHardAntiAffinityTopology admission plugin allows; a zone or region closes them all.
HOSTNAME_TOPOLOGY = HOSTNAME_LABEL
DEFAULT_MAX_STORAGE = "100Gi"  # --max-storage: the largest spec.storage.size it creates, and datasetSource.maxSize
SYSTEM_PRIORITY_PREFIX = "system-"  # system-node-critical, system-cluster-critical: only when listed by name
# The operator's own PriorityClass (deploy/base/priorityclass.yaml): only when listed by name, as a system class. A
# run's pods at the operator's priority would be evicted with it, not before it, when a node runs short.
OPERATOR_PRIORITY_CLASS = "dtr-operator"

AFFINITY_KINDS = ("podAffinity", "podAntiAffinity")
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class Flag:
    option: str
    env: str

    def __str__(self) -> str:
        return f"--{self.option} ({self.env})"


POD_LABELS = Flag("allowed-pod-labels", "DTR_ALLOWED_POD_LABELS")
POD_ANNOTATIONS = Flag("allowed-pod-annotations", "DTR_ALLOWED_POD_ANNOTATIONS")
PRIORITY_CLASSES = Flag("allowed-priority-classes", "DTR_ALLOWED_PRIORITY_CLASSES")
TOLERATION_KEYS = Flag("allowed-toleration-keys", "DTR_ALLOWED_TOLERATION_KEYS")
CROSS_NAMESPACE_AFFINITY = Flag("cross-namespace-affinity", "DTR_CROSS_NAMESPACE_AFFINITY")
CLAIMS = Flag("claims", "DTR_CLAIMS")
ANTI_AFFINITY_TOPOLOGIES = Flag("allowed-anti-affinity-topologies", "DTR_ALLOWED_ANTI_AFFINITY_TOPOLOGIES")
MAX_STORAGE = Flag("max-storage", "DTR_MAX_STORAGE")
STORAGE_CLASSES = Flag("allowed-storage-classes", "DTR_ALLOWED_STORAGE_CLASSES")
OBJECT_STORES = Flag("allowed-object-stores", "DTR_ALLOWED_OBJECT_STORES")
ALLOWED, REFUSED = "allowed", "refused"  # --cross-namespace-affinity
LABELLED, ANY = "labelled", "any"  # --claims


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


@dataclass(frozen=True)
class Policy:
    """The operator flags that widen what a run may ask; the defaults allow none of it."""

    pod_labels: tuple[str, ...] = ()  # globs of label keys
    pod_annotations: tuple[str, ...] = ()  # globs of annotation keys
    priority_classes: tuple[str, ...] = ()  # globs; a system-* class only by its exact name
    toleration_keys: tuple[str, ...] = ()  # globs of guarded taint and node keys; `*` also the key-less toleration
    cross_namespace_affinity: bool = False
    claims: str = LABELLED
    anti_affinity_topologies: tuple[str, ...] = ()  # globs of topology keys beyond kubernetes.io/hostname
    max_storage: str = DEFAULT_MAX_STORAGE  # a quantity
    storage_classes: tuple[str, ...] = ()  # globs; empty: none named, the cluster's default class only
    object_stores: tuple[str, ...] = ()  # endpoints (scheme://host[:port]), not globs; empty: none


def _listed(patterns: Sequence[str]) -> str:
    return ", ".join(patterns) if patterns else "none"


def _any_match(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def refused_key(key: str) -> bool:
    """Whether no flag may allow this label or annotation key (REFUSED_KEYS)."""
    return _any_match(key, REFUSED_KEYS) and not fnmatch.fnmatchcase(key, RECOMMENDED_KEYS)


def _key_refusal(keys: Mapping[str, str], field: str, patterns: Sequence[str], flag: Flag,
                 reason: str) -> Refusal | None:  # fmt: skip
    for key in sorted(keys):
        if refused_key(key):
            return Refusal(reason, f"{field} key {key} is refused whatever the operator's flags say: it steers a "
                                   "cluster add-on or belongs to Kubernetes (docs/operator.md#what-a-run-lets-its-"
                                   "author-do); leave it out")  # fmt: skip
        if not _any_match(key, patterns):
            return Refusal(reason, f"{field} key {key} is not allowed by the operator's {flag}: {_listed(patterns)}; "
                                   "leave it out, or ask a cluster admin to allow it")  # fmt: skip
    return None


def _labels(run: RunSpec, policy: Policy) -> Refusal | None:
    labels = run.placement.pod_labels
    return _key_refusal(labels, "spec.podLabels", policy.pod_labels, POD_LABELS, POD_LABEL_NOT_ALLOWED)


def _annotations(run: RunSpec, policy: Policy) -> Refusal | None:
    notes, reason = run.placement.pod_annotations, POD_ANNOTATION_NOT_ALLOWED
    return _key_refusal(notes, "spec.podAnnotations", policy.pod_annotations, POD_ANNOTATIONS, reason)


def priority_allowed(name: str, patterns: Sequence[str]) -> bool:
    """A system class, or the operator's own, only by its exact name (a `*` must not hand out system-node-critical,
    nor rank a run's pods with the operator)."""
    if name.startswith(SYSTEM_PRIORITY_PREFIX) or name == OPERATOR_PRIORITY_CLASS:
        return name in patterns
    return _any_match(name, patterns)


def _priority(run: RunSpec, policy: Policy) -> Refusal | None:
    gang = run.scheduling_policy
    named = (("spec.priorityClassName", run.placement.priority_class_name),
             ("spec.schedulingPolicy.priorityClass", gang.priority_class if gang else None),
             ("spec.workloadPriorityClass", run.workload_priority_class))  # fmt: skip
    for field, name in named:
        if name is not None and not priority_allowed(name, policy.priority_classes):
            own = name == OPERATOR_PRIORITY_CLASS
            which = "the operator's own class" if own else f"a {SYSTEM_PRIORITY_PREFIX}* class"
            return Refusal(PRIORITY_CLASS_NOT_ALLOWED,
                           f"{field} {name} is not allowed by the operator's {PRIORITY_CLASSES}: "
                           f"{_listed(policy.priority_classes)} ({which} only by its exact "
                           "name); leave it out, or ask a cluster admin to allow it")  # fmt: skip
    return None


def node_key_allowed(key: str, patterns: Sequence[str]) -> bool:
    """Whether a run may tolerate a taint, or select nodes by a label, with this key (GUARDED_TAINTS)."""
    return not _any_match(key, GUARDED_TAINTS) or _any_match(key, patterns)


def toleration_allowed(toleration: Mapping[str, Any], patterns: Sequence[str]) -> bool:
    key = toleration.get("key") or ""
    if not key:  # only operator Exists may omit the key (the CRD): it tolerates every taint
        return "*" in patterns
    return node_key_allowed(key, patterns)


def _tolerations(run: RunSpec, policy: Policy) -> Refusal | None:
    for i, toleration in enumerate(run.placement.tolerations):
        if not toleration_allowed(toleration, policy.toleration_keys):
            what = f"key {toleration['key']}" if toleration.get("key") else "no key (it tolerates every taint)"
            return Refusal(TOLERATION_NOT_ALLOWED,
                           f"spec.tolerations[{i}] with {what} is not allowed by the operator's {TOLERATION_KEYS}: "
                           f"{_listed(policy.toleration_keys)} (taints {', '.join(GUARDED_TAINTS)} and the key-less "
                           "toleration, which needs `*`); leave it out, or ask a cluster admin")  # fmt: skip
    return None


def _terms(affinity: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(path, pod affinity term) of every term in podAffinity and podAntiAffinity, required and preferred."""
    for kind in AFFINITY_KINDS:
        part = affinity.get(kind)
        if not isinstance(part, Mapping):
            continue
        for i, term in enumerate(part.get(REQUIRED) or []):
            yield f"spec.affinity.{kind}.{REQUIRED}[{i}]", term
        for i, weighted in enumerate(part.get(PREFERRED) or []):
            term = weighted.get("podAffinityTerm") if isinstance(weighted, Mapping) else None
            yield f"spec.affinity.{kind}.{PREFERRED}[{i}].podAffinityTerm", term


def reaches_other_namespaces(term: Any, namespace: str) -> bool:
    """Whether an affinity term selects pods outside the run's namespace (a namespaceSelector, even {}, which
    means every namespace; or namespaces other than its own)."""
    if not isinstance(term, Mapping):
        return False  # not a term: the API server refuses the TFJob (InvalidTFJob)
    listed = term.get("namespaces") or []
    return term.get("namespaceSelector") is not None or any(ns != namespace for ns in listed)


def _affinity(run: RunSpec, policy: Policy) -> Refusal | None:
    if policy.cross_namespace_affinity or not isinstance(run.placement.affinity, Mapping):
        return None
    for path, term in _terms(run.placement.affinity):
        if reaches_other_namespaces(term, run.namespace):
            return Refusal(AFFINITY_NOT_ALLOWED,
                           f"{path} reaches other namespaces (namespaces or namespaceSelector), which the "
                           f"operator's {CROSS_NAMESPACE_AFFINITY}={REFUSED} refuses: select pods of the run's own "
                           f"namespace only, or ask a cluster admin for --{CROSS_NAMESPACE_AFFINITY.option}="
                           f"{ALLOWED}")  # fmt: skip
    return None


def _node_terms(affinity: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(path, node selector term) of nodeAffinity's required terms and preferred preferences."""
    node = affinity.get("nodeAffinity")
    if not isinstance(node, Mapping):
        return
    required = node.get(REQUIRED)
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    for i, term in enumerate(terms if isinstance(terms, list) else []):
        yield f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[{i}]", term
    preferred = node.get(PREFERRED)
    for i, weighted in enumerate(preferred if isinstance(preferred, list) else []):
        yield f"spec.affinity.nodeAffinity.{PREFERRED}[{i}].preference", (
            weighted.get("preference") if isinstance(weighted, Mapping) else None)


def _targeted_keys(term: Any) -> Iterator[tuple[str, str]]:
    """(sub-path, key) of a node selector term's expressions that pull the run onto nodes carrying the key."""
    expressions = term.get("matchExpressions") if isinstance(term, Mapping) else None
    for j, expression in enumerate(expressions if isinstance(expressions, list) else []):
        if isinstance(expression, Mapping) and expression.get("operator") in TARGETING_OPERATORS:
            yield f".matchExpressions[{j}]", str(expression.get("key"))


def node_selections(run: RunSpec) -> Iterator[tuple[str, str]]:
    """(field, node label key) of every way the run picks nodes by a label."""
    for key in sorted(run.placement.node_selector):
        yield "spec.nodeSelector", key
    affinity = run.placement.affinity
    for path, term in _node_terms(affinity) if isinstance(affinity, Mapping) else ():
        for sub, key in _targeted_keys(term):
            yield path + sub, key


def _node_selection(run: RunSpec, policy: Policy) -> Refusal | None:
    for field, key in node_selections(run):
        if not node_key_allowed(key, policy.toleration_keys):
            return Refusal(NODE_SELECTOR_NOT_ALLOWED,
                           f"{field} selects nodes by {key}, a node role's key, which the operator's "
                           f"{TOLERATION_KEYS} does not allow: {_listed(policy.toleration_keys)} (keys "
                           f"{', '.join(GUARDED_TAINTS)}: control-plane and dedicated nodes); leave it out, or ask "
                           "a cluster admin")  # fmt: skip
    return None


def topology_allowed(key: str, patterns: Sequence[str]) -> bool:
    return key == HOSTNAME_TOPOLOGY or _any_match(key, patterns)


def _anti_affinity_topology(run: RunSpec, policy: Policy) -> Refusal | None:
    """Required anti-affinity is symmetric: every matching pod of the namespace is kept out of each topology
    domain a worker holds, so a zone-wide key closes whole zones to them (security review M1)."""
    for path, term in required_anti_affinity(run.placement.affinity):
        key = term.get("topologyKey") if isinstance(term, Mapping) else None
        if isinstance(key, str) and not topology_allowed(key, policy.anti_affinity_topologies):
            return Refusal(AFFINITY_NOT_ALLOWED,
                           f"{path} has topologyKey {key}: a required anti-affinity term keeps the pods it matches "
                           f"out of the whole {key} domain each worker holds, which the operator's "
                           f"{ANTI_AFFINITY_TOPOLOGIES} does not allow: it allows "
                           f"{', '.join((HOSTNAME_TOPOLOGY, *policy.anti_affinity_topologies))}; use "
                           f"{HOSTNAME_TOPOLOGY} or a preferred term, or ask a cluster admin")  # fmt: skip
    return None


def _storage(run: RunSpec, policy: Policy) -> Refusal | None:
    """The PVC the operator creates, or each worker's emptyDir without a volume: at most --max-storage, of a class
    the admin listed (security review L6). A claim named in spec.storage.claimName is claim_refusal's: it exists
    already."""
    if run.storage.claim_name is not None:
        return None
    size, limit = quantity(run.storage.size), quantity(policy.max_storage)
    if size is None or limit is None or size > limit:
        return Refusal(STORAGE_TOO_LARGE,
                       f"spec.storage.size {run.storage.size} is more than the operator's {MAX_STORAGE}: "
                       f"{policy.max_storage}; ask for less, or ask a cluster admin")  # fmt: skip
    name = run.storage.storage_class_name
    if name is not None and not _any_match(name, policy.storage_classes):
        return Refusal(STORAGE_CLASS_NOT_ALLOWED,
                       f"spec.storage.storageClassName {name} is not allowed by the operator's {STORAGE_CLASSES}: "
                       f"{_listed(policy.storage_classes)}; leave it out (the cluster's default class), or ask a "
                       "cluster admin")  # fmt: skip
    return None


def _download(run: RunSpec, policy: Policy) -> Refusal | None:
    """spec.training.datasetSource.maxSize: at most --max-storage, the most the admin lets a run's volume hold, so a
    download never writes more than that, also on a claim of the user's and on classes that do not enforce a claim's
    size (docs/operator.md#disk-what-holds-a-run-to-its-size)."""
    source = run.training.dataset_source
    max_size = None if source is None else source.get("maxSize")
    if max_size is None:
        return None
    size, limit = quantity(max_size), quantity(policy.max_storage)
    if size is None or limit is None or size > limit:
        return Refusal(STORAGE_TOO_LARGE,
                       f"spec.training.datasetSource.maxSize {max_size} is more than the operator's {MAX_STORAGE}: "
                       f"{policy.max_storage}; ask for less, or ask a cluster admin")  # fmt: skip
    return None


def _object_store(run: RunSpec, policy: Policy) -> Refusal | None:
    """The workers would send the run's keys and data to the endpoint, and reach it from inside the cluster: the
    admin lists the stores runs may name (a run cannot point them at an internal service of its choosing)."""
    store = run.object_store
    if store is None or objectstore.endpoint_allowed(store.endpoint, policy.object_stores):
        return None
    return Refusal(OBJECT_STORE_NOT_ALLOWED,
                   f"spec.objectStore.endpoint {store.endpoint} is not allowed by the operator's {OBJECT_STORES}: "
                   f"{_listed(policy.object_stores)}; use a listed endpoint, or ask a cluster admin to list "
                   "it")  # fmt: skip


CHECKS = (_labels, _annotations, _priority, _tolerations, _node_selection, _affinity, _anti_affinity_topology,
          _storage, _download, _object_store)


def run_refusal(run: RunSpec, policy: Policy) -> Refusal | None:
    """Why the operator's policy refuses what the run asks of the cluster (None: it may), from its spec alone."""
    for check in CHECKS:
        refusal = check(run, policy)
        if refusal is not None:
            return refusal
    return None


def claim_refusal(run: RunSpec, pvc: Mapping[str, Any], policy: Policy) -> Refusal | None:
    """Why the run may not mount the PVC it names in spec.storage.claimName (None: it may). Any PVC of the
    namespace would give the run's author write access to it, and change its group on every mount."""
    labels = (pvc.get("metadata") or {}).get("labels") or {}
    if policy.claims == ANY or labels.get(CLAIM_LABEL) == CLAIM_LABEL_VALUE:
        return None
    return Refusal(CLAIM_NOT_ALLOWED,
                   f"spec.storage.claimName {run.storage.claim_name}: the PVC is not labelled "
                   f"{CLAIM_LABEL}={CLAIM_LABEL_VALUE}, and the operator's {CLAIMS}={LABELLED} lets runs mount only "
                   f"PVCs so labelled: ask whoever owns the PVC to label it (`kubectl label pvc "
                   f"{run.storage.claim_name} {CLAIM_LABEL}={CLAIM_LABEL_VALUE}`), or create a run without "
                   "claimName")  # fmt: skip
