"""The largest spec the API server can admit, computed from the generated CRD (crds/disttrainingrun.yaml): every
string, list and map in spec must be bounded there (maxLength, maxItems, maxProperties and, for a map's keys, the
generated `size(k) <= N` rule), so a new unbounded field fails here. Why it matters: the operator and kopf hold
runs in memory, and a tenant may create many (docs/performance.md#operator-memory). One map's keys are bounded at
admission instead, where no CEL rule of the CRD can see them: spec.training.params' (deploy/base/admission.yaml,
read here too)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from support.repo import REPO

# The bound this file holds the CRD to, in characters of compact JSON (characters, as maxLength counts them: a
# non-ASCII one takes more bytes). docs/performance.md#operator-memory measures the operator at this size.
MAX_SPEC_CHARS = 72 * 1024
NUMBER_CHARS = 24  # -9223372036854775808 and any double as JSON
KEY_BOUND = re.compile(r"self\.all\(k, size\(k\) <= (\d+)")
# Bounded by the admission policy's grammar of the names, not by the CRD: its longest name, read from the policy.
ADMITTED_KEYS = {"spec.training.params": re.compile(r"k\.matches\('\^\[A-Za-z_\]\[A-Za-z0-9_\]\{0,(\d+)\}\$'\)")}


def _admitted_key_chars(path: str) -> int | None:
    """The longest key the admission policy admits in the map at path, or None: it does not bound that map."""
    if path not in ADMITTED_KEYS:
        return None
    text = (REPO / "deploy" / "base" / "admission.yaml").read_text()
    match = ADMITTED_KEYS[path].search(text)
    return None if match is None else 1 + int(match.group(1))


class Unbounded(AssertionError):
    """A field whose size the schema does not bound."""


def _spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "disttrainingrun.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _key_chars(node: dict[str, Any], path: str) -> int:
    bounds = [int(m.group(1)) for v in node.get("x-kubernetes-validations", []) if (m := KEY_BOUND.match(v["rule"]))]
    if (admitted := _admitted_key_chars(path)) is not None:
        bounds.append(admitted)
    if not bounds:
        raise Unbounded(f"{path}: a map without a rule bounding its keys' length")
    return min(bounds)


def _count(node: dict[str, Any], key: str, path: str) -> int:
    if key not in node:
        raise Unbounded(f"{path}: no {key}")
    return int(node[key])


def _string_chars(node: dict[str, Any], path: str) -> int:
    if "enum" in node:
        return max(len(json.dumps(v)) for v in node["enum"])
    return 2 + _count(node, "maxLength", path)


def _object_chars(node: dict[str, Any], path: str) -> int:
    if "properties" in node:
        members = [len(json.dumps(k)) + 1 + max_chars(v, f"{path}.{k}") for k, v in node["properties"].items()]
        return 2 + sum(members) + len(members) - 1
    if "additionalProperties" in node:
        entries = _count(node, "maxProperties", path)
        entry = 2 + _key_chars(node, path) + 1 + max_chars(node["additionalProperties"], f"{path}[*]")
        return 2 + entries * (entry + 1)
    raise Unbounded(f"{path}: an object without properties (x-kubernetes-preserve-unknown-fields?)")


def max_chars(node: dict[str, Any], path: str = "spec") -> int:
    """The most characters of compact JSON the value at this schema node can take."""
    if node.get("x-kubernetes-preserve-unknown-fields") and "properties" not in node:
        if "type" not in node and node.get("maxProperties") == 0 and node.get("maxItems") == 0:
            return max(NUMBER_CHARS, len("false"), _string_chars(node, path))  # a scalar: a number, bool or string
        raise Unbounded(f"{path}: x-kubernetes-preserve-unknown-fields")
    if node.get("x-kubernetes-int-or-string"):
        return max(NUMBER_CHARS, _string_chars(node, path))
    kind = node.get("type")
    if kind in ("integer", "number"):
        return NUMBER_CHARS
    if kind == "boolean":
        return len("false")
    if kind == "string":
        return _string_chars(node, path)
    if kind == "array":
        return 2 + _count(node, "maxItems", path) * (max_chars(node["items"], f"{path}[]") + 1)
    if kind == "object":
        return _object_chars(node, path)
    raise Unbounded(f"{path}: type {kind!r}")


def test_the_largest_spec_the_api_server_admits_is_bounded() -> None:
    largest = max_chars(_spec_schema())
    assert largest <= MAX_SPEC_CHARS, f"the largest admissible spec is {largest} characters"


@pytest.mark.parametrize(
    "node",
    [
        {"type": "string"},
        {"type": "array", "items": {"type": "string", "maxLength": 1}},
        {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string", "maxLength": 1}},
        {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        {"type": "object", "properties": {"a": {"type": "object", "additionalProperties": {"type": "string"}}}},
    ],
    ids=["string", "list", "map-keys", "preserve-unknown", "nested-map"],
)
def test_an_unbounded_field_is_found(node: dict[str, Any]) -> None:
    with pytest.raises(Unbounded):
        max_chars(node)


def test_a_bounded_map_counts_keys_and_values() -> None:
    node = {"type": "object", "maxProperties": 2, "additionalProperties": {"type": "string", "maxLength": 3},
            "x-kubernetes-validations": [{"rule": "self.all(k, size(k) <= 4 && k.indexOf('/') <= 253)"}]}  # fmt: skip
    assert max_chars(node) == len(json.dumps({"aaaa": "xxx", "bbbb": "yyy"}, separators=(",", ":"))) + 1
