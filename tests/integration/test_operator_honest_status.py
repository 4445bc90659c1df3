"""Honest status against the real API server and training-operator (security review L4 and M5): a worker pod the
API server refuses shows its words in the run's status within a minute, and a TFJob suspended by someone else
stays suspended, whatever spec.suspend does and across an operator restart; a run whose loss diverged says so
(reason Diverged, a Warning event), not just that its TFJob failed."""

from __future__ import annotations

import json
import time

from dtr_contract import exits
from operator_support import create_run, events, get, items, set_pod_state, wait_status, worker_pods

from support.cluster import Cluster
from support.operator import Operator
from support.wait import wait_for


def test_a_worker_pod_refused_by_a_quota_shows_the_api_servers_reason_within_a_minute(
    control_plane: Cluster, namespace: str, operator: Operator
) -> None:
    # A quota of zero pods: the API refuses the training-operator's pod creates. Admission enforces the quota's
    # status; no quota controller runs here, so the test writes it as one would.
    control_plane.kubectl("create", "quota", "no-pods", "-n", namespace, "--hard=pods=0")
    control_plane.kubectl(
        "patch", "quota", "no-pods", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", '{"status": {"hard": {"pods": "0"}, "used": {"pods": "0"}}}',
    )  # fmt: skip
    create_run(control_plane, namespace, "refused", {"workers": 2})
    st = wait_status(control_plane, namespace, "refused", "the refusal in its status", timeout=60,
                     phase="Pending", reason="WorkerPodsNotStarting")  # fmt: skip
    assert "the training-operator cannot create them" in st["message"], st
    assert "exceeded quota: no-pods" in st["message"], st["message"]
    assert not items(control_plane, namespace, "pods", "training.kubeflow.org/job-name=refused")


def _suspend_tfjob(cluster: Cluster, namespace: str, name: str, suspend: bool) -> None:
    cluster.kubectl("patch", "tfjob", name, "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": {"runPolicy": {"suspend": suspend}}}))  # fmt: skip


def _tfjob_suspended(cluster: Cluster, namespace: str, name: str) -> bool:
    return bool(((get(cluster, namespace, "tfjob", name) or {}).get("spec") or {}).get("runPolicy", {}).get("suspend"))


def _patch_run(cluster: Cluster, namespace: str, name: str, suspend: bool) -> None:
    cluster.kubectl("patch", "dtr", name, "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": {"suspend": suspend}}))  # fmt: skip


def test_a_tfjob_suspended_by_someone_else_stays_suspended(
    control_plane: Cluster, namespace: str, operator: Operator
) -> None:
    create_run(control_plane, namespace, "held", {"workers": 1})
    # Once the training-operator has taken the TFJob in (its status has conditions): suspended within ms of its
    # creation, in-process, the training-operator never said Suspended (24d528b's CI run).
    wait_for(lambda: ((get(control_plane, namespace, "tfjob", "held") or {}).get("status") or {}).get("conditions"),
             "TFJob held, taken in by the training-operator")  # fmt: skip
    _suspend_tfjob(control_plane, namespace, "held", True)  # an admin, or a queue manager
    st = wait_status(control_plane, namespace, "held", "held by someone else", phase="Pending",
                     reason="TFJobSuspended")  # fmt: skip
    assert "not by this operator" in st["message"], st

    # spec.suspend toggled: true (the TFJob is suspended already), then false: not the operator's to undo.
    _patch_run(control_plane, namespace, "held", True)
    wait_status(control_plane, namespace, "held", "suspended", phase="Suspended", reason="RunSuspended")
    _patch_run(control_plane, namespace, "held", False)
    wait_status(control_plane, namespace, "held", "held again", phase="Pending", reason="TFJobSuspended")
    # An operator restart runs the resume handler on every run: the same decision.
    operator.stop()
    operator.start()
    time.sleep(5)  # the resume handler has run by then (it would patch at once)
    assert _tfjob_suspended(control_plane, namespace, "held")
    assert wait_status(control_plane, namespace, "held", "still held", reason="TFJobSuspended")

    # The operator's own suspension it does undo: the check above was not blind.
    _suspend_tfjob(control_plane, namespace, "held", False)
    _patch_run(control_plane, namespace, "held", True)
    wait_for(lambda: _tfjob_suspended(control_plane, namespace, "held"), "the operator to suspend the TFJob")
    annotations = get(control_plane, namespace, "tfjob", "held")["metadata"].get("annotations") or {}
    assert annotations.get("distml.dev/suspended-by") == "dtr-operator", annotations
    _patch_run(control_plane, namespace, "held", False)
    wait_for(lambda: not _tfjob_suspended(control_plane, namespace, "held"), "the operator to resume its suspension")


def test_a_run_whose_loss_diverged_fails_diverged_with_the_workers_line_and_a_warning(
    control_plane: Cluster, namespace: str, operator: Operator
) -> None:
    create_run(control_plane, namespace, "nan", {"workers": 2, "restartPolicy": "Never"})
    pods = worker_pods(control_plane, namespace, "nan", 2)
    line = ("training diverged: the loss became nan in epoch 2/3 (by step 50/84, learning rate 5); lower the learning "
            "rate, or look for NaN or infinite values in the data")  # fmt: skip
    # The first worker to exit fails the TFJob (restartPolicy Never), whose pods still running are then released.
    set_pod_state(control_plane, namespace, pods[1], "Running")
    set_pod_state(control_plane, namespace, pods[0], "Failed", exit_code=exits.DIVERGED,
                  message=f"dtr_trainer[worker-0]: error: {line}\n")  # fmt: skip
    st = wait_status(control_plane, namespace, "nan", "failed", phase="Failed")
    assert st["reason"] == "Diverged", st
    assert st["message"] == f"{line} (worker nan-worker-0, exit code {exits.DIVERGED})", st["message"]
    wait_for(lambda: ("Warning", "Diverged", st["message"]) in events(control_plane, namespace, "nan"),
             "the Diverged Warning event", timeout=30)  # fmt: skip
