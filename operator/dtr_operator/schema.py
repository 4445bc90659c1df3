"""The field table's vocabulary (fields.py declares the API with it): a Field, its Pattern and Rules, where its value
goes (To), and what is read off a field: its bounds and description in words, its rules, its messages. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# A qualified name's bounds (Kubernetes' own): a DNS-subdomain prefix of at most 253, '/', a name of at most 63.
MAX_KEY_PREFIX = 253
MAX_KEY_LENGTH = MAX_KEY_PREFIX + 1 + 63


@dataclass(frozen=True)
class Pattern:
    """A string's grammar (a full match) and what is wrong with a string that does not match it."""

    regex: str
    why: str  # "must be ...": the parser's message after the field's path; with cel, the API server's too
    cel: bool = False  # True: a CEL rule with `why` as its message; False: the schema's `pattern` (its own words)

    def matches(self, value: str) -> bool:
        return re.fullmatch(self.regex, value) is not None


@dataclass(frozen=True)
class Rule:
    """A CEL rule the API server checks, and its twin in Python for the parser (`dtr render`, `dtr run`)."""

    cel: str
    why: str  # the message after the subject's path
    holds: Callable[[Any], bool]  # the rule in Python, on the value as the API server stored it
    subject: str = ""  # the field the message is about, relative to the one holding the rule ("" = itself)
    field_path: bool = False  # also tell the API server the subject (the CRD's fieldPath)
    named: bool = True  # the message starts with the subject's path (not for list items: the server adds it)


@dataclass(frozen=True)
class To:
    """Where a field's value goes: a trainer flag, or a path in the TFJob, its worker pod or container, the PVC."""

    kind: str  # "trainer" | "tfjob" | "pod" (a worker's pod template) | "container" (its tensorflow one) | "pvc"
    path: str  # the flag, or a path inside that object: names and list indexes by ".", [a key with dots]


@dataclass(frozen=True)
class Field:
    """One field of the API: its schema, where the operator keeps and sends its value, and its words."""

    name: str  # as the API spells it
    type: str  # integer | number | string | boolean | object | array | map (of strings) | quantity | params (a map of
    # names to scalars: number, string or boolean; fields_params.py)
    description: str = ""  # kubectl explain's; "{bounds}" and "{default}" are filled in
    attr: str = ""  # where the parsed value lives on RunSpec (dotted); "" = nowhere of its own
    default: Any = None
    schema_default: bool = True  # False: only the operator applies the default (not the API server)
    format: str | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    exclusive_minimum: bool = False
    min_length: int | None = None
    max_length: int | None = None
    enum: tuple[str, ...] = ()
    pattern: Pattern | None = None
    rules: tuple[Rule, ...] = ()
    not_with: tuple[str, str] | None = None  # (a sibling, why): both set is refused, as "<name> <why>"
    mutable: bool = False  # may change after creation (every other spec field is immutable)
    to: To | None = None
    fields: tuple[Field, ...] = ()  # an object's properties
    items: Field | None = None  # an array's items, a map's values
    max_items: int | None = None  # an array's items or a map's entries
    max_key_length: int | None = None  # a map's keys (a CEL rule: a schema cannot bound them)
    extra: Mapping[str, Any] = field(default_factory=dict)  # schema keys the parser has no use for
    doc_default: str = ""  # docs/api.md's default when the value alone would not say it
    doc: str = ""  # docs/api.md only: what kubectl explain has no room for (links)

    def child(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)

    @property
    def names(self) -> set[str]:
        return {f.name for f in self.fields}


def bounds_text(f: Field) -> str:
    """The field's range in words: 1..64, at least 60, greater than 0, at most 10."""
    lo, hi = f.minimum, f.maximum
    if lo is not None and hi is not None and not f.exclusive_minimum:
        return f"{lo}..{hi}"
    low = f"greater than {lo}" if f.exclusive_minimum else f"at least {lo}"
    parts = ([low] if lo is not None else []) + ([f"at most {hi}"] if hi is not None else [])
    return ", ".join(parts)


def description(f: Field) -> str:
    return f.description.replace("{bounds}", bounds_text(f)).replace("{default}", str(f.default))


def cel_regex(regex: str) -> str:
    """A regex inside a single-quoted CEL string: backslashes doubled."""
    return regex.replace("\\", "\\\\")


def key_length(limit: int) -> Rule:
    """A map's keys: at most `limit` characters, a prefix (before the first '/') of at most MAX_KEY_PREFIX."""
    return Rule(
        f"self.all(k, size(k) <= {limit} && k.indexOf('/') <= {MAX_KEY_PREFIX})",
        f"keys must be at most {limit} characters, with a prefix before '/' of at most {MAX_KEY_PREFIX}",
        lambda m: all(len(k) <= limit and k.find("/") <= MAX_KEY_PREFIX for k in m),
    )


def message(rule: Rule, path: str, cel: bool = False) -> str:
    """The rule's message about the field at path: the API server's (cel) or the parser's ("<path>: <why>")."""
    subject = ".".join(p for p in (path, rule.subject) if p)
    if cel:
        return f"{subject} {rule.why}" if rule.named else rule.why
    return f"{subject}: {rule.why}"


def not_both(one: str, other: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda obj: one not in obj or other not in obj


def rules(f: Field, path: str) -> list[Rule]:
    """Every rule on the field at path, in the CRD's order: its pattern's (a CEL one), its fields' not_with, its own."""
    found = [] if f.max_key_length is None else [key_length(f.max_key_length)]
    if f.pattern is not None and f.pattern.cel:
        found.append(Rule(f"self.matches('^{cel_regex(f.pattern.regex)}$')", f.pattern.why, f.pattern.matches))
    for sub in f.fields:
        if sub.not_with is not None:
            other, why = sub.not_with
            found.append(Rule(f"!has(self.{other}) || !has(self.{sub.name})",
                              f"cannot be set with {path}.{other}: {sub.name} {why}",
                              not_both(other, sub.name), subject=sub.name, field_path=True))  # fmt: skip
    return [*found, *f.rules]


def walk(f: Field, path: str = "spec") -> Iterator[tuple[str, Field]]:
    """(path, field) for f and every field under it, in the table's order (array items as path[])."""
    yield path, f
    for sub in f.fields:
        yield from walk(sub, f"{path}.{sub.name}")
    if f.type == "array" and f.items is not None:
        yield from walk(f.items, f"{path}[]")
