"""Full runs on the local cluster: control plane + training-operator + process node + operator + TF.

Each test gets its own namespace and its own operator (scoped to it); the node is shared. Runs are
tiny (digits, a few epochs of a few steps) so the suite fits CI on 2 cores.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from cluster_fixtures import Cluster, wait_for
from e2e_support import (
    NODE_NAME,
    Node,
    Operator,
    digits_run,
    saved_models,
    trainer_processes,
)

RUN_TIMEOUT = (
    300  # a run's wall time is ~30-60 s here; generous for a loaded CI machine
)
JOB_LABEL = "training.kubeflow.org/job-name"


def apply(cluster: Cluster, namespace: str, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))


def run_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return (
        cluster.kubectl_json("get", "distrainingruns", name, "-n", namespace).get(
            "status"
        )
        or {}
    )


def wait_terminal(
    cluster: Cluster, namespace: str, name: str, seen: list[str] | None = None
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        st = run_status(cluster, namespace, name)
        if (
            seen is not None
            and st.get("phase")
            and (not seen or seen[-1] != st["phase"])
        ):
            seen.append(st["phase"])
        return st if st.get("phase") in ("Succeeded", "Failed") else None

    return wait_for(
        probe, f"run {namespace}/{name} to finish", timeout=RUN_TIMEOUT, interval=0.5
    )


def pod(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return cluster.kubectl_json("get", "pod", name, "-n", namespace)


def tensorflow_status(p: dict[str, Any]) -> dict[str, Any]:
    return next(
        c for c in p["status"]["containerStatuses"] if c["name"] == "tensorflow"
    )


def wait_log(node: Node, namespace: str, pod_name: str, text: str) -> None:
    wait_for(lambda: text in node.pod_log_text(namespace, pod_name), f"{text!r} in {pod_name}'s log",
             timeout=RUN_TIMEOUT, interval=0.2)  # fmt: skip


def kill_worker(namespace: str, pod_name: str) -> int:
    pids = trainer_processes(namespace, pod_name)
    assert len(pids) == 1, f"expected one process for {pod_name}, found {pids}"
    os.kill(pids[0], signal.SIGKILL)
    return pids[0]


def summary_line(log_text: str) -> dict[str, Any]:
    """The trainer's own one-line JSON summary (the chief prints it on stdout)."""
    lines = [
        ln for ln in log_text.splitlines() if ln.startswith("{") and '"accuracy"' in ln
    ]
    assert lines, "the chief printed no JSON summary"
    return json.loads(lines[-1])


def names(cluster: Cluster, kind: str, namespace: str, selector: str) -> list[str]:
    out = cluster.kubectl(
        "get", kind, "-n", namespace, "-l", selector, "-o", "name"
    ).stdout
    return out.split()


def test_two_worker_run_succeeds_with_one_model_and_the_trainers_accuracy(
    control_plane: Cluster, namespace: str, node: Node, operator: Operator
) -> None:
    name = "ok"
    apply(control_plane, namespace, digits_run(name, epochs=3, steps=10))
    phases: list[str] = []
    st = wait_terminal(control_plane, namespace, name, phases)

    assert st["phase"] == "Succeeded", st
    assert "Running" in phases, phases
    chief_log = node.pod_log_text(namespace, f"{name}-worker-0")
    summary = summary_line(chief_log)
    assert st["metrics"]["accuracy"] == summary["accuracy"]
    assert st["metrics"]["epochs"] == 3
    assert st["model"] == {
        "path": f"/mnt/dtr/models/{name}/1",
        "claim": f"{name}-data",
        "version": 1,
    }
    assert st["workers"] == {"active": 0, "succeeded": 2, "failed": 0}

    volume = node.volume(namespace, f"{name}-data")
    assert Path(summary["modelPath"]) == volume / "models" / name / "1"
    assert saved_models(volume) == [volume / "models" / name / "1"], (
        "exactly one model on the volume"
    )

    for i in range(2):
        p = pod(control_plane, namespace, f"{name}-worker-{i}")
        assert p["spec"]["nodeName"] == NODE_NAME
        assert p["status"]["phase"] == "Succeeded"
        assert tensorflow_status(p)["state"]["terminated"]["exitCode"] == 0

    table = control_plane.kubectl("get", "distrainingruns", "-n", namespace).stdout
    assert (
        "Succeeded" in table and f"/mnt/dtr/models/{name}/1" in table and "2/2" in table
    ), table


def test_worker_killed_with_on_failure_resumes_from_backup_and_succeeds(
    control_plane: Cluster, namespace: str, node: Node, operator: Operator
) -> None:
    name = "heal"
    worker = f"{name}-worker-1"
    apply(
        control_plane,
        namespace,
        digits_run(name, epochs=5, steps=30, restart="OnFailure", backoff=8),
    )
    wait_log(node, namespace, worker, "epoch 2/5 end")
    kill_worker(namespace, worker)

    st = wait_terminal(control_plane, namespace, name)
    assert st["phase"] == "Succeeded", st
    cs = tensorflow_status(pod(control_plane, namespace, worker))
    assert cs["restartCount"] >= 1
    logs = node.pod_logs(namespace, worker)
    assert len(logs) >= 2
    later = "".join(p.read_text() for p in logs[1:])
    assert "resumed from backup at epoch" in later, (
        "the restarted worker started over instead of resuming"
    )
    assert "epoch 1/5 begin" not in logs[-1].read_text()
    volume = node.volume(namespace, f"{name}-data")
    assert saved_models(volume) == [volume / "models" / name / "1"]


def test_worker_killed_with_never_fails_the_run_naming_the_worker(
    control_plane: Cluster, namespace: str, node: Node, operator: Operator
) -> None:
    name = "never"
    worker = f"{name}-worker-1"
    apply(
        control_plane, namespace, digits_run(name, epochs=5, steps=30, restart="Never")
    )
    wait_log(node, namespace, worker, "epoch 1/5 end")
    kill_worker(namespace, worker)

    st = wait_terminal(control_plane, namespace, name)
    assert st["phase"] == "Failed", st
    assert worker in st["message"], st["message"]
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and worker in failed["message"]
    p = pod(control_plane, namespace, worker)
    assert p["status"]["phase"] == "Failed"
    cs = tensorflow_status(p)
    assert cs["restartCount"] == 0 and cs["state"]["terminated"]["exitCode"] == 137


def test_run_deleted_mid_training_stops_everything_and_keeps_the_pvc_only_with_retain(
    control_plane: Cluster, namespace: str, node: Node, operator: Operator
) -> None:
    runs = {"keep": ("Retain", 2), "drop": ("Delete", 1)}
    for name, (reclaim, workers) in runs.items():
        apply(
            control_plane,
            namespace,
            digits_run(name, workers=workers, epochs=100, steps=20, reclaim=reclaim),
        )
    for name in runs:
        wait_log(node, namespace, f"{name}-worker-0", "epoch 1/100 end")
    assert len(trainer_processes(namespace)) == 3

    control_plane.kubectl(
        "delete", "distrainingruns", *runs, "-n", namespace, "--timeout=60s"
    )

    def all_gone() -> bool:
        return not (
            names(control_plane, "tfjobs", namespace, "distml.dev/run")
            or names(control_plane, "pods", namespace, JOB_LABEL)
            or trainer_processes(namespace)
        )

    wait_for(
        all_gone, "TFJobs, pods and worker processes to go", timeout=120, interval=0.5
    )
    wait_for(lambda: not names(control_plane, "pvc", namespace, "distml.dev/run=drop"),
             "the Delete run's PVC to go", timeout=60)  # fmt: skip
    kept = control_plane.kubectl_json("get", "pvc", "keep-data", "-n", namespace)
    assert "deletionTimestamp" not in kept["metadata"]
    assert (node.volume(namespace, "keep-data") / "backup" / "keep").exists(), (
        "the retained volume keeps its data"
    )


def test_operator_killed_and_restarted_mid_run_continues_without_duplicates(
    control_plane: Cluster, namespace: str, node: Node, operator: Operator
) -> None:
    name = "phoenix"
    apply(control_plane, namespace, digits_run(name, epochs=4, steps=20))
    wait_for(lambda: run_status(control_plane, namespace, name).get("phase") == "Running", "phase Running",
             timeout=RUN_TIMEOUT)  # fmt: skip
    before = {
        kind: control_plane.kubectl_json(
            "get", kind, "-n", namespace, "-l", f"distml.dev/run={name}"
        )["items"]
        for kind in ("tfjobs", "pvc")
    }
    operator.kill()
    wait_log(
        node, namespace, f"{name}-worker-0", "epoch 1/4 end"
    )  # training goes on without the operator
    operator.start_healthy()

    st = wait_terminal(control_plane, namespace, name)
    assert st["phase"] == "Succeeded", st
    assert "accuracy" in st["metrics"]
    for kind, items in before.items():
        now = control_plane.kubectl_json(
            "get", kind, "-n", namespace, "-l", f"distml.dev/run={name}"
        )["items"]
        assert [o["metadata"]["uid"] for o in now] == [
            o["metadata"]["uid"] for o in items
        ], f"{kind} duplicated"
        assert len(now) == 1
    assert operator.starts == 2


@pytest.fixture(autouse=True)
def _logs_on_failure(
    request: pytest.FixtureRequest, node: Node, operator: Operator
) -> Any:
    """On a failed test, print the tails of the node's and the operator's logs (shown in the report)."""
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(
            f"--- node log ---\n{node.tail(60)}\n--- operator log ---\n{operator.tail(60)}"
        )
