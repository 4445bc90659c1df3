"""Which namespaces the operators on this cluster watch (`dtr namespaces`; `dtr render --cluster`, cluster_check.py).

A run in a namespace no operator watches gets no status and no event: nothing reads it. The
operators' Deployments (label app.kubernetes.io/name=dtr-operator) say which namespaces they watch
in their flags and environment; this reads them with the same parser `dtr operator` uses.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dtr_operator.settings import Settings

OPERATOR_LABEL = "app.kubernetes.io/name=dtr-operator"
CONTAINER = "operator"
DEFAULT_DEPLOY_NAMESPACE = "dtr-system"  # deploy/base: where to look when Deployments cannot be listed cluster-wide


@dataclass(frozen=True)
class Watcher:
    """One operator Deployment and what it watches (an empty tuple: all namespaces)."""

    name: str  # namespace/name
    namespaces: tuple[str, ...]
    ready: str  # readyReplicas/replicas

    def watches(self, namespace: str) -> bool:
        return not self.namespaces or namespace in self.namespaces

    def scope(self) -> str:
        return "all namespaces" if not self.namespaces else "namespace(s) " + ", ".join(self.namespaces)


def watched_namespaces(deployment: Mapping[str, Any]) -> tuple[str, ...]:
    """The namespaces the Deployment's operator container watches, as `dtr operator` reads its
    flags and environment (literal env values only); an empty tuple means all namespaces."""
    from dtr_operator import settings as cfg

    container = _operator_container(deployment)
    env = _literal_env(container)
    args = _operator_args(container)
    try:
        return cfg.from_args(args, env).namespaces
    except cfg.SettingsError:
        # Another setting is invalid (that operator stops at start); the namespace settings alone still read.
        only = _operator_parser().parse_args(_namespace_flags(args))
        return cfg.from_args(only, {"DTR_NAMESPACE": env.get("DTR_NAMESPACE", "")}).namespaces


def operator_settings(deployment: Mapping[str, Any]) -> Settings:
    """The settings the Deployment's operator runs with, as `dtr operator` reads its flags and environment
    (literal env values only); SettingsError when one is invalid (that operator stops at start)."""
    from dtr_operator import settings as cfg

    container = _operator_container(deployment)
    return cfg.from_args(_operator_args(container), _literal_env(container))


def _operator_parser() -> argparse.ArgumentParser:
    from dtr_operator import settings as cfg

    parser = argparse.ArgumentParser(add_help=False)
    cfg.add_arguments(parser)
    return parser


def _operator_args(container: Mapping[str, Any]) -> argparse.Namespace:
    args, _ = _operator_parser().parse_known_args([str(a) for a in container.get("args") or []])
    return args


def _operator_container(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod template's container named `operator`, else its first container, else {}."""
    pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = pod.get("containers") or []
    return next((c for c in containers if c.get("name") == CONTAINER), containers[0] if containers else {})


def _literal_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's env variables that have a literal value (a valueFrom is not readable here)."""
    env = container.get("env") or []
    return {e["name"]: e["value"] for e in env if "name" in e and isinstance(e.get("value"), str)}


def _namespace_flags(args: argparse.Namespace) -> list[str]:
    """Only the namespace flags of parsed `dtr operator` arguments, as arguments again."""
    return [f"--namespace={n}" for n in args.namespace or []] + ["--all-namespaces"] * bool(args.all_namespaces)


def watchers(deployments: Sequence[Mapping[str, Any]]) -> list[Watcher]:
    out = []
    for d in deployments:
        meta, status = d.get("metadata") or {}, d.get("status") or {}
        replicas = (d.get("spec") or {}).get("replicas", 1)
        out.append(Watcher(f"{meta.get('namespace')}/{meta.get('name')}", watched_namespaces(d),
                           f"{status.get('readyReplicas') or 0}/{replicas}"))  # fmt: skip
    return sorted(out, key=lambda w: w.name)


def report(found: Sequence[Watcher], namespace: str | None) -> tuple[int, list[str]]:
    """(exit code, lines): 0 when an operator watches `namespace` (or, without one, when any exists)."""
    lines = [f"{w.name} (ready {w.ready}) watches {w.scope()}" for w in found]
    if not found:
        return 1, [f"no DistTrainingRun operator found (no Deployment labelled {OPERATOR_LABEL}): "
                   "install one (kubectl apply -k deploy/, docs/clusters.md)"]  # fmt: skip
    if namespace is None:
        return 0, lines
    by = [w.name for w in found if w.watches(namespace)]
    if by:
        return 0, [f"namespace {namespace}: watched by {', '.join(by)}", *lines]
    return 1, [f"namespace {namespace}: NOT watched: runs created there get no status and no event "
               "(create them in a watched namespace, or widen an operator's --namespace)", *lines]  # fmt: skip


def operator_deployments(kube: Any) -> list[dict[str, Any]]:
    """The operators' Deployments: cluster-wide, else (not allowed to list them everywhere) where deploy/ puts
    the operator. ApiError when neither may be read."""
    from dtr_operator.kube import ApiError

    query = [("labelSelector", OPERATOR_LABEL)]
    try:
        return list(kube.request("GET", "/apis/apps/v1/deployments", query=query).get("items") or [])
    except ApiError as err:
        if err.status != 403:
            raise
    path = f"/apis/apps/v1/namespaces/{DEFAULT_DEPLOY_NAMESPACE}/deployments"
    return list(kube.request("GET", path, query=query).get("items") or [])
