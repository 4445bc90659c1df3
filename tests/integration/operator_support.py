"""The small API helpers the integration tests share, through kubectl, and the reads the tests poll in-process
(tests/support/cluster.py: Cluster.read).

The operator runs in this process (`operator` fixture, conftest.py; support.operator.Operator). No kubelet
runs here: set_pod_state writes a pod's status as a kubelet would.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.api import now
from support.cluster import READ_KINDS, Cluster
from support.operator import IMAGE
from support.runs import run_doc
from support.wait import poll, wait_for
from support.wait import wait_status as _wait_status

# ---- helpers ----------------------------------------------------------------------------------


def create_run(cluster: Cluster, namespace: str, name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    cluster.create(run_doc(name, namespace, spec or {}))
    return cluster.kubectl_json("get", "dtr", name, "-n", namespace)


def get(cluster: Cluster, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    if kind in READ_KINDS:  # the polled kinds, in-process
        return cluster.read(kind, namespace, name, strict=False)
    proc = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json", "--ignore-not-found", check=False)
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    run = get(cluster, namespace, "dtr", name)
    return (run or {}).get("status") or {}


def wait_status(cluster: Cluster, namespace: str, name: str, what: str, timeout: float = 60, **expected: Any):
    return _wait_status(lambda: status(cluster, namespace, name), f"run {name}: {what}", timeout, **expected)


def items(cluster: Cluster, namespace: str, kind: str, selector: str) -> list[dict[str, Any]]:
    return cluster.kubectl_json("get", kind, "-n", namespace, "-l", selector)["items"]


def events(cluster: Cluster, namespace: str, name: str) -> list[tuple[str, str, str]]:
    # Through kubectl, not Cluster.read: the operator posts a run's event after its status patch, and read in-process
    # 1 ms after the status it was not there yet (9a09453's CI run); events_once waits for the one a test expects.
    got = cluster.kubectl_json(
        "get", "events", "-n", namespace,
        "--field-selector", f"involvedObject.kind=DistTrainingRun,involvedObject.name={name}",
    )["items"]  # fmt: skip
    got.sort(key=lambda e: (e.get("firstTimestamp") or e.get("eventTime") or "", e["metadata"]["name"]))
    return [(e["type"], e["reason"], e.get("message", "")) for e in got]


def events_once(cluster: Cluster, namespace: str, name: str, kind: str, reason: str, message: str | None = None,
                timeout: float = 15) -> list[tuple[str, str, str]]:  # fmt: skip
    """The run's events once one of `kind` and `reason` (and `message`) is there: the operator posts an event after
    the status patch that says the same, so one looked for right after a status is waited for (9a09453's CI run)."""

    def shown() -> list[tuple[str, str, str]] | None:
        got = events(cluster, namespace, name)
        return got if any(e[:2] == (kind, reason) and message in (None, e[2]) for e in got) else None

    return wait_for(shown, f"run {name}: its {kind} event {reason}", timeout=timeout)


def set_running(cluster: Cluster, namespace: str, job: str, pods: list[dict[str, Any]]) -> None:
    """Each pod Running in turn, the next once the training-operator's TFJob counts the last (as a kubelet's pods
    start, one after another). Patched within milliseconds of each other, in-process, the TFJob of a6c800f's CI run
    counted one of two running for 60 s, as did the run mirroring it; a TFJob that does not count a pod is now said
    as the training-operator's, with its status."""
    for count, pod in enumerate(pods, start=1):
        set_pod_state(cluster, namespace, pod, "Running")
        _wait_counted(cluster, namespace, job, count, pod["metadata"]["name"])


def _wait_counted(cluster: Cluster, namespace: str, job: str, count: int, last_pod: str, timeout: float = 30) -> None:
    seen: dict[str, Any] = {}

    def counted() -> bool:
        seen.update((get(cluster, namespace, "tfjob", job) or {}).get("status") or {})
        return (((seen.get("replicaStatuses") or {}).get("Worker") or {}).get("active") or 0) >= count

    if not poll(counted, timeout):
        pytest.fail(
            f"timed out after {timeout:.0f}s waiting for the training-operator's TFJob {job} to count {count} "
            f"worker(s) running, {last_pod} the last written (its status: {seen})",
            pytrace=False,
        )


def condition(st: dict[str, Any], cond_type: str) -> dict[str, Any]:
    return next(c for c in st.get("conditions", []) if c["type"] == cond_type)


def worker_pods(cluster: Cluster, namespace: str, job: str, count: int) -> list[dict[str, Any]]:
    def probe() -> list[dict[str, Any]] | None:
        pods = items(cluster, namespace, "pods", f"training.kubeflow.org/job-name={job}")
        return pods if len(pods) == count else None

    pods = wait_for(probe, f"{count} worker pods of TFJob {job} (created by the training-operator)", timeout=60)
    return sorted(pods, key=lambda p: int(p["metadata"]["labels"]["training.kubeflow.org/replica-index"]))


def set_pod_state(cluster: Cluster, namespace: str, pod: dict[str, Any], state: str, exit_code: int = 0,
                  message: str = "") -> None:
    """Write a pod's status as a kubelet would: Running, Succeeded or Failed (tensorflow container)."""
    container = {"name": "tensorflow", "image": IMAGE, "imageID": "", "restartCount": 0, "ready": state == "Running"}
    started = now()
    if state == "Running":
        container["state"] = {"running": {"startedAt": started}}
    else:
        container["state"] = {
            "terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                           "message": message, "startedAt": started, "finishedAt": now()}
        }  # fmt: skip
    body = {"status": {"phase": state, "startTime": started, "containerStatuses": [container]}}
    cluster.kubectl(
        "patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(body),
    )  # fmt: skip
