"""Which image dtr's own pods on a cluster run (the transfer pods of `dtr data put`, `dtr model get`, the client's
fetch_model and history): one the cluster's nodes have, never this machine's default.

The built-in name (spec.DEFAULT_TRAINER_IMAGE, a localhost/ name) is on nodes only where the images were imported
(k3d, kind, the dev cluster); a cluster installed from a registry has its images under the registry's name
(docs/clusters.md). So, in order:

1. the image asked for: --image, else DTR_TRAINER_IMAGE;
2. the default trainer image of the operator watching the namespace: its Deployment's --trainer-image or
   DTR_TRAINER_IMAGE, read as `dtr operator` reads them (namespaces.operator_settings), when the user may read that
   Deployment (cluster-wide, or in dtr-system);
3. when there is a run: the image its workers were given (its TFJob's), else its spec.image;
4. else an error naming what to give (NoImage).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dtr_contract import env as contract_env

from dtr_operator.api import CONTAINER_NAME

from .transfer import TransferError

ENV = contract_env.TRAINER_IMAGE  # the operator's, and here: the image asked for


class NoImage(TransferError):
    """No image dtr may trust the cluster's nodes to have: the user must name one."""


@dataclass(frozen=True)
class Found:
    """An image and where it came from, or None and why there is none."""

    image: str | None
    why: str


# ---- pure -----------------------------------------------------------------------------------------


def asked(option: str | None, env: Mapping[str, str]) -> Found:
    if option:
        return Found(option, "--image")
    if env.get(ENV):
        return Found(env[ENV], ENV)
    return Found(None, f"no --image, no {ENV}")


def tfjob_image(tfjob: Mapping[str, Any] | None) -> str | None:
    """The trainer image the operator gave the run's workers (the run's spec.image or its default then)."""
    template = ((((tfjob or {}).get("spec") or {}).get("tfReplicaSpecs") or {}).get("Worker") or {}).get("template")
    containers = ((template or {}).get("spec") or {}).get("containers") or []
    return next((c.get("image") for c in containers if c.get("name") == CONTAINER_NAME), None)


def run_image(name: str, run: Mapping[str, Any] | None, tfjob: Mapping[str, Any] | None) -> Found:
    if run is None:
        return Found(None, f"no run {name} to take an image from")
    if image := tfjob_image(tfjob):
        return Found(image, f"the image of {name}'s workers (its TFJob)")
    if image := (run.get("spec") or {}).get("image"):
        return Found(image, f"{name}'s spec.image")
    return Found(None, f"{name} names no spec.image and its TFJob cannot be read")


def operator_image(namespace: str, deployments: list[Mapping[str, Any]] | None, refused: str = "") -> Found:
    """The default trainer image of the first operator (by namespace/name) whose Deployment watches NAMESPACE;
    deployments None: they could not be read (refused says why)."""
    from dtr_operator.settings import SettingsError

    from .namespaces import operator_settings, watched_namespaces

    if deployments is None:
        return Found(None, f"the operators' Deployments cannot be read ({refused})")
    for deployment in sorted(deployments, key=_name):
        watched = watched_namespaces(deployment)
        if watched and namespace not in watched:
            continue
        try:
            image = operator_settings(deployment).trainer_image
        except SettingsError:  # that operator stops at start: it gives runs no image
            continue
        return Found(image, f"the default trainer image of {_name(deployment)}, the operator watching {namespace}")
    return Found(None, f"no operator's Deployment found watching namespace {namespace}")


def _name(deployment: Mapping[str, Any]) -> str:
    meta = deployment.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def pick(first: Found, *then: Found) -> Found:
    """The first of these that has an image; NoImage saying what each lacked and what to give."""
    for found in (first, *then):
        if found.image:
            return found
    reasons = "; ".join(f.why for f in (first, *then))
    raise NoImage(f"dtr cannot tell which trainer image this cluster's nodes have for its transfer pod ({reasons}): "
                  f"name it with --image IMAGE or {ENV}=IMAGE, the image the operator gives runs (its "
                  "--trainer-image; your cluster's admin knows it)")  # fmt: skip


# ---- against the API server ------------------------------------------------------------------------


def cluster_image(kube: Any, namespace: str, option: str | None = None, run: str | None = None,
                  env: Mapping[str, str] | None = None) -> Found:  # fmt: skip
    """The image for a transfer pod in NAMESPACE (the module's order); RUN: the run the pod is for, if any."""
    wanted = asked(option, os.environ if env is None else env)
    if wanted.image:
        return wanted
    operator = operator_image(namespace, *_deployments(kube))
    if operator.image or run is None:
        return pick(wanted, operator)
    return pick(wanted, operator, run_image(run, kube.get_run(namespace, run), read_tfjob(kube, namespace, run)))


def chooser(kube: Any, namespace: str, option: str | None = None, run: str | None = None,
            say: Callable[[str], None] | None = None) -> Callable[[], str]:  # fmt: skip
    """cluster_image, asked when the pod is made (a model in a bucket needs none); say: told where it came from."""

    def choose() -> str:
        found = cluster_image(kube, namespace, option, run)
        if say is not None:
            say(f"the transfer pod's image: {found.image} ({found.why})")
        return str(found.image)

    return choose


def _deployments(kube: Any) -> tuple[list[dict[str, Any]] | None, str]:
    from dtr_operator.kube import ApiError

    from .namespaces import operator_deployments

    try:
        return operator_deployments(kube), ""
    except ApiError as err:
        if err.status in (401, 403):
            return None, "forbidden to you"
        raise


def read_tfjob(kube: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The run's TFJob, to learn the image its workers run; None when gone or we may not read TFJobs (the
    `edit` role need not cover kubeflow.org)."""
    from dtr_operator.kube import ApiError

    try:
        return kube.get_tfjob(namespace, name)
    except ApiError as err:
        if err.status in (401, 403):
            return None
        raise

