"""The classes of the trainer's exit codes that the operator acts on (the full table: docs/trainer.md).

They fit the TFJob `ExitCode` restart policy: 1..127 are permanent (a restart cannot fix them), >= 128
are retryable (the training-operator recreates the pod).
"""

from __future__ import annotations

RETRYABLE_FROM = 128
# A peer died or a collective timed out: restarting every worker fixes it. In a failed run it is the
# consequence of another worker's failure, never its cause.
PEER_LOST = 138
# The run's own code (--code, --code-module) failed: it does not import, lacks build_model or load_data,
# returns the wrong thing, its model does not fit its data, or it raised. Permanent: the code must change.
USER_CODE = 8
# The training loss became NaN or infinite: the trainer stops at the first such value, every worker at the same
# step. Permanent: a restart resumes from the last backup and diverges again; the learning rate or the data must
# change.
DIVERGED = 9
# The run's code file (--code) is not the one the operator recorded (--code-sha256): its ConfigMap was replaced after
# the run started. Permanent: the file stays what it is now, and running it would train code nobody recorded.
CODE_CHANGED = 10
# The run may not publish versions of its model name: another run owns the name (the first to claim a version of it
# where it is exported) and does not list this one in its spec.export.allowedPublishers (dtr_trainer.ownership).
# Every worker checks before training, the chief again before its version appears. Permanent: the owner's list or
# the run's model name must change.
MODEL_NAME_OWNED = 11

# An s3:// dataset checked before training (dtr_trainer.preflight; docs/object-storage.md#when-it-fails), with a real
# request: TensorFlow's s3:// lists nothing, silently, for wrong keys or an endpoint that does not answer.
# Permanent: the Secret, the bucket, the data or the store's configuration must change.
OBJECT_STORE_KEYS = 20  # the store refused the keys (InvalidAccessKeyId, SignatureDoesNotMatch, AccessDenied)
OBJECT_STORE_NO_BUCKET = 21  # the bucket does not exist (NoSuchBucket)
OBJECT_STORE_NO_DATA = 22  # nothing at the URI: no object of that key, none under that prefix
OBJECT_STORE_REFUSED = 23  # anything else the store or the connection refused: its certificate, the region, ...
# The endpoint did not answer, or answered 5xx, after the client's bounded tries with back-off. Retryable: a store
# that is down or restarting comes back. 128 + 16 is SIGSTKFLT's code, a signal nothing sends (cf. 140's note).
OBJECT_STORE_UNREACHABLE = 144
OBJECT_STORE_CODES = (OBJECT_STORE_KEYS, OBJECT_STORE_NO_BUCKET, OBJECT_STORE_NO_DATA, OBJECT_STORE_REFUSED,
                      OBJECT_STORE_UNREACHABLE)  # fmt: skip


def is_retryable(code: int) -> bool:
    return code >= RETRYABLE_FROM


def is_peer_lost(code: int) -> bool:
    return code == PEER_LOST


def is_user_code(code: int) -> bool:
    return code == USER_CODE


def is_diverged(code: int) -> bool:
    return code == DIVERGED


def is_code_changed(code: int) -> bool:
    return code == CODE_CHANGED


def is_model_name_owned(code: int) -> bool:
    return code == MODEL_NAME_OWNED


def is_object_store_permanent(code: int) -> bool:
    """A preflight failure that a restart would repeat: the keys, the bucket, the data, the configuration."""
    return code in OBJECT_STORE_CODES and not is_retryable(code)
