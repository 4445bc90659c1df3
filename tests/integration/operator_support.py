"""The operator under test and the small API helpers the integration tests share.

The operator runs in this process through kopf.testing.KopfRunner (`operator` fixture, registered in
conftest.py). No kubelet runs here: set_pod_state writes a pod's status as a kubelet would.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from cluster_fixtures import Cluster, wait_for
from kopf.testing import KopfRunner

IMAGE = "distml/trainer:0.1.0-test"
RUN_LABEL = "distml.dev/run"


class Operator:
    """The operator for one namespace; start/stop as often as a test needs (a restart = stop + start)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.runner: KopfRunner | None = None
        self.outputs: list[str] = []

    def start(self) -> None:
        assert self.runner is None
        os.environ["DTR_TRAINER_IMAGE"] = IMAGE
        args = ["run", "--standalone", "--namespace", self.namespace, "-m", "dtr_operator.handlers"]
        self.runner = KopfRunner(args, timeout=60)
        self.runner.__enter__()

    def stop(self) -> None:
        if self.runner is None:
            return
        runner, self.runner = self.runner, None
        runner.__exit__(None, None, None)
        self.outputs.append(runner.output)
        assert runner.exit_code == 0, runner.output[-3000:]
        assert "Traceback" not in runner.output, runner.output[-5000:]


@pytest.fixture
def operator(control_plane: Cluster, namespace: str) -> Iterator[Operator]:
    op = Operator(namespace)
    op.start()
    try:
        yield op
    finally:
        op.stop()


# ---- helpers ----------------------------------------------------------------------------------


def create_run(cluster: Cluster, namespace: str, name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = {
        "apiVersion": "distml.dev/v1alpha1",
        "kind": "DistTrainingRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec or {},
    }
    cluster.create(doc)
    return cluster.kubectl_json("get", "dtr", name, "-n", namespace)


def get(cluster: Cluster, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    proc = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json", "--ignore-not-found", check=False)
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    run = get(cluster, namespace, "dtr", name)
    return (run or {}).get("status") or {}


def wait_status(cluster: Cluster, namespace: str, name: str, what: str, timeout: float = 60, **expected: Any):
    def probe() -> dict[str, Any] | None:
        st = status(cluster, namespace, name)
        return st if all(st.get(k) == v for k, v in expected.items()) else None

    return wait_for(probe, f"run {name}: {what} {expected} (last: {status(cluster, namespace, name)})", timeout=timeout)


def items(cluster: Cluster, namespace: str, kind: str, selector: str) -> list[dict[str, Any]]:
    return cluster.kubectl_json("get", kind, "-n", namespace, "-l", selector)["items"]


def events(cluster: Cluster, namespace: str, name: str) -> list[tuple[str, str, str]]:
    got = cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.kind=DistTrainingRun,involvedObject.name={name}"
    )["items"]
    got.sort(key=lambda e: (e.get("firstTimestamp") or e.get("eventTime") or "", e["metadata"]["name"]))
    return [(e["type"], e["reason"], e.get("message", "")) for e in got]


def condition(st: dict[str, Any], cond_type: str) -> dict[str, Any]:
    return next(c for c in st.get("conditions", []) if c["type"] == cond_type)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
