"""Errors the trainer reports, each with the exit code the TFJob restart policy acts on.

1..127 are permanent (a restart cannot fix them); >= 128 are retryable (dtr_contract.exits, which
the operator reads too). The table is documented in docs/trainer.md; keep the two in sync.
"""

from __future__ import annotations

from dtr_contract import exits
from dtr_contract.exits import CODE_CHANGED, DIVERGED, MODEL_NAME_OWNED, PEER_LOST, USER_CODE

EXIT_INTERNAL = 1  # a bug: unexpected exception
EXIT_USAGE = 2  # bad command line (argparse's own code)
EXIT_TF_CONFIG = 3  # TF_CONFIG is not a valid cluster description
EXIT_DATA = 4  # dataset missing, malformed, or a path escaping --data-dir
EXIT_DOWNLOAD = 5  # dataset not cached and cannot be downloaded (offline; a URL refused for good)
EXIT_EXPORT = 6  # the model could not be written to --export-dir
EXIT_VOLUME = 7  # the run's volume is full or not writable by this process's uid
EXIT_USER_CODE = USER_CODE  # the run's own code (docs/own-model.md) fails: the message names its file and line
EXIT_DIVERGED = DIVERGED  # the loss became NaN or infinite (dtr_trainer.divergence): the message names the epoch
EXIT_CODE_CHANGED = CODE_CHANGED  # the --code file is not the one recorded (--code-sha256): none of it ran
EXIT_MODEL_NAME_OWNED = MODEL_NAME_OWNED  # another run owns the --export-dir's model name (dtr_trainer.ownership)
# --dataset-url could not be fetched for now (unreachable, timed out, HTTP 5xx/408/429) after a few tries
# of its own: the digest pins the content, so a later try gets the right file or a mismatch (exit 4).
# 128 + 12 is SIGUSR2's code, a signal nothing here sends, so it is not mistaken for a crash (139 is SIGSEGV).
EXIT_DOWNLOAD_RETRY = 140
EXIT_PEER_LOST = PEER_LOST  # a peer died or a collective timed out: restart every worker
EXIT_TERMINATED = 143  # SIGTERM (the pod is deleted: suspend, preemption, drain): 128 + 15, as a shell reports it


class TrainerError(Exception):
    """An error with a one-line message for the user and an exit code."""

    exit_code = EXIT_INTERNAL


class UsageError(TrainerError):
    exit_code = EXIT_USAGE


class ConfigError(TrainerError):
    exit_code = EXIT_TF_CONFIG


class DataError(TrainerError):
    exit_code = EXIT_DATA


class DownloadError(TrainerError):
    exit_code = EXIT_DOWNLOAD


class DownloadRetryError(TrainerError):
    exit_code = EXIT_DOWNLOAD_RETRY


class ExportError(TrainerError):
    exit_code = EXIT_EXPORT


class VolumeError(TrainerError):
    exit_code = EXIT_VOLUME


class UserCodeError(TrainerError):
    """The message begins with where in the user's code: `my_model.py:12 in load_data: ...`."""

    exit_code = EXIT_USER_CODE


class CodeChangedError(TrainerError):
    """The --code file's bytes are not those whose SHA-256 the run recorded (--code-sha256)."""

    exit_code = EXIT_CODE_CHANGED


class ModelNameOwnedError(TrainerError):
    """Another run owns the model name this run would publish a version of, and does not let it (ownership.py)."""

    exit_code = EXIT_MODEL_NAME_OWNED


class DivergedError(TrainerError):
    """Training stopped itself: the loss is no longer a finite number (dtr_trainer.divergence)."""

    exit_code = EXIT_DIVERGED


class ObjectStoreKeysError(TrainerError):
    """An s3:// dataset's store refused the run's keys (dtr_trainer.preflight)."""

    exit_code = exits.OBJECT_STORE_KEYS


class BucketMissingError(TrainerError):
    exit_code = exits.OBJECT_STORE_NO_BUCKET


class NoDataError(TrainerError):
    """Nothing at an s3:// dataset's key or under its prefix."""

    exit_code = exits.OBJECT_STORE_NO_DATA


class ObjectStoreRefusedError(TrainerError):
    """The store or the connection refused the request for another reason: a certificate, a region, ..."""

    exit_code = exits.OBJECT_STORE_REFUSED


class ObjectStoreUnreachableError(TrainerError):
    """The store did not answer (or answered 5xx) after the client's bounded tries: retryable."""

    exit_code = exits.OBJECT_STORE_UNREACHABLE


_NOISE = ("graph execution error", "detected at node", "file ", "node:", "[[", "function call stack", "for more")


def one_line(message: str, fallback: str) -> str:
    """The line of a TensorFlow error that says what went wrong (not the node trace around it)."""
    for raw in message.splitlines():
        line = raw.strip()
        if line and not raw.startswith((" ", "\t")) and not line.lower().startswith(_NOISE):
            return line[:300]
    return fallback
