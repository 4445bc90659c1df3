"""status.code: the run's code from its ConfigMap (spec.training.code.configMap), as the operator read it. Pure."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any


def configmap_content(config_map: Mapping[str, Any] | None, key: str) -> bytes | None:
    """The bytes the workers will read from the ConfigMap's key (the kubelet writes data as UTF-8 and
    binaryData decoded), or None when the ConfigMap or the key is missing."""
    if config_map is None:
        return None
    text = (config_map.get("data") or {}).get(key)
    if isinstance(text, str):
        return text.encode()
    encoded = (config_map.get("binaryData") or {}).get(key)
    try:
        return base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
    except binascii.Error:
        return None


def code_status(config_map: str, key: str, content: bytes) -> dict[str, str]:
    """status.code: which file the workers run, and its SHA-256 (as `sha256sum FILE` prints it)."""
    return code_record(config_map, key, hashlib.sha256(content).hexdigest())


def code_record(config_map: str, key: str, sha256: str) -> dict[str, str]:
    """status.code from a digest already known: the one the TFJob's workers check (builders.pinned_code_sha256)."""
    return {"configMap": config_map, "key": key, "sha256": sha256}
