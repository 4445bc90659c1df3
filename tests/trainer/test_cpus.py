"""TensorFlow's compute threads from the container's CPU limit (dtr_trainer/cpus.py): the cgroup files as a
kernel writes them, the rounding, the user's own setting kept, and TensorFlow really starting fewer threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dtr_trainer import cpus


def cgroup_v1(root: Path, quota: int, period: int = 100000, controller: str = "cpu") -> Path:
    (root / controller).mkdir(parents=True)
    (root / controller / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (root / controller / "cpu.cfs_period_us").write_text(f"{period}\n")
    return root


def cgroup_v2(root: Path, line: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpu.max").write_text(line + "\n")
    return root


@pytest.mark.parametrize("make, limit", [
    (lambda r: cgroup_v1(r, 100000), 1.0),
    (lambda r: cgroup_v1(r, 150000), 1.5),
    (lambda r: cgroup_v1(r, 50000, 100000, "cpu,cpuacct"), 0.5),
    (lambda r: cgroup_v1(r, -1), None),
    (lambda r: cgroup_v2(r, "max 100000"), None),
    (lambda r: cgroup_v2(r, "250000 100000"), 2.5),
    (lambda r: r, None),
])  # fmt: skip
def test_cpu_limit_reads_v1_and_v2(tmp_path: Path, make, limit: float | None) -> None:
    assert cpus.cpu_limit(make(tmp_path / "cg")) == limit


@pytest.mark.parametrize("limit, schedulable, threads", [
    (1.0, 2, 1), (0.5, 2, 1), (1.5, 4, 2), (2.0, 2, None), (3.0, 2, None), (None, 2, None),
])  # fmt: skip
def test_threads_round_the_limit_up_and_only_when_it_binds(limit, schedulable, threads) -> None:
    assert cpus.threads_for(limit, schedulable) == threads


def test_the_users_own_setting_stays(tmp_path: Path) -> None:
    root = cgroup_v1(tmp_path / "cg", 1)
    env = {cpus.INTRA_OP: "3"}
    assert cpus.size_thread_pools(env, root) is None and env[cpus.INTRA_OP] == "3"
    env = {}
    assert cpus.size_thread_pools(env, cgroup_v1(tmp_path / "cg2", -1)) is None and env == {}


PROBE = r"""
import json, os, sys
from pathlib import Path
from dtr_trainer import cpus
set_to = cpus.size_thread_pools(os.environ, Path(sys.argv[1])) if sys.argv[1] else None
import tensorflow as tf
import time
tf.linalg.matmul(tf.ones((300, 300)), tf.ones((300, 300)))
# The fewest over half a second: a short-lived helper thread (seen once on a busy machine) must not count as a pool's.
threads = []
for _ in range(10):
    threads.append(len(os.listdir("/proc/self/task")))
    time.sleep(0.05)
print(json.dumps({"set": set_to, "threads": min(threads)}))
"""


def threads_started(cgroup: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != cpus.INTRA_OP} | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", PROBE, cgroup], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one schedulable CPU: a limit of 1 does not bind")
def test_tensorflow_starts_fewer_compute_threads_under_a_limit_of_one_cpu(tmp_path: Path) -> None:
    limited = threads_started(str(cgroup_v1(tmp_path / "cg", 100000)))
    free = threads_started("")
    assert limited["set"] == 1
    assert limited["threads"] < free["threads"], (limited, free)
