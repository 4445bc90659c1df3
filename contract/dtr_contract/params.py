"""A run's hyperparameters of its own (spec.training.params; docs/experiments.md): a small map of names to numbers,
strings and booleans that the operator passes to the trainer as one JSON object (flags.PARAMS) and the user's code
reads as ctx.params. Its bounds and grammar have this one home: the CRD (fields_params.py), the operator's parser,
`dtr submit/run --param` and the trainer all check with them.

    {"dropout": 0.2, "optimizer": "sgd", "residual": true, "width": 64}
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Union

# Small on purpose: a run's whole spec stays within the bound its memory was measured at (tests/unit/operator/
# test_crd_bounds.py, docs/performance.md#operator-memory); these take at most 12 x 70 characters of it.
MAX_PARAMS = 12  # entries
MAX_NAME_LENGTH = 32
MAX_VALUE_LENGTH = 32  # characters of a string value
NAME = rf"[A-Za-z_][A-Za-z0-9_]{{0,{MAX_NAME_LENGTH - 1}}}"  # a Python identifier's characters: ctx.params["width"]
NAME_WORDS = f"names are letters, digits and '_' (at most {MAX_NAME_LENGTH}), not starting with a digit"
VALUE_WORDS = "a number, a string or true/false"

Value = Union[bool, int, float, str]


def value_problem(value: Any) -> str | None:
    """Why a value is not a param's (a short phrase), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return None if math.isfinite(value) else "must be a finite number"
    if isinstance(value, str):
        return None if len(value) <= MAX_VALUE_LENGTH else f"must be at most {MAX_VALUE_LENGTH} characters"
    return f"must be {VALUE_WORDS}, got {type(value).__name__}"


def problems(params: Any) -> list[tuple[str, str]]:
    """Every problem of a params map, each (the name it is about, or "" for the map itself, why); none: fine."""
    if not isinstance(params, Mapping):
        return [("", f"must be a map of names to values, got {type(params).__name__}")]
    found = [("", f"must have at most {MAX_PARAMS} entries")] if len(params) > MAX_PARAMS else []
    for name, value in params.items():
        if not isinstance(name, str) or re.fullmatch(NAME, name) is None:
            found.append(("", f"{name!r} is not a name: {NAME_WORDS}"))
        elif (why := value_problem(value)) is not None:
            found.append((name, why))
    return found


def to_flag(params: Mapping[str, Value]) -> str:
    """The trainer's flags.PARAMS value: compact JSON, names sorted (the same params, the same command line)."""
    return json.dumps(dict(sorted(params.items())), separators=(",", ":"), allow_nan=False)


def from_flag(text: str) -> dict[str, Value]:
    """flags.PARAMS's value back; ValueError saying what is wrong."""
    try:
        params = json.loads(text)
    except ValueError:
        raise ValueError("not a JSON object") from None
    if wrong := problems(params):
        raise ValueError("; ".join(f"{name}: {why}" if name else why for name, why in wrong))
    return dict(params)


_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")


def parse_value(text: str) -> Value:
    """A value as written on a command line (`--param width=64`): an integer, a decimal number, true or false,
    else the text itself (quote it, '"64"', to keep a number a string)."""
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    if text in ("true", "false"):
        return text == "true"
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def parse_assignment(text: str) -> tuple[str, Value]:
    """`name=value` -> (name, value); ValueError naming what is wrong."""
    name, equals, raw = text.partition("=")
    if not equals:
        raise ValueError(f"{text!r}: give name=value")
    if re.fullmatch(NAME, name) is None:
        raise ValueError(f"{name!r} is not a name: {NAME_WORDS}")
    value = parse_value(raw)
    if (why := value_problem(value)) is not None:
        raise ValueError(f"{name}: {why}")
    return name, value


def shown(params: Mapping[str, Value]) -> str:
    """One line for people: `dropout=0.2 optimizer=sgd width=64` (names sorted)."""
    return " ".join(f"{name}={json.dumps(value) if isinstance(value, bool) else value}"
                    for name, value in sorted(params.items()))
