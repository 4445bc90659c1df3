"""What a run may ask of the cluster beyond its own pods, as the cluster's admin allows it with operator flags. Pure.

The operator creates every worker pod with its own rights, so the pod fields a run sets are the operator's
requests, not its author's: labels and annotations that steer cluster add-ons, a priority class, tolerations
of the control plane's taints, affinity that reaches other namespaces, another team's volume. Each is refused
unless a flag allows it (docs/operator.md#what-a-run-lets-its-author-do); a refused run fails before anything
is created, with its own reason (reasons.py) and a message naming the field and the flag.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .reasons import (
    AFFINITY_NOT_ALLOWED,
    CLAIM_NOT_ALLOWED,
    POD_ANNOTATION_NOT_ALLOWED,
    POD_LABEL_NOT_ALLOWED,
    PRIORITY_CLASS_NOT_ALLOWED,
    TOLERATION_NOT_ALLOWED,
)
from .spec import RunSpec

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
)  # fmt: skip
# ...except Kubernetes' recommended labels, which no component acts on (the operator sets managed-by itself).
RECOMMENDED_KEYS = "app.kubernetes.io/*"

# Taints a run tolerates only when --allowed-toleration-keys names them: the control plane's and other node
# roles', and a cordoned node's. A toleration without a key (operator Exists) tolerates every taint: it needs `*`.
GUARDED_TAINTS = ("node-role.kubernetes.io/*", "node.kubernetes.io/unschedulable")
SYSTEM_PRIORITY_PREFIX = "system-"  # system-node-critical, system-cluster-critical: only when listed by name

AFFINITY_KINDS = ("podAffinity", "podAntiAffinity")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
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
    toleration_keys: tuple[str, ...] = ()  # globs of guarded taint keys; `*` also the key-less toleration
    cross_namespace_affinity: bool = False
    claims: str = LABELLED


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
    """A system class only by its exact name (a `*` must not hand out system-node-critical)."""
    if name.startswith(SYSTEM_PRIORITY_PREFIX):
        return name in patterns
    return _any_match(name, patterns)


def _priority(run: RunSpec, policy: Policy) -> Refusal | None:
    gang = run.scheduling_policy
    named = (("spec.priorityClassName", run.placement.priority_class_name),
             ("spec.schedulingPolicy.priorityClass", gang.priority_class if gang else None))  # fmt: skip
    for field, name in named:
        if name is not None and not priority_allowed(name, policy.priority_classes):
            return Refusal(PRIORITY_CLASS_NOT_ALLOWED,
                           f"{field} {name} is not allowed by the operator's {PRIORITY_CLASSES}: "
                           f"{_listed(policy.priority_classes)} (a {SYSTEM_PRIORITY_PREFIX}* class only by its exact "
                           "name); leave it out, or ask a cluster admin to allow it")  # fmt: skip
    return None


def toleration_allowed(toleration: Mapping[str, Any], patterns: Sequence[str]) -> bool:
    key = toleration.get("key") or ""
    if not key:  # only operator Exists may omit the key (the CRD): it tolerates every taint
        return "*" in patterns
    return not _any_match(key, GUARDED_TAINTS) or _any_match(key, patterns)


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


CHECKS = (_labels, _annotations, _priority, _tolerations, _affinity)


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
