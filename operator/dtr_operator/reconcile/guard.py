"""A run's NetworkPolicy held (security review R3): read it, decide with netpolicy.py, make it again or put its spec
back; and the other policies of the namespace that admit the workers' port from elsewhere, or a namespace that
enforces no Pod Security (podsecurity.py), reported on the run (the IsolationWeakened condition). What the run does
when its policy cannot be held is decide.py's (policy_not_held) and children.py's to carry out.

When: before a run's children are made (its first policy), whenever its attempt finds its TFJob (the operator's
start, a change of spec.suspend, a retry), on every watch event of a policy the operator owns that is not as it
makes it (handlers.py, Reconciler.policy_event), and before the stall watchdog resumes a restarted run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import netpolicy, podsecurity
from ..api import NETWORK_POLICY_API_VERSION, NETWORK_POLICY_KIND
from ..kube import AlreadyExists, ApiError, Conflict, NotFound
from ..reasons import NETWORK_POLICY_RESTORED
from ..spec import RunSpec
from .context import Context, ObservedRun, meta

log = logging.getLogger(__name__)

# How long the other policies of a namespace, listed once, serve every run of it (report): one LIST per namespace in
# that time, however many runs are created, resumed or read for their progress meanwhile.
OTHERS_SECONDS = 30.0
JSON_PATCH = "application/json-patch+json"


@dataclass(eq=False)
class Guard:
    """The run's NetworkPolicy, held; the namespace's other policies, looked at."""

    ctx: Context
    clock: Callable[[], float] = time.monotonic
    # namespace -> (when listed, its policies that are not some run's own as the operator makes it)
    others: dict[str, tuple[float, list[dict[str, Any]]]] = field(default_factory=dict)
    refused: set[tuple[str, int]] = field(default_factory=set)  # (namespace, status) of a refused list, said once
    namespaces: dict[str, tuple[float, str | None]] = field(default_factory=dict)  # -> (when read, its weakness)

    def hold(self, run: ObservedRun, restoring: bool) -> Mapping[str, Any] | None:
        """Make the run's policy what the operator makes: create it when there is none, put back its spec and labels
        when they changed. Returns None when it holds, or the policy of its name that is not the run's (untouched).
        ApiError when the API refuses a read or a write. `restoring`: the run's children exist, so a missing or
        changed policy is news, said in a Warning event (else it is the run's first)."""
        spec = run.spec
        for attempt in range(self.ctx.retries.observations):
            # A run's first policy is made without a read first (a burst of runs makes one call each), and read only
            # when its name is taken.
            unread = attempt == 0 and not restoring
            found = None if unread else self.ctx.kube.get(NETWORK_POLICY_API_VERSION, NETWORK_POLICY_KIND,
                                                          spec.namespace, spec.name)  # fmt: skip
            step = netpolicy.step(spec, found)
            if isinstance(step, netpolicy.Held):
                return None
            if isinstance(step, netpolicy.Taken):
                return step.policy
            try:
                self._carry_out(spec, step)
            except (AlreadyExists, Conflict, NotFound):
                continue  # changed meanwhile: look again
            if restoring:
                what = "was deleted: made again" if isinstance(step, netpolicy.Make) else f"had {step.changed} " \
                    "changed: put back"  # fmt: skip
                self.ctx.emit(run.body, "Warning", NETWORK_POLICY_RESTORED, f"NetworkPolicy {spec.name} {what} (only "
                              "the run's own workers may reach TensorFlow's port)")  # fmt: skip
                log.warning("run %s/%s: its NetworkPolicy %s", spec.namespace, spec.name, what)
            return None
        raise ApiError(409, "Conflict", f"NetworkPolicy {spec.namespace}/{spec.name} kept changing; will retry")

    def why_not_held(self, run: ObservedRun) -> str | None:
        """hold a run whose children exist, in words: None when its policy holds, else why not, for its status."""
        try:
            taken = self.hold(run, restoring=True)
        except ApiError as err:  # refused (RBAC, an admission policy), or no answer: the workers stop either way
            return netpolicy.not_held_why(run.spec, None, f"{err.status} {err.reason}: {err.message[:200]}")
        return None if taken is None else netpolicy.not_held_why(run.spec, taken)

    def _carry_out(self, run: RunSpec, step: netpolicy.Make | netpolicy.Restore) -> None:
        if isinstance(step, netpolicy.Make):
            self.ctx.kube.create(step.manifest)
        else:
            self.ctx.kube.patch(NETWORK_POLICY_API_VERSION, NETWORK_POLICY_KIND, run.namespace, run.name, step.patch,
                                content_type=JSON_PATCH)  # fmt: skip

    # ---- the other policies of the namespace -----------------------------------------------------------------

    def report(self, run: ObservedRun) -> None:
        """Write the IsolationWeakened condition from the namespace's other policies (netpolicy.exposure); no write
        when it says what it said. A refused list is logged once per namespace: the run's own policy still holds."""
        spec = run.spec
        try:
            policies = self._others(spec.namespace)
        except ApiError as err:
            key = (spec.namespace, err.status)
            if key not in self.refused:
                self.refused.add(key)
                log.warning("NetworkPolicies of namespace %s not listed: %s (the operator's RBAC needs list on "
                            "networkpolicies); the runs there are not told of policies that widen theirs",
                            spec.namespace, err)  # fmt: skip
            return
        lines = netpolicy.exposure(spec, policies)
        weak = self._pod_security(spec.namespace)
        self.ctx.record(run.body, lambda prev: netpolicy.exposed_status(prev, lines, self.ctx.now(), spec.generation,
                                                                        weak))  # fmt: skip

    def _pod_security(self, namespace: str) -> str | None:
        """podsecurity.weakness of the namespace, read at most once per OTHERS_SECONDS; None when it cannot be read
        (said once in the log: the RBAC of an older install lacks get on namespaces)."""
        at = self.clock()
        if namespace not in self.namespaces or at - self.namespaces[namespace][0] >= OTHERS_SECONDS:
            try:
                found = self.ctx.kube.get("v1", "Namespace", "", namespace) or {}
            except ApiError as err:
                # Said once, apart from a refused list of its policies (refused's other key), and not asked again
                # before OTHERS_SECONDS: an older install's RBAC refuses every read.
                if (f"Namespace {namespace}", err.status) not in self.refused:
                    self.refused.add((f"Namespace {namespace}", err.status))
                    log.warning("namespace %s not read: %s (the operator's RBAC needs get on namespaces); its runs "
                                "are not told whether it enforces Pod Security", namespace, err)  # fmt: skip
                found = None
            self.namespaces[namespace] = (at, None if found is None else podsecurity.weakness(namespace, found))
        return self.namespaces[namespace][1]

    def _others(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        """The namespace's policies but the runs' own as the operator makes them (they admit only their run's pods to
        their run's pods), listed at most once per OTHERS_SECONDS; each kept as its name, owners and spec."""
        at = self.clock()
        for stale in [ns for ns, (listed, _) in self.others.items() if at - listed >= OTHERS_SECONDS]:
            del self.others[stale]
        if namespace not in self.others:
            found = self.ctx.kube.list_objects(NETWORK_POLICY_API_VERSION, NETWORK_POLICY_KIND, namespace)
            kept = [{"metadata": {"name": meta(p).get("name"), "ownerReferences": meta(p).get("ownerReferences")},
                     "spec": p.get("spec") or {}} for p in found if not netpolicy.is_a_runs_own(p)]  # fmt: skip
            self.others[namespace] = (at, kept)
        return self.others[namespace][1]
