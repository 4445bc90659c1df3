"""A run's state (phase, reason, message) and what the TFJob says of it; text as a status may hold it. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..api import (
    KUEUE_QUEUE_LABEL,
    SUSPENDED_BY,
    SUSPENDED_BY_ANNOTATION,
)
from ..reasons import (
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    TERMINAL,
    TFJOB_CREATED,
    TFJOB_FAILED,
    TFJOB_RESTARTING,
    TFJOB_RUNNING,
    TFJOB_SUBMITTED,
    TFJOB_SUSPENDED,
    TRAINING_SUCCEEDED,
)

MAX_MESSAGE = 400
MAX_STATE_MESSAGE = 1024  # a whole status message, or event (kopf cuts events at 1024 too)
MAX_REASON = 128


def clean_text(text: str, limit: int = MAX_MESSAGE) -> str:
    """One line fit for a run's status or an event: control characters (C0, C1, ESC sequences' lead, DEL)
    and bidirectional overrides become spaces, whitespace runs one space, and at most `limit` characters.
    Everything the operator writes there goes through it: some of it quotes what a tenant wrote (an image
    name, a termination message, a log line)."""
    text = " ".join(harmless(str(text)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def harmless(text: str) -> str:
    """The text with every character a terminal or a reader could be fooled by (C0 and C1 controls, so ESC and
    CSI that start escape sequences, DEL, bidirectional overrides) made a space; the rest, spacing included,
    as it was. For `dtr logs`, which prints what a run's code wrote (a log line could retitle the terminal,
    rewrite lines above it, or fake a prompt)."""
    return _UNPRINTABLE.sub(" ", text)


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class State:
    """Where a run is: the phase, why, and one line for a person (cleaned and capped: clean_text)."""

    phase: str
    reason: str
    message: str
    created: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", clean_text(self.reason, MAX_REASON))
        object.__setattr__(self, "message", clean_text(self.message, MAX_STATE_MESSAGE))


def _true_conditions(tfjob: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conditions = (tfjob.get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conditions if c.get("status") == "True"}


def _created_message(tfjob_name: str) -> str:
    return f"TFJob {tfjob_name} created, waiting for its worker pods to run"


def tfjob_state(tfjob: Mapping[str, Any]) -> State:
    """The run's state from its TFJob's conditions alone (terminal conditions win)."""
    true = _true_conditions(tfjob)
    name = (tfjob.get("metadata") or {}).get("name", "")

    def msg(cond_type: str, fallback: str) -> str:
        return clean_text(true[cond_type].get("message") or fallback)

    if "Failed" in true:
        reason = true["Failed"].get("reason") or TFJOB_FAILED
        return State(FAILED, reason, msg("Failed", f"TFJob {name} failed"), created=True)
    if "Succeeded" in true:
        return State(SUCCEEDED, TRAINING_SUCCEEDED, msg("Succeeded", f"TFJob {name} succeeded"), created=True)
    if "Suspended" in true:
        return State(PENDING, TFJOB_SUSPENDED, msg("Suspended", f"TFJob {name} is suspended"), created=True)
    if "Restarting" in true:
        return State(RUNNING, TFJOB_RESTARTING, msg("Restarting", "restarting a failed worker"), created=True)
    if "Running" in true:
        return State(RUNNING, TFJOB_RUNNING, msg("Running", f"TFJob {name} is running"), created=True)
    if "Created" in true:
        return State(PENDING, TFJOB_CREATED, _created_message(name), created=True)
    return State(PENDING, TFJOB_SUBMITTED, f"TFJob {name} submitted, waiting for the training-operator", created=True)


def worker_counts(tfjob: Mapping[str, Any]) -> dict[str, int]:
    replica = ((tfjob.get("status") or {}).get("replicaStatuses") or {}).get("Worker") or {}
    return {key: int(replica.get(key) or 0) for key in ("active", "succeeded", "failed")}


def is_terminal(status: Mapping[str, Any] | None) -> bool:
    return bool(status) and status.get("phase") in TERMINAL


def kueue_queue(tfjob: Mapping[str, Any]) -> str | None:
    """The Kueue LocalQueue the TFJob itself names (a label, or the annotation older Kueue read; Kueue's webhook
    may add one to a run without spec.queueName), else None. Such a TFJob's suspend is Kueue's."""
    meta = tfjob.get("metadata") or {}
    return (meta.get("labels") or {}).get(KUEUE_QUEUE_LABEL) or (meta.get("annotations") or {}).get(KUEUE_QUEUE_LABEL)


def suspended_by_other(tfjob: Mapping[str, Any]) -> bool:
    """Whether the TFJob is suspended (runPolicy.suspend) without the operator's record that it suspended it
    (SUSPENDED_BY_ANNOTATION): a queue manager's or a person's suspension, which the operator never undoes."""
    annotations = (tfjob.get("metadata") or {}).get("annotations") or {}
    suspended = bool(((tfjob.get("spec") or {}).get("runPolicy") or {}).get("suspend"))
    return suspended and annotations.get(SUSPENDED_BY_ANNOTATION) != SUSPENDED_BY
