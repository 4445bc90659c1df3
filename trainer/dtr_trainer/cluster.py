"""TF_CONFIG -> who this process is in the cluster (pure: no TensorFlow)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dtr_trainer.errors import ConfigError


@dataclass(frozen=True)
class ClusterInfo:
    task_type: str  # "worker" or "chief" ("worker" for a single local process)
    task_index: int
    num_workers: int  # every task that trains: chief + workers
    is_chief: bool
    distributed: bool  # False when TF_CONFIG is absent (one local worker)
    worker_index: int = 0  # among every task that trains: the chief 0, then the workers
    leader: str | None = None  # the chief's "host:port": it runs MWMS's coordination service (None: local)

    @property
    def name(self) -> str:
        return f"{self.task_type}-{self.task_index}"


LOCAL = ClusterInfo(task_type="worker", task_index=0, num_workers=1, is_chief=True, distributed=False)


def _fail(detail: str) -> ConfigError:
    return ConfigError(f"bad TF_CONFIG: {detail}")


def _task_list(cluster: Mapping[str, Any], job: str) -> list:
    tasks = cluster.get(job, [])
    if isinstance(tasks, dict):  # sparse form {"0": "host:port"} is allowed by TF
        tasks = list(tasks.values())
    if not isinstance(tasks, list) or not all(isinstance(t, str) and ":" in t for t in tasks):
        raise _fail(f'cluster.{job} must be a list of "host:port" strings')
    return tasks


def _cluster_and_task(raw: str) -> tuple[dict, dict]:
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _fail(f"not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(config, dict):
        raise _fail("must be a JSON object with 'cluster' and 'task'")
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise _fail("missing 'cluster' object")
    if not isinstance(task, dict):
        raise _fail("missing 'task' object")
    return cluster, task


def parse_tf_config(raw: str | None) -> ClusterInfo:
    """Decide task, chief and replica count from the TF_CONFIG text.

    Chief = the `chief` task when the cluster has a `chief` job, else worker 0
    (the training-operator's TFJob with only Worker replicas has no chief job).
    """
    if raw is None or not raw.strip():
        return LOCAL
    cluster, task = _cluster_and_task(raw)
    workers, chiefs = _jobs(cluster)
    task_type = _task_type(task)
    task_index = _task_index(task, task_type, len(workers) if task_type == "worker" else len(chiefs))
    is_chief = task_type == "chief" or (not chiefs and task_index == 0)
    return ClusterInfo(
        task_type=task_type,
        task_index=task_index,
        num_workers=len(workers) + len(chiefs),
        is_chief=is_chief,
        distributed=True,
        worker_index=task_index + (len(chiefs) if task_type == "worker" else 0),
        leader=(chiefs or workers)[0],
    )


def _jobs(cluster: Mapping[str, Any]) -> tuple[list, list]:
    """(worker addresses, chief addresses); only the jobs MultiWorkerMirroredStrategy knows, one chief at most."""
    unknown = sorted(set(cluster) - {"worker", "chief", "evaluator"})
    if unknown:
        raise _fail(f"unsupported jobs {unknown} (MultiWorkerMirroredStrategy uses chief/worker only)")
    workers, chiefs = _task_list(cluster, "worker"), _task_list(cluster, "chief")
    if len(chiefs) > 1:
        raise _fail("at most one chief task")
    return workers, chiefs


def _task_type(task: Mapping[str, Any]) -> str:
    task_type = task.get("type")
    if task_type not in ("worker", "chief"):
        raise _fail(f"task.type must be 'worker' or 'chief', got {task_type!r}")
    return task_type


def _task_index(task: Mapping[str, Any], task_type: str, size: int) -> int:
    """task.index (an integer, or digits as a string) within the `size` tasks of its job."""
    task_index = task.get("index")
    if isinstance(task_index, str) and task_index.isdigit():
        task_index = int(task_index)
    if not isinstance(task_index, int) or isinstance(task_index, bool):
        raise _fail(f"task.index must be an integer, got {task_index!r}")
    if not 0 <= task_index < size:
        raise _fail(f"task {task_type}/{task_index} is not in cluster.{task_type} ({size} tasks)")
    return task_index
