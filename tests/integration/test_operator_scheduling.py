"""Suspend and resume, Kueue's hand-off and placement, against the real training-operator (and its
validating webhook) on the real control plane; no kubelet, so pod states are written as a kubelet would."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from operator_support import (
    create_run,
    events_once,
    get,
    items,
    set_pod_state,
    wait_status,
    worker_pods,
)

from support.cluster import Cluster
from support.operator import Operator
from support.wait import wait_for


def patch_run(cluster: Cluster, namespace: str, name: str, spec: dict[str, Any]) -> None:
    cluster.kubectl("patch", "dtr", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec}))


def tfjob_suspend(cluster: Cluster, namespace: str, name: str) -> bool:
    job = get(cluster, namespace, "tfjob", name) or {}
    return bool(job.get("spec", {}).get("runPolicy", {}).get("suspend"))


def no_pods(cluster: Cluster, namespace: str, job: str) -> bool:
    return not items(cluster, namespace, "pods", f"training.kubeflow.org/job-name={job}")


def test_suspend_stops_the_workers_and_resume_brings_them_back(
    control_plane: Cluster, namespace: str, operator: Operator
) -> None:
    create_run(control_plane, namespace, "pause", {"workers": 2})
    for pod in worker_pods(control_plane, namespace, "pause", 2):
        set_pod_state(control_plane, namespace, pod, "Running")
    wait_status(control_plane, namespace, "pause", "running", phase="Running")

    patch_run(control_plane, namespace, "pause", {"suspend": True})
    st = wait_status(control_plane, namespace, "pause", "suspended", phase="Suspended", reason="RunSuspended")
    assert tfjob_suspend(control_plane, namespace, "pause")
    wait_for(lambda: no_pods(control_plane, namespace, "pause"), "the training-operator to delete the worker pods")
    assert '"suspend":false' in st["message"], st["message"]
    assert next(c for c in st["conditions"] if c["type"] == "Suspended")["status"] == "True"
    suspended = ("Normal", "Suspended", "suspended TFJob pause (spec.suspend: True)")
    events_once(control_plane, namespace, "pause", *suspended)

    patch_run(control_plane, namespace, "pause", {"suspend": False})
    pods = worker_pods(control_plane, namespace, "pause", 2)  # created again by the training-operator
    assert not tfjob_suspend(control_plane, namespace, "pause")
    for pod in pods:
        set_pod_state(control_plane, namespace, pod, "Running")
    wait_status(control_plane, namespace, "pause", "running again", phase="Running")
    reasons = [r for _, r, _ in events_once(control_plane, namespace, "pause", "Normal", "Resumed")]
    assert "Resumed" in reasons and reasons.count("Suspended") == 1, reasons
    # One TFJob through it all.
    assert len(items(control_plane, namespace, "tfjobs", "distml.dev/run=pause")) == 1


def test_a_run_created_suspended_makes_no_pods_until_resumed(
    control_plane: Cluster, namespace: str, operator: Operator
) -> None:
    create_run(control_plane, namespace, "later", {"workers": 1, "suspend": True})
    wait_status(control_plane, namespace, "later", "suspended", phase="Suspended", reason="RunSuspended")
    assert tfjob_suspend(control_plane, namespace, "later") and no_pods(control_plane, namespace, "later")
    patch_run(control_plane, namespace, "later", {"suspend": False})
    worker_pods(control_plane, namespace, "later", 1)


def test_a_queued_run_waits_for_kueue_and_the_operator_leaves_the_hand_off_to_it(
    control_plane: Cluster, namespace: str, operator: Operator
) -> None:
    create_run(control_plane, namespace, "queued", {"workers": 2, "queueName": "team-a"})
    st = wait_status(control_plane, namespace, "queued", "queued", phase="Pending", reason="Queued")
    assert "team-a" in st["message"]
    job = get(control_plane, namespace, "tfjob", "queued")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["runPolicy"]["suspend"] is True and no_pods(control_plane, namespace, "queued")

    # Kueue admits the workload: it unsuspends the TFJob (as Kueue's job framework does).
    control_plane.kubectl("patch", "tfjob", "queued", "-n", namespace, "--type=merge",
                          "-p", '{"spec": {"runPolicy": {"suspend": false}}}')  # fmt: skip
    pods = worker_pods(control_plane, namespace, "queued", 2)
    for pod in pods:
        set_pod_state(control_plane, namespace, pod, "Running")
    wait_status(control_plane, namespace, "queued", "running", phase="Running")
    assert not tfjob_suspend(control_plane, namespace, "queued"), "the operator did not suspend it again"


def test_placement_and_gang_settings_reach_the_tfjob_and_its_pods(
    control_plane: Cluster, namespace: str, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    priority = f"dtr-test-{uuid.uuid4().hex[:6]}"
    # What the run below asks of the cluster, allowed as an admin would (docs/operator.md); read at start.
    for name, value in (("DTR_ALLOWED_POD_LABELS", "team"), ("DTR_ALLOWED_POD_ANNOTATIONS", "example.com/*"),
                        ("DTR_ALLOWED_PRIORITY_CLASSES", priority)):  # fmt: skip
        monkeypatch.setenv(name, value)
    operator.stop()
    operator.start()
    control_plane.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                          "metadata": {"name": priority}, "value": 100})  # fmt: skip
    try:
        spec = {
            "workers": 2,
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                  "labelSelector": {"matchLabels": {"distml.dev/run": "placed"}}}}]}},
            "priorityClassName": priority,
            "podLabels": {"team": "ml"},
            "podAnnotations": {"example.com/note": "placed"},
            "schedulingPolicy": {"minAvailable": 2, "queue": "research", "scheduleTimeoutSeconds": 120},
        }  # fmt: skip
        create_run(control_plane, namespace, "placed", spec)
        job = wait_for(lambda: get(control_plane, namespace, "tfjob", "placed"),
                       "TFJob placed (admitted by the webhook)")
        assert job["spec"]["runPolicy"]["schedulingPolicy"] == spec["schedulingPolicy"]
        for pod in worker_pods(control_plane, namespace, "placed", 2):
            pod_spec = pod["spec"]
            assert pod_spec["nodeSelector"] == {"pool": "gpu"}
            assert {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_spec["tolerations"]
            assert pod_spec["affinity"] == spec["affinity"]
            assert pod_spec["priorityClassName"] == priority and pod_spec["priority"] == 100
            assert pod["metadata"]["labels"]["team"] == "ml"
            assert pod["metadata"]["annotations"]["example.com/note"] == "placed"
    finally:
        control_plane.kubectl("delete", "priorityclass", priority, check=False)
