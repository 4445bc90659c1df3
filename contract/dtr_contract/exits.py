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
