"""The run's NetworkPolicy held, not just created (security review R3), and the other policies that widen it. Pure.

The run's policy: what the operator finds under the run's name -> one step (step): nothing (Held), make it
(Make: deleted, or never made), put its spec and the operator's labels back (Restore: widened, narrowed, or its
labels taken off, which would also hide it from the operator's watch), or it is not the run's (Taken: no owner
reference to the run; the operator never adopts one). reconcile/guard.py carries the step out; decide.py says what
the run does when it cannot (the workers stop).

Other policies: Kubernetes NetworkPolicies add up. A pod selected by any policy with Ingress admits what any of them
admits, so the run's own policy is a floor, not a ceiling: another policy of the namespace that selects the run's
workers and admits TCP 2222 from elsewhere opens TensorFlow's server to that too (exposure, reported on the run as
the IsolationWeakened condition: exposed_status).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtr_contract.container import PORT

from .api import KIND, MANAGED_BY, PORT_NAME, RUN_LABEL
from .builders import build_network_policy, is_owned_by, network_policy_spec, owned_by
from .labels import selects, worker_labels
from .reasons import ISOLATION_CONDITION, NO_OTHER_POLICY, OTHER_POLICY_ADMITS, POD_SECURITY_NOT_ENFORCED
from .spec import RunSpec
from .status.conditions import set_condition
from .status.state import clean_text


@dataclass(frozen=True)
class Held:
    """The run's policy is there, the run's, and as the operator makes it."""


@dataclass(frozen=True)
class Make:
    """No policy of the run's name: create this one (owned by the run)."""

    manifest: Mapping[str, Any]


@dataclass(frozen=True)
class Restore:
    """The run's policy, changed: this JSON patch puts it back (a precondition on the resourceVersion seen: a write
    meanwhile makes the API answer 409, and the operator looks again); `changed` says what was changed, in words."""

    patch: list[dict[str, Any]]
    changed: str


@dataclass(frozen=True)
class Taken:
    """A policy of the run's name that is not the run's: left untouched (the operator never adopts an object)."""

    policy: Mapping[str, Any]


Step = Held | Make | Restore | Taken


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _changes(found: Mapping[str, Any], name: str) -> list[str]:
    """What differs from the policy of the run of this name: its spec, the operator's labels."""
    changed = []
    if found.get("spec") != network_policy_spec(name):
        changed.append("its spec")
    labels = _meta(found).get("labels") or {}
    if any(labels.get(k) != v for k, v in {RUN_LABEL: name, **MANAGED_BY}.items()):
        changed.append("its labels")
    return changed


def intact(policy: Mapping[str, Any], run_name: str) -> bool:
    """Whether a policy (a watch event's, read with no API call) is as the operator makes the run of this name's,
    its owner aside (step checks that against the run)."""
    return not _changes(policy, run_name)


def step(run: RunSpec, found: Mapping[str, Any] | None) -> Step:
    """What the run's policy needs, from the policy of its name (None: there is none)."""
    if found is None:
        return Make(owned_by(build_network_policy(run), run))
    if not is_owned_by(found, run.uid):
        return Taken(found)
    changed = _changes(found, run.name)
    if not changed:
        return Held()
    labels = {**(_meta(found).get("labels") or {}), RUN_LABEL: run.name, **MANAGED_BY}
    patch = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": _meta(found).get("resourceVersion")},
        {"op": "replace", "path": "/spec", "value": network_policy_spec(run.name)},
        {"op": "add", "path": "/metadata/labels", "value": labels},
    ]
    return Restore(patch, " and ".join(changed))


def not_held_why(run: RunSpec, taken: Mapping[str, Any] | None, refusal: str | None = None) -> str:
    """Why the run's policy is not held, in words for its status: a policy of its name not its own, or the API's
    refusal of a read or write."""
    if taken is not None:
        return (f"NetworkPolicy {run.name} is not this run's (no owner reference to it); delete it, and the operator "
                f"makes the run's own again")  # fmt: skip
    return f"the API refused it: {refusal}"


# ---- other policies: what they admit to the run's workers --------------------------------------------------


def _selects_workers(run: RunSpec, policy: Mapping[str, Any]) -> bool:
    selector = (policy.get("spec") or {}).get("podSelector")
    pod_labels = run.placement.pod_labels
    return any(selects(selector, worker_labels(run.name, run.tfjob_name, pod_labels, i)) for i in range(run.workers))


def _has_ingress(policy: Mapping[str, Any]) -> bool:
    """Ingress is one of its types: listed, or by default (no policyTypes: Ingress always, as the API defaults it)."""
    types = (policy.get("spec") or {}).get("policyTypes")
    return not types or "Ingress" in types


def _admits_port(ports: Sequence[Mapping[str, Any]] | None) -> bool:
    """Whether a rule's ports take in TCP PORT: no ports (every port), the port, its name, or a range over it."""
    if not ports:
        return True
    for port in ports:
        if (port.get("protocol") or "TCP") != "TCP":
            continue
        number, end = port.get("port"), port.get("endPort")
        if number is None or number in (PORT, PORT_NAME):
            return True
        if isinstance(number, int) and isinstance(end, int) and number <= PORT <= end:
            return True
    return False


def _elsewhere(run: RunSpec, peers: Sequence[Mapping[str, Any]] | None) -> str | None:
    """From where, beyond the run's own pods, the rule's peers admit: None when only the run's pods (a podSelector
    of this namespace requiring the run's label)."""
    if not peers:
        return "anywhere"
    for peer in peers:
        if peer.get("ipBlock") is not None:
            return f"addresses {clean_text(str((peer['ipBlock'] or {}).get('cidr')), 60)}"
        if peer.get("namespaceSelector") is not None:
            return "pods of the namespaces its namespaceSelector picks"
        if ((peer.get("podSelector") or {}).get("matchLabels") or {}).get(RUN_LABEL) != run.name:
            return "other pods of the namespace"
    return None


def admits_elsewhere(run: RunSpec, policy: Mapping[str, Any]) -> str | None:
    """From where another policy admits the run's workers' TensorFlow port beyond the run's own pods, in words; None
    when it does not (it selects no worker, has no Ingress, admits no TCP 2222, or only from the run's pods)."""
    if not _has_ingress(policy) or not _selects_workers(run, policy):
        return None
    for rule in (policy.get("spec") or {}).get("ingress") or []:
        if _admits_port(rule.get("ports")) and (where := _elsewhere(run, rule.get("from"))) is not None:
            return where
    return None


def is_runs_own(run: RunSpec, policy: Mapping[str, Any]) -> bool:
    """The run's own policy (of its name, owned by it): held by step, not reported."""
    return _meta(policy).get("name") == run.name and is_owned_by(policy, run.uid)


def is_a_runs_own(policy: Mapping[str, Any]) -> bool:
    """Some run's own policy as the operator makes it (controlled by a run of its name, intact): it selects only that
    run's pods and admits only them, so it widens no other run's."""
    name = _meta(policy).get("name")
    controlled = any(ref.get("controller") and ref.get("kind") == KIND and ref.get("name") == name
                     for ref in _meta(policy).get("ownerReferences") or [])  # fmt: skip
    return controlled and isinstance(name, str) and intact(policy, name)


def exposure(run: RunSpec, policies: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per other policy of the namespace that admits the workers' port from elsewhere, by name."""
    lines = []
    for policy in sorted(policies, key=lambda p: str(_meta(p).get("name") or "")):
        if not is_runs_own(run, policy) and (where := admits_elsewhere(run, policy)) is not None:
            lines.append(f"NetworkPolicy {clean_text(str(_meta(policy).get('name')), 253)} admits TCP {PORT} "
                         f"from {where}")  # fmt: skip
    return lines


def exposed_status(status: Mapping[str, Any], lines: Sequence[str], now: str, generation: int | None,
                   pod_security: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The status with the IsolationWeakened condition: True while other policies widen the run's (`lines`) or its
    namespace enforces no Pod Security that keeps host-network pods out (`pod_security`: podsecurity.weakness);
    False once neither holds after it was True; absent while none was ever found (no condition, so no write)."""
    conditions = status.get("conditions") or []
    was = next((c for c in conditions if c.get("type") == ISOLATION_CONDITION), None)
    if not lines and pod_security is None and was is None:
        return dict(status)
    if lines or pod_security:
        reason = OTHER_POLICY_ADMITS if lines else POD_SECURITY_NOT_ENFORCED
        cond = set_condition(conditions, ISOLATION_CONDITION, True, reason, _weakened(lines, pod_security), now,
                             generation)  # fmt: skip
    else:
        message = "no other NetworkPolicy of the namespace admits the workers' TensorFlow port"
        cond = set_condition(conditions, ISOLATION_CONDITION, False, NO_OTHER_POLICY, message, now, generation)
    return {**status, "conditions": cond}


def _weakened(lines: Sequence[str], pod_security: str | None) -> str:
    said = [f"{'; '.join(lines)}: NetworkPolicies add up, so these reach the workers' TensorFlow server too "
            "(docs/operator.md)"] if lines else []  # fmt: skip
    return clean_text("; ".join([*said, *([pod_security] if pod_security else [])]))
