"""A run's object store (spec.objectStore; docs/object-storage.md): its typed value, what the workers get of it (the
environment, the CA mounted), and whether the operator's --allowed-object-stores admits its endpoint. Pure.

The keys reach the workers only as secretKeyRefs to the run's Secret: no key is ever in the TFJob, the run's status,
an event or a log line, and the operator never reads the Secret (it has no right to: deploy/rbac).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

from dtr_contract import env

from .fields_objectstore import DEFAULT_REGION

CA_VOLUME = "dtr-s3-ca"
CA_DIR = "/etc/dtr-s3-ca"  # read-only, outside the volume and the image's own directories
CA_KEY = "ca.crt"
CA_FILE_MODE = 0o444  # read by the workers' uid, not the file's owner
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class ObjectStoreSpec:
    """spec.objectStore with its defaults (fields_objectstore.py declares it)."""

    endpoint: str = ""
    credentials_secret: str = ""
    region: str = DEFAULT_REGION
    ca_config_map: str | None = None


def normalized_endpoint(endpoint: str) -> str | None:
    """scheme://host:port, lower-case, the scheme's port written out, no trailing '/'; None: not an endpoint
    (a path, a query, user:password@, another scheme)."""
    try:
        parts = urlsplit(endpoint.strip().lower())
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:  # a port that is not a number, or out of range
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or not _bare(parts):
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}"


def _bare(parts: SplitResult) -> bool:
    """Nothing but scheme, host and port (a lone '/' aside)."""
    return parts.path in ("", "/") and not (parts.query or parts.fragment or parts.username or parts.password)


def endpoint_allowed(endpoint: str, allowed: Sequence[str]) -> bool:
    """Whether the endpoint is one of the allowed ones, compared normalized (http://s3:80 is http://s3)."""
    mine = normalized_endpoint(endpoint)
    return mine is not None and mine in {normalized_endpoint(a) for a in allowed}


def bad_endpoints(endpoints: Sequence[str]) -> list[str]:
    """The entries of an allow-list that are not endpoints (settings.py refuses the flag with them)."""
    return [e for e in endpoints if normalized_endpoint(e) is None]


def _secret_key(secret: str, key: str) -> dict[str, Any]:
    return {"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def trainer_env(store: ObjectStoreSpec | None) -> list[dict[str, Any]]:
    """What the trainer and TensorFlow's s3:// read (dtr_contract.env); the keys from the Secret, by reference."""
    if store is None:
        return []
    variables: list[dict[str, Any]] = [
        {"name": env.S3_ENDPOINT, "value": store.endpoint},
        {"name": env.AWS_REGION, "value": store.region},
        _secret_key(store.credentials_secret, env.AWS_ACCESS_KEY_ID),
        _secret_key(store.credentials_secret, env.AWS_SECRET_ACCESS_KEY),
        {"name": env.AWS_RETRY_MODE, "value": env.RETRY_MODE},
        {"name": env.AWS_MAX_ATTEMPTS, "value": str(env.MAX_ATTEMPTS)},
        {"name": env.AWS_EC2_METADATA_DISABLED, "value": "true"},
    ]
    if store.ca_config_map is not None:
        variables.append({"name": env.S3_CA_FILE, "value": f"{CA_DIR}/{CA_KEY}"})
    return variables


def volumes(store: ObjectStoreSpec | None) -> list[dict[str, Any]]:
    """The CA's ConfigMap as a volume holding only ca.crt; none without a CA."""
    if store is None or store.ca_config_map is None:
        return []
    items = [{"key": CA_KEY, "path": CA_KEY, "mode": CA_FILE_MODE}]
    return [{"name": CA_VOLUME, "configMap": {"name": store.ca_config_map, "items": items,
                                              "defaultMode": CA_FILE_MODE}}]  # fmt: skip


def mounts(store: ObjectStoreSpec | None) -> list[dict[str, Any]]:
    return [{"name": CA_VOLUME, "mountPath": CA_DIR, "readOnly": True} for _ in volumes(store)]
