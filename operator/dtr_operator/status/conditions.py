"""status.conditions, as the Kubernetes conventions have them: one per type, lastTransitionTime moving only when
its status changes. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..reasons import (
    CHILDREN_CREATED,
    CONDITION_TYPES,
)
from .state import State


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    cond_type: str,
    status: bool,
    reason: str,
    message: str,
    now: str,
    generation: int | None,
) -> list[dict[str, Any]]:
    """conditions with cond_type set; lastTransitionTime only moves when the status changes."""
    value = "True" if status else "False"
    previous = next((c for c in conditions if c.get("type") == cond_type), None)
    since = previous["lastTransitionTime"] if previous and previous.get("status") == value else now
    new: dict[str, Any] = {
        "type": cond_type,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        new["observedGeneration"] = generation
    others = [dict(c) for c in conditions if c.get("type") != cond_type]
    return sorted([*others, new], key=_condition_order)


def _condition_order(c: Mapping[str, Any]) -> int:
    t = c.get("type", "")
    return CONDITION_TYPES.index(t) if t in CONDITION_TYPES else len(CONDITION_TYPES)


def conditions_for(
    state: State, previous: Sequence[Mapping[str, Any]], now: str, generation: int | None, children: str
) -> list[dict[str, Any]]:
    conds = list(previous)
    created_msg = children if state.created else state.message
    created_reason = CHILDREN_CREATED if state.created else state.reason
    conds = set_condition(conds, "Created", state.created, created_reason, created_msg, now, generation)
    for cond_type in CONDITION_TYPES[1:]:  # named like the phase in which each holds
        holds = state.phase == cond_type
        # The message belongs to the condition that holds; the others only say why not (the reason).
        conds = set_condition(conds, cond_type, holds, state.reason, state.message if holds else "", now, generation)
    return conds
