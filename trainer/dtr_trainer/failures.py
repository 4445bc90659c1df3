"""What an exception no part of the trainer expected says, and the exit code it ends with (dtr_contract.exits: a
code >= 128 is retryable): a full volume, the object store away, a lost peer, else a bug. No I/O."""

from __future__ import annotations

import os

from dtr_contract import env, exits

from dtr_trainer import preflight, volume
from dtr_trainer.errors import EXIT_INTERNAL, EXIT_PEER_LOST, EXIT_VOLUME, one_line

PEER_WORDS = ("connection reset", "socket closed", "failed to connect", "connection refused", "heartbeat",
              "coordination service", "unavailable")


def is_peer_failure(type_name: str, message: str) -> bool:
    """A lost peer or a collective timeout, which restarting every worker fixes.

    TF raises these as UnavailableError/DeadlineExceededError/AbortedError/CancelledError, and
    sometimes as InternalError/UnknownError carrying the gRPC status in the text. Anything else
    (InvalidArgumentError, ...) is a real error: retrying would fail the same way.
    """
    if type_name in ("UnavailableError", "DeadlineExceededError", "AbortedError", "CancelledError"):
        return True
    text = message.lower()
    return type_name in ("InternalError", "UnknownError") and any(word in text for word in PEER_WORDS)


def classified(exc: Exception) -> tuple[str, int]:
    """The error line and exit code of an exception no part of the trainer expected: a full volume, a store away,
    a lost peer (each retryable or not as exits.py says), else a bug."""
    name = type(exc).__name__
    what = one_line(getattr(exc, "message", None) or str(exc), name)
    if volume.is_full(exc):
        return volume.full_message(f"training ({name}: {what})"), EXIT_VOLUME
    if preflight.tf_unreachable(str(exc)):
        return (f"the object store {os.environ.get(env.S3_ENDPOINT)} does not answer ({name}: {what}); the run tries "
                "again", exits.OBJECT_STORE_UNREACHABLE)  # fmt: skip
    if is_peer_failure(name, str(exc)):
        return (f"lost a peer or a collective timed out ({name}: {what}); restart all workers to resume from the "
                "backup", EXIT_PEER_LOST)  # fmt: skip
    return f"{name}: {what}", EXIT_INTERNAL
