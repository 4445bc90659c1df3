"""Kueue for real on the real node (devcluster/kueue.py: upstream's manifests, our build of v0.17.0, the
TFJob integration on): queued runs wait in a LocalQueue, are admitted one at a time in the order they came,
and the operator never un-suspends a TFJob Kueue holds, not even after the operator restarts; a run of a
higher WorkloadPriorityClass preempts a running one, which resumes from its epochs once readmitted.

The ClusterQueue's quota is 1 CPU, what every run asks: the preempted run's two workers 500m each, the others'
one worker (what is proved of them takes no peer: admission, order, the TFJob held) the whole CPU. Kueue
stays installed for the rest of the tier (as on a shared cluster, every other test runs beside it).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from devcluster import kueue
from support.node import RealNode
from support.runs import digits_run, saved_models, slow_epochs_run
from support.wait import wait_for

FLAVOR, CLUSTER_QUEUE, LOCAL_QUEUE = "dtr-default", "dtr-test", "team"
QUOTA_CPU = "1"
RUNS = ("first", "second", "third")
LOW, HIGH = "dtr-low", "dtr-high"  # WorkloadPriorityClasses
# Long enough that the preemption lands mid-training: the sleeping model's epochs of LOW_EPOCH_SECONDS (digits' 30
# steps each until 2026-12-07, 36 CPU s of the node's pods at b62b1d0; what Kueue and the resume do is the same).
LOW_EPOCHS, LOW_EPOCH_SECONDS = 20, 2


@pytest.fixture(scope="module")
def queues(real_node: RealNode) -> Iterator[None]:
    """Kueue installed; a ResourceFlavor and a ClusterQueue of 1 CPU that any namespace may use, where a run of a
    higher WorkloadPriorityClass may preempt one of a lower; those two classes."""
    kueue.install(real_node.cluster.kubeconfig, log=lambda msg: print(f"\n{msg}"))
    for doc in (
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
         "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
                  "preemption": {"withinClusterQueue": "LowerPriority"},
                  "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                      {"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": QUOTA_CPU}]}]}]}},
        *({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
           "value": value} for name, value in ((LOW, 100), (HIGH, 1000))),
    ):  # fmt: skip
        real_node.apply("default", doc)
    yield
    real_node.cluster.kubectl("delete", "clusterqueue", CLUSTER_QUEUE, "--ignore-not-found", "--wait=false",
                              check=False)  # fmt: skip


@pytest.fixture
def local_queue(real_node: RealNode, namespace: str, queues: None) -> str:
    doc = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": LOCAL_QUEUE},
           "spec": {"clusterQueue": CLUSTER_QUEUE}}  # fmt: skip
    real_node.apply(namespace, doc)
    return LOCAL_QUEUE


@pytest.fixture(scope="module")
def priorities_allowed(real_node: RealNode) -> Iterator[None]:
    """The operator admits the two WorkloadPriorityClasses (its --allowed-priority-classes, none by default), as
    an admin would set it; back to the default after."""
    kubectl = real_node.cluster.kubectl

    def operator_env(change: str) -> None:
        kubectl("-n", "dtr-system", "set", "env", "deployment/dtr-operator", change)
        kubectl("-n", "dtr-system", "rollout", "status", "deployment/dtr-operator", "--timeout=180s", timeout=200)

    operator_env(f"DTR_ALLOWED_PRIORITY_CLASSES={LOW},{HIGH}")
    yield
    operator_env("DTR_ALLOWED_PRIORITY_CLASSES-")


def queued_run(name: str, epochs: int = 2, steps: int = 10, priority: str | None = None, workers: int = 1,
               epoch_seconds: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Its workers ask the whole quota between them (1 CPU): one run is admitted at a time. With epoch_seconds, the
    sleeping model's run (support.runs.slow_epochs_run: apply it with RealNode.apply_slow_epochs), else digits'."""
    doc = digits_run(name, workers=workers, epochs=epochs, steps=steps) if epoch_seconds is None else \
        slow_epochs_run(name, epochs, epoch_seconds, workers=workers)  # fmt: skip
    doc["spec"]["queueName"] = LOCAL_QUEUE
    doc["spec"]["resources"] = {"requests": {"cpu": f"{1000 // workers}m"}, "limits": {"cpu": "1"}}
    if priority is not None:
        doc["spec"]["workloadPriorityClass"] = priority
    return doc


def tfjob_suspended(real_node: RealNode, namespace: str, name: str) -> bool | None:
    """The TFJob's runPolicy.suspend; None while there is no TFJob."""
    proc = real_node.cluster.kubectl("get", "tfjob", name, "-n", namespace, "-o", "json", check=False)
    if proc.returncode != 0:
        return None
    return bool(json.loads(proc.stdout)["spec"].get("runPolicy", {}).get("suspend"))


def epochs_done(status: dict[str, Any]) -> int:
    """The finished epochs status.progress shows ("3/8" -> 3), 0 before the first."""
    return int(((status.get("progress") or {}).get("epochsDone") or "0/").split("/")[0])


def test_queued_runs_are_admitted_one_at_a_time_in_order_and_the_operator_never_unsuspends_them(
    real_node: RealNode, namespace: str, local_queue: str
) -> None:
    for name in RUNS:
        real_node.apply(namespace, queued_run(name))
        time.sleep(1.2)  # Kueue orders a queue by creation time, in whole seconds

    admitted: dict[str, float] = {}  # run -> when its TFJob was first seen not suspended
    queued_messages: dict[str, str] = {}
    restarted = False
    t0 = time.monotonic()

    def step() -> bool:
        nonlocal restarted
        running = []
        for name in RUNS:
            st = real_node.run_status(namespace, name)
            if st.get("reason") == "Queued":
                queued_messages[name] = st.get("message", "")
            if name not in admitted and tfjob_suspended(real_node, namespace, name) is False:
                admitted[name] = time.monotonic() - t0
            if name in admitted and st.get("phase") not in ("Succeeded", "Failed"):
                running.append(name)
        assert len(running) <= 1, f"more than one run admitted at once: {running}"
        if len(admitted) == 1 and not restarted:
            # The operator restarts while two runs wait: the new one must leave their TFJobs suspended
            # (the check above, every second until the end).
            real_node.cluster.kubectl("-n", "dtr-system", "rollout", "restart", "deployment/dtr-operator")
            restarted = True
        return all(real_node.run_status(namespace, n).get("phase") in ("Succeeded", "Failed") for n in RUNS)

    wait_for(step, "the three queued runs to finish", timeout=900, interval=1)
    print(f"\nadmitted at (s after the last create): {admitted}")
    assert list(admitted) == list(RUNS), f"admitted out of order: {admitted}"
    assert restarted
    for name in RUNS[1:]:
        assert f"LocalQueue {LOCAL_QUEUE}" in queued_messages.get(name, ""), queued_messages
    for name in RUNS:
        st = real_node.run_status(namespace, name)
        assert st["phase"] == "Succeeded", (name, st)
        volume = real_node.volume(namespace, f"{name}-data")
        assert saved_models(volume) == [volume / "models" / name / "1"], name
    workloads = real_node.cluster.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", namespace)["items"]
    assert len(workloads) == len(RUNS), [w["metadata"]["name"] for w in workloads]


def test_a_run_of_a_higher_workload_priority_class_preempts_a_running_one_which_resumes_from_its_epochs(
    real_node: RealNode, namespace: str, local_queue: str, priorities_allowed: None
) -> None:
    low_run = queued_run("low", epochs=LOW_EPOCHS, priority=LOW, workers=2, epoch_seconds=LOW_EPOCH_SECONDS)
    # kueue#2923 / kubeflow/trainer#2239: preempting a TFJob with a non-default runPolicy.ttlSecondsAfterFinished
    # left its pods running. The preempted run here has one.
    low_run["spec"]["ttlSecondsAfterFinished"] = 600
    real_node.apply_slow_epochs(namespace, low_run)
    # Preempted once its status shows an epoch done (status.progress, polled every few seconds): the message
    # must name it.
    wait_for(lambda: epochs_done(real_node.run_status(namespace, "low")) >= 2, "the low run's status to show epoch 2",
             timeout=600, interval=1)  # fmt: skip
    real_node.apply(namespace, queued_run("high", priority=HIGH))

    st = wait_for(lambda: (s := real_node.run_status(namespace, "low")).get("reason") == "Preempted" and s,
                  "the low run to be preempted", timeout=180)  # fmt: skip
    print(f"\nthe preempted run: {st['message']}")
    assert st["phase"] == "Suspended" and f"LocalQueue {local_queue}" in st["message"], st
    assert f"/{LOW_EPOCHS}" in st["message"], "the message names the last finished epoch"
    row = real_node.cluster.kubectl("get", "dtr", "low", "-n", namespace).stdout
    assert "Suspended" in row, row
    wait_for(lambda: not real_node.names("pods", namespace, "training.kubeflow.org/job-name=low"),
             "the preempted run's pods to go (kueue#2923)", timeout=120)  # fmt: skip

    high = real_node.wait_terminal(namespace, "high")
    assert high["phase"] == "Succeeded", high
    low = real_node.wait_terminal(namespace, "low")
    assert low["phase"] == "Succeeded", low
    chief = real_node.logs(namespace, "low-worker-0")
    assert "resumed from backup at epoch" in chief, chief[-3000:]

    volume = real_node.volume(namespace, "low-data")
    log = (volume / "logs" / "low" / "worker-0.log").read_text()
    ends = [int(m) for m in re.findall(rf"epoch (\d+)/{LOW_EPOCHS} end", log)]
    assert sorted(ends) == list(range(1, LOW_EPOCHS + 1)), f"every epoch once across both admissions: {ends}"
    assert saved_models(volume) == [volume / "models" / "low" / "1"]
    reasons = real_node.cluster.kubectl("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=low",
                                        "-o", "jsonpath={.items[*].reason}").stdout  # fmt: skip
    assert "Preempted" in reasons.split(), reasons
