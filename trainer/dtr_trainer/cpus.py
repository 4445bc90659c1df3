"""TensorFlow's compute threads sized to the CPUs the container may use.

TensorFlow sizes its intra-op thread pool by the CPUs it may be scheduled on, not by the container's CPU limit:
a worker pod limited to 1 CPU on a 2-core node runs its kernels on 2 threads, and the CFS quota then stops both
for the rest of each 100 ms period. Alone that costs little; between MultiWorkerMirroredStrategy workers, a
worker stopped by its quota holds up its peers' all-reduce. bench/scaling measured it in pods (docs/trainer.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import MutableMapping
from pathlib import Path

INTRA_OP = "TF_NUM_INTRAOP_THREADS"  # read by TensorFlow when it makes its CPU device's thread pool
CGROUP = Path("/sys/fs/cgroup")


def cpu_limit(root: Path = CGROUP) -> float | None:
    """The CPUs the cgroup's CFS quota allows (cgroup v2 `cpu.max`, else v1 `cpu.cfs_quota_us`), None unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    for controller in ("cpu", "cpu,cpuacct"):
        try:
            quota = int((root / controller / "cpu.cfs_quota_us").read_text())
            period = int((root / controller / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return None if quota <= 0 or period <= 0 else quota / period
    return None


def threads_for(limit: float | None, schedulable: int) -> int | None:
    """Compute threads for a CPU limit (rounded up: a limit of 1.5 may use two CPUs part of the time); None when
    the limit does not bind (no limit, or at least as many CPUs as the process may run on)."""
    if limit is None:
        return None
    threads = max(1, math.ceil(limit - 1e-9))
    return threads if threads < schedulable else None


def size_thread_pools(environ: MutableMapping[str, str], root: Path = CGROUP) -> int | None:
    """Set TensorFlow's intra-op threads from the CPU limit, before TensorFlow starts; returns the number set.
    A TF_NUM_INTRAOP_THREADS already in the environment is the user's choice and stays."""
    if environ.get(INTRA_OP):
        return None
    threads = threads_for(cpu_limit(root), len(os.sched_getaffinity(0)))
    if threads is not None:
        environ[INTRA_OP] = str(threads)
    return threads
