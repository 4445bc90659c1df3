"""Pod Security as a precondition of a run's isolation (security review R2). Pure.

A run's NetworkPolicy admits only its own pods to TensorFlow's port, but a pod with `hostNetwork: true` sends from
its node's address, which no pod selector picks and most network plugins let through (the node's own traffic). Only
Pod Security `baseline` or `restricted`, enforced on a namespace, keeps such pods out of it: the run's namespace
without it makes the run's isolation weaker, which the run says (the IsolationWeakened condition, beside other
policies that widen it: netpolicy.exposed_status). deploy/podsecurity.sh lists such namespaces for install.sh and
`make doctor`; tests/unit/operator/test_podsecurity.py keeps the two in agreement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
HOLDING_LEVELS = ("baseline", "restricted")  # the levels that refuse hostNetwork, hostPID, privileged, hostPath
DOCS = "docs/operator.md#pod-security-a-precondition"


def enforced_level(namespace: Mapping[str, Any]) -> str | None:
    """The namespace's enforced Pod Security level (its label), or None."""
    level = ((namespace.get("metadata") or {}).get("labels") or {}).get(ENFORCE_LABEL)
    return level if isinstance(level, str) else None


def weakness(name: str, namespace: Mapping[str, Any]) -> str | None:
    """Why the namespace leaves the run's isolation weaker, in words; None when it enforces baseline or restricted."""
    level = enforced_level(namespace)
    if level in HOLDING_LEVELS:
        return None
    said = f"enforces Pod Security {level!r} only" if level else "enforces no Pod Security level"
    return (f"namespace {name} {said}: a pod there with hostNetwork reaches the workers past any NetworkPolicy; an "
            f"admin labels it {ENFORCE_LABEL}=baseline or restricted ({DOCS})")  # fmt: skip
