"""The run's volume: checked writable before training starts, and "full" told apart from other errors.

A volume that uid 1000 cannot write (a pre-provisioned one whose driver ignores fsGroup) would
otherwise fail the first backup after a whole epoch, as a TensorFlow error; a full one fails a
checkpoint or the export. Both become one line that says what is wrong with the volume.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable

from dtr_trainer.errors import VolumeError

FULL = "No space left on device"


def is_full(exc: BaseException) -> bool:
    """ENOSPC, raised by Python or inside a TensorFlow error's text (checkpoints, SavedModel writes)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return FULL in str(exc) or "Disk quota exceeded" in str(exc)


def full_message(where: str) -> str:
    return (f"the run's volume is full ({FULL}) while {where}: free space on it, or give the run a larger "
            "spec.storage.size (nothing partial is left where a model server looks)")


def check_writable(directories: Iterable[str]) -> None:
    """Create each directory and a file in it, as this process; VolumeError when the volume refuses."""
    for directory in directories:
        try:
            os.makedirs(directory, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".dtr-write-check-"):
                pass
        except OSError as exc:
            if is_full(exc):
                raise VolumeError(full_message(f"checking {directory}")) from None
            raise VolumeError(
                f"the run's volume is not writable by uid {os.getuid()} (gid {os.getgid()}): {exc.strerror} "
                f"for {directory}; the volume must be writable by that uid or group (fsGroup {os.getgid()}: "
                f"local-path and most provisioners allow it; a pre-provisioned volume needs its owner or "
                f"mode changed)"
            ) from None
