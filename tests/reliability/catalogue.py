"""The attack catalogue (tests/reliability/attacks/*.yaml): what a run author with only `create` on runs and
ConfigMaps in one namespace may try, and how each attempt must end. Pure: loading, checking, merging.

Each file is a YAML list of entries:

    id: H3-istio-proxy-image     # the review's finding id + a slug, unique across files
    finding: H3                  # ../shared/review/security.md
    attack: "what the author tries, in words"
    spec: {...}                  # deep-merged into a small valid run's spec
    objects: [...]               # optional: what the admin created first in the run's namespace
    operator_args: [...]         # optional: the operator flags under which the attack is tried (default: none)
    refused_by: crd | operator   # crd: the API server refuses the create; operator: the run ends Failed, nothing made
    reason: "..."                # crd: a substring of the API server's message; operator: the status reason
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ATTACKS = HERE / "attacks"
REFUSERS = ("crd", "operator")


class CatalogueError(ValueError):
    pass


@dataclass(frozen=True)
class Attack:
    id: str
    finding: str
    attack: str
    spec: dict[str, Any]
    refused_by: str
    reason: str
    source: str
    objects: tuple[dict[str, Any], ...] = ()
    operator_args: tuple[str, ...] = field(default=())


def _attack(entry: Any, source: str) -> Attack:
    if not isinstance(entry, dict):
        raise CatalogueError(f"{source}: an entry is not a mapping: {entry!r}")
    missing = [k for k in ("id", "finding", "attack", "spec", "refused_by", "reason") if k not in entry]
    unknown = sorted(set(entry) - {"id", "finding", "attack", "spec", "refused_by", "reason", "objects",
                                   "operator_args"})  # fmt: skip
    if missing or unknown:
        raise CatalogueError(f"{source}: {entry.get('id', '?')}: missing {missing}, unknown {unknown}")
    if entry["refused_by"] not in REFUSERS:
        raise CatalogueError(f"{source}: {entry['id']}: refused_by must be one of {REFUSERS}")
    if not isinstance(entry["spec"], dict) or not str(entry["reason"]).strip():
        raise CatalogueError(f"{source}: {entry['id']}: spec must be a mapping and reason non-empty")
    return Attack(
        id=str(entry["id"]), finding=str(entry["finding"]), attack=str(entry["attack"]), spec=entry["spec"],
        refused_by=entry["refused_by"], reason=str(entry["reason"]), source=source,
        objects=tuple(entry.get("objects") or ()), operator_args=tuple(entry.get("operator_args") or ()),
    )  # fmt: skip


def load(directory: Path = ATTACKS) -> list[Attack]:
    attacks: list[Attack] = []
    for path in sorted(directory.glob("*.yaml")):
        entries = yaml.safe_load(path.read_text()) or []
        if not isinstance(entries, list):
            raise CatalogueError(f"{path.name}: not a YAML list")
        attacks += [_attack(entry, path.name) for entry in entries]
    seen: set[str] = set()
    for a in attacks:
        if a.id in seen:
            raise CatalogueError(f"{a.source}: duplicate id {a.id}")
        seen.add(a.id)
    return attacks


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """base with patch deep-merged in: mappings merge, anything else (lists included) replaces."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def flag_groups(attacks: list[Attack]) -> list[tuple[tuple[str, ...], list[Attack]]]:
    """The attacks by the operator flags they are tried under: the shipped flags first, then as few groups
    as the flags allow (each group costs the operator a rollout). Flags only widen what the operator
    allows, so attacks whose flags do not give one flag two values can share a group."""
    groups: list[tuple[dict[str, str], list[Attack]]] = []
    for attack in (a for a in attacks if a.operator_args):
        flags = dict(arg.split("=", 1) if "=" in arg else (arg, "") for arg in attack.operator_args)
        group = next((g for g in groups if all(g[0].get(k, v) == v for k, v in flags.items())), None)
        if group is None:
            groups.append((flags, [attack]))
        else:
            group[0].update(flags)
            group[1].append(attack)
    shipped = [a for a in attacks if not a.operator_args]
    return [((), shipped), *((tuple(f"{k}={v}" if v else k for k, v in sorted(f.items())), m) for f, m in groups)]
