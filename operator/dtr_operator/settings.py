"""Operator settings: flags of `dtr operator`, each with an environment variable (docs/architecture.md).

Flags win over the environment; the environment wins over the defaults. Pure apart from reading
the mapping it is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from . import imageref, objectstore, policy
from .policy import Flag, Policy, Refusal
from .spec import DEFAULT_TRAINER_IMAGE, RunSpec

LOG_FORMATS = ("plain", "json")
TRACKING_ENV = "DTR_MLFLOW_TRACKING_URI"
USER_CODE_MODES = ("allowed", "disallowed")  # runs with spec.training.code.configMap: run them, or refuse them


@dataclass(frozen=True)
class Settings:
    namespaces: tuple[str, ...] = ()  # empty: all namespaces
    trainer_image: str = DEFAULT_TRAINER_IMAGE
    log_format: str = "plain"
    liveness_port: int = 8080  # kopf's health endpoint at /healthz; 0 = off
    metrics_port: int = 9090  # Prometheus /metrics; 0 = off
    # How late a finished epoch may show: the step between reads of a running run's chief log while its epoch's end
    # is due (progress_schedule.py); 0 = off.
    progress_interval: float = 5.0
    # Trainer images a run may name in spec.image (glob patterns); empty: the default image only.
    allowed_images: tuple[str, ...] = ()
    user_code: str = "allowed"
    policy: Policy = field(default_factory=Policy)  # what else a run may ask of the cluster (policy.py)
    # The team's MLflow server every run's chief logs to (docs/tracking.md); empty: none.
    mlflow_tracking_uri: str = ""
    verbose: bool = False

    def image_refusal(self, image: str) -> str | None:
        """Why a run may not use this trainer image (None: it may). Runs execute it with the operator's
        rights to create pods in their namespace, so the cluster admin decides which images qualify. Matched on
        normalized references (imageref.py): `distml/trainer:*` is `docker.io/distml/trainer:*`."""
        if imageref.normalize(image) is None:
            return (
                f"spec.image {image!r} is not a valid image reference ([registry/]path[:tag][@digest], lower-case "
                "path): the operator's --allowed-images (DTR_ALLOWED_IMAGES) admits only valid ones"
            )
        if imageref.same_image(image, self.trainer_image) or any(imageref.matches(p, image)
                                                                  for p in self.allowed_images):
            return None
        allowed = ", ".join(self.allowed_images) if self.allowed_images else f"only the default {self.trainer_image}"
        return (
            f"spec.image {image} is not allowed by the operator's --allowed-images (DTR_ALLOWED_IMAGES: "
            f"{allowed}): use an allowed image, or ask a cluster admin to add a pattern for it"
        )

    def code_refusal(self, config_map: str | None) -> str | None:
        """Why a run may not bring its code in a ConfigMap (None: it may, or it brings none). Code in an image is
        --allowed-images' to judge."""
        if config_map is None or self.user_code == "allowed":
            return None
        return (
            f"spec.training.code.configMap {config_map}: code sent with a run is turned off by the operator's "
            "--user-code=disallowed (DTR_USER_CODE): build an image FROM the trainer image with your module and "
            "name it in spec.training.code.module (it must pass --allowed-images), or ask a cluster admin"
        )

    def run_refusal(self, run: RunSpec) -> Refusal | None:
        """Why the run may not ask the cluster for what its spec asks (policy.py; None: it may)."""
        return policy.run_refusal(run, self.policy)

    def claim_refusal(self, run: RunSpec, pvc: Mapping[str, object]) -> Refusal | None:
        """Why the run may not mount the existing PVC it names (policy.py; None: it may)."""
        return policy.claim_refusal(run, pvc, self.policy)

    @property
    def all_namespaces(self) -> bool:
        return not self.namespaces

    @property
    def liveness_endpoint(self) -> str | None:
        return f"http://0.0.0.0:{self.liveness_port}/healthz" if self.liveness_port else None


class SettingsError(ValueError):
    """A bad flag or environment variable; the message names it."""


def _port(value: str, name: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise SettingsError(f"{name}: must be a port number, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise SettingsError(f"{name}: must be between 0 and 65535, got {port}")
    return port


def _seconds(value: str, name: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise SettingsError(f"{name}: must be a number of seconds, got {value!r}") from None
    if not (seconds == 0 or 1 <= seconds <= 3600):
        raise SettingsError(f"{name}: must be 0 (off) or in 1..3600 seconds, got {value}")
    return seconds


def _user_code(value: str, name: str) -> str:
    if value not in USER_CODE_MODES:
        raise SettingsError(f"{name}: must be {' or '.join(USER_CODE_MODES)}, got {value!r}")
    return value


def _patterns(value: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.split(",") if p.strip())


def _image_patterns(value: str, name: str) -> tuple[str, ...]:
    patterns = _patterns(value)
    bad = [p for p in patterns if imageref.normalize_pattern(p) is None]
    if bad:
        raise SettingsError(f"{name}: {bad[0]!r} is not an image reference pattern ([registry/]path[:tag][@digest], "
                            "with * or ? inside a component)")  # fmt: skip
    return patterns


def _choice(value: str, name: str, choices: tuple[str, str]) -> bool:
    """A two-way flag: whether it is the first choice."""
    if value not in choices:
        raise SettingsError(f"{name}: must be {' or '.join(choices)}, got {value!r}")
    return value == choices[0]


AFFINITY_CHOICES = (policy.ALLOWED, policy.REFUSED)
CLAIM_CHOICES = (policy.ANY, policy.LABELLED)
_POLICY_LISTS = {  # Policy's field -> its flag, for the comma-separated lists of globs
    "pod_labels": policy.POD_LABELS, "pod_annotations": policy.POD_ANNOTATIONS,
    "priority_classes": policy.PRIORITY_CLASSES, "toleration_keys": policy.TOLERATION_KEYS,
    "anti_affinity_topologies": policy.ANTI_AFFINITY_TOPOLOGIES, "storage_classes": policy.STORAGE_CLASSES,
}  # fmt: skip


def _attr(flag: Flag) -> str:
    return flag.option.replace("-", "_")


def _max_storage(value: str, name: str) -> str:
    """--max-storage: a positive quantity (policy.quantity reads it)."""
    size = policy.quantity(value)
    if size is None or size <= 0:
        raise SettingsError(f"{name}: must be a positive Kubernetes quantity such as 100Gi, got {value!r}")
    return value.strip()


def _endpoints(value: str, name: str) -> tuple[str, ...]:
    """--allowed-object-stores: comma-separated endpoints, each scheme://host[:port]."""
    endpoints = _patterns(value)
    if bad := objectstore.bad_endpoints(endpoints):
        raise SettingsError(f"{name}: {bad[0]!r} is not an endpoint: http or https://host[:port], no path, no "
                            "user:password@")  # fmt: skip
    return endpoints


def tracking_uri(value: str, name: str) -> str:
    """--mlflow-tracking-uri: empty, or http(s)://host[:port][/path] with no user:password@ (it is in every
    worker's env, which anyone who may read the run's pods sees), no query."""
    uri = value.strip()
    if not uri:
        return ""
    parts = urllib.parse.urlsplit(uri)
    try:
        parts.port  # noqa: B018 (a bad port raises)
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc or parts.query \
            or parts.fragment:  # fmt: skip
        raise SettingsError(f"{name}: must be an MLflow server's http(s)://host[:port][/path], no user:password@, "
                            f"no query, got {value!r}")  # fmt: skip
    return uri.rstrip("/")


def policy_from_env(env: Mapping[str, str]) -> Policy:
    lists = {attr: _patterns(env.get(flag.env, "")) for attr, flag in _POLICY_LISTS.items()}
    lists["object_stores"] = _endpoints(env.get(policy.OBJECT_STORES.env, ""), policy.OBJECT_STORES.env)
    affinity = env.get(policy.CROSS_NAMESPACE_AFFINITY.env) or policy.REFUSED
    claims = env.get(policy.CLAIMS.env) or policy.LABELLED
    any_claim = _choice(claims, policy.CLAIMS.env, CLAIM_CHOICES)
    max_storage = _max_storage(env.get(policy.MAX_STORAGE.env) or policy.DEFAULT_MAX_STORAGE, policy.MAX_STORAGE.env)
    return Policy(**lists,
                  cross_namespace_affinity=_choice(affinity, policy.CROSS_NAMESPACE_AFFINITY.env, AFFINITY_CHOICES),
                  claims=policy.ANY if any_claim else policy.LABELLED, max_storage=max_storage)  # fmt: skip


def _policy_from_args(args: argparse.Namespace, base: Policy) -> Policy:
    """The flags given over the environment's policy (base)."""
    given = {attr: _patterns(getattr(args, _attr(flag))) for attr, flag in _POLICY_LISTS.items()
             if getattr(args, _attr(flag)) is not None}  # fmt: skip
    affinity = getattr(args, _attr(policy.CROSS_NAMESPACE_AFFINITY))
    if affinity is not None:
        given["cross_namespace_affinity"] = affinity == policy.ALLOWED
    if args.claims is not None:
        given["claims"] = args.claims
    stores = getattr(args, _attr(policy.OBJECT_STORES))
    if stores is not None:
        given["object_stores"] = _endpoints(stores, f"--{policy.OBJECT_STORES.option}")
    if args.max_storage is not None:
        given["max_storage"] = _max_storage(args.max_storage, f"--{policy.MAX_STORAGE.option}")
    return dataclasses.replace(base, **given)


def default_trainer_image(env: Mapping[str, str]) -> str:
    """--trainer-image's default: DTR_TRAINER_IMAGE, else the built-in image (also the image of dtr's transfer
    pods, dtr data put and dtr model get)."""
    return env.get("DTR_TRAINER_IMAGE") or DEFAULT_TRAINER_IMAGE


def from_env(env: Mapping[str, str]) -> Settings:
    namespaces = tuple(ns.strip() for ns in env.get("DTR_NAMESPACE", "").split(",") if ns.strip())
    log_format = env.get("DTR_LOG_FORMAT", "plain") or "plain"
    if log_format not in LOG_FORMATS:
        raise SettingsError(f"DTR_LOG_FORMAT: must be plain or json, got {log_format!r}")
    return Settings(
        namespaces=namespaces,
        trainer_image=default_trainer_image(env),
        log_format=log_format,
        liveness_port=_port(env.get("DTR_LIVENESS_PORT", "8080") or "8080", "DTR_LIVENESS_PORT"),
        metrics_port=_port(env.get("DTR_METRICS_PORT", "9090") or "9090", "DTR_METRICS_PORT"),
        progress_interval=_seconds(env.get("DTR_PROGRESS_INTERVAL", "5") or "5", "DTR_PROGRESS_INTERVAL"),
        allowed_images=_image_patterns(env.get("DTR_ALLOWED_IMAGES", ""), "DTR_ALLOWED_IMAGES"),
        user_code=_user_code(env.get("DTR_USER_CODE") or "allowed", "DTR_USER_CODE"),
        policy=policy_from_env(env),
        mlflow_tracking_uri=tracking_uri(env.get(TRACKING_ENV, ""), TRACKING_ENV),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", "-n", action="append", metavar="NS",
        help="watch only this namespace (repeatable; env DTR_NAMESPACE, comma-separated)",
    )  # fmt: skip
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch all namespaces (the default)")
    parser.add_argument("--trainer-image", metavar="IMG", help="default spec.image (env DTR_TRAINER_IMAGE)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, help="log format (env DTR_LOG_FORMAT; default plain)")
    parser.add_argument(
        "--liveness-port", metavar="N", help="kopf health endpoint port, /healthz; 0 = off (env DTR_LIVENESS_PORT)"
    )
    parser.add_argument(
        "--metrics-port", metavar="N", help="Prometheus /metrics port; 0 = off (env DTR_METRICS_PORT)"
    )
    parser.add_argument(
        "--progress-interval", metavar="S",
        help="seconds: how late a finished epoch may show in status.progress, the step between reads of a running "
        "run's chief log while its epoch's end is due (reads are timed to each run's epochs); 0 = off, no stall "
        "watchdog either (env DTR_PROGRESS_INTERVAL; default 5)",
    )  # fmt: skip
    parser.add_argument(
        "--allowed-images", metavar="PATTERNS",
        help="trainer images a run may name in spec.image, comma-separated glob patterns such as "
        "'registry.example.com/ml/*', matched on normalized references (no registry: docker.io) where * and ? "
        "never cross '/'; the default image is always allowed; empty: only the default (env DTR_ALLOWED_IMAGES)",
    )  # fmt: skip
    parser.add_argument(
        "--user-code", choices=USER_CODE_MODES,
        help="allowed: runs may bring their own Python code in a ConfigMap (spec.training.code.configMap); "
        "disallowed: such runs fail (UserCodeNotAllowed), code in an allowed image still runs "
        "(env DTR_USER_CODE; default allowed)",
    )  # fmt: skip
    _add_policy_arguments(parser)
    parser.add_argument(
        "--mlflow-tracking-uri", metavar="URI",
        help="an MLflow tracking server, http(s)://host[:port][/path]: every run's chief logs its params, each "
        "epoch's figures and its exported version there and registers the version (docs/tracking.md); a server "
        f"down or slow never fails a run; empty: none (env {TRACKING_ENV})",
    )  # fmt: skip
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")


def _add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of policy.py: what a run may ask of the cluster beyond its pods (none of it by default)."""
    refused = "; keys that steer add-ons or belong to Kubernetes are refused whatever this says"
    lists = {
        policy.POD_LABELS: f"label keys a run may put on its pods (spec.podLabels){refused}",
        policy.POD_ANNOTATIONS: f"annotation keys a run may put on its pods (spec.podAnnotations){refused}",
        policy.PRIORITY_CLASSES: "PriorityClasses a run may name (spec.priorityClassName, "
        "spec.schedulingPolicy.priorityClass) and Kueue WorkloadPriorityClasses (spec.workloadPriorityClass); a "
        "system- class, or the operator's own (dtr-operator), only by its exact name",
        policy.TOLERATION_KEYS: "control-plane, node-role and cordoned-node taint keys a run may tolerate, and node "
        "label keys of these it may select nodes by (spec.nodeSelector, nodeAffinity); '*' also allows the key-less "
        "toleration of every taint",
        policy.ANTI_AFFINITY_TOPOLOGIES: "topology keys a required pod anti-affinity term may spread over besides "
        f"{policy.HOSTNAME_TOPOLOGY} (always allowed), such as topology.kubernetes.io/zone",
        policy.STORAGE_CLASSES: "StorageClasses a run may name for the PVC the operator creates "
        "(spec.storage.storageClassName); a run that names none gets the cluster's default class",
    }  # fmt: skip
    for flag, what in lists.items():
        parser.add_argument(f"--{flag.option}", metavar="PATTERNS",
                            help=f"{what}; comma-separated globs, empty: none (env {flag.env})")  # fmt: skip
    parser.add_argument(
        f"--{policy.CROSS_NAMESPACE_AFFINITY.option}", choices=AFFINITY_CHOICES,
        help="whether a run's pod (anti-)affinity terms may select pods of other namespaces "
        f"(env {policy.CROSS_NAMESPACE_AFFINITY.env}; default {policy.REFUSED})",
    )  # fmt: skip
    parser.add_argument(
        f"--{policy.CLAIMS.option}", choices=CLAIM_CHOICES,
        help=f"which PVCs a run may name in spec.storage.claimName: {policy.LABELLED}, those labelled "
        f"{policy.CLAIM_LABEL}={policy.CLAIM_LABEL_VALUE}; {policy.ANY}, any of its namespace "
        f"(env {policy.CLAIMS.env}; default {policy.LABELLED})",
    )  # fmt: skip
    parser.add_argument(
        f"--{policy.OBJECT_STORES.option}", metavar="ENDPOINTS",
        help="object stores a run may name in spec.objectStore.endpoint, comma-separated scheme://host[:port] "
        "endpoints compared exactly (the scheme's default port may be left out); empty: none "
        f"(env {policy.OBJECT_STORES.env}; docs/object-storage.md)",
    )  # fmt: skip
    parser.add_argument(
        f"--{policy.MAX_STORAGE.option}", metavar="QUANTITY",
        help="the largest spec.storage.size of the PVC the operator creates for a run, and the largest "
        "spec.training.datasetSource.maxSize, a Kubernetes quantity "
        f"(env {policy.MAX_STORAGE.env}; default {policy.DEFAULT_MAX_STORAGE})",
    )  # fmt: skip


def from_args(args: argparse.Namespace, env: Mapping[str, str]) -> Settings:
    base = from_env(env)
    interval = args.progress_interval
    return Settings(
        namespaces=_namespaces(args, base.namespaces),
        trainer_image=args.trainer_image or base.trainer_image,
        log_format=args.log_format or base.log_format,
        liveness_port=_port(args.liveness_port, "--liveness-port") if args.liveness_port else base.liveness_port,
        metrics_port=_port(args.metrics_port, "--metrics-port") if args.metrics_port else base.metrics_port,
        progress_interval=_seconds(interval, "--progress-interval") if interval else base.progress_interval,
        allowed_images=(_image_patterns(args.allowed_images, "--allowed-images") if args.allowed_images is not None
                        else base.allowed_images),
        user_code=args.user_code or base.user_code,
        policy=_policy_from_args(args, base.policy),
        mlflow_tracking_uri=(tracking_uri(args.mlflow_tracking_uri, "--mlflow-tracking-uri")
                             if args.mlflow_tracking_uri is not None else base.mlflow_tracking_uri),
        verbose=bool(args.verbose),
    )


def _namespaces(args: argparse.Namespace, default: Sequence[str]) -> tuple[str, ...]:
    """--all-namespaces: all (empty); --namespace (repeatable, comma-separated): those; neither: default."""
    if args.all_namespaces:
        return ()
    if args.namespace:
        return tuple(ns for arg in args.namespace for ns in arg.split(",") if ns)
    return tuple(default)
