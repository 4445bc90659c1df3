"""A node goes away under a run whose workers are on two nodes: powered off (its kubelet, containerd, flannel,
kube-proxy and every container SIGKILLed at once, the Node left NotReady) and left, or the node of a ReadWriteOnce
run's volume lost. A drain, and a power-off followed by the out-of-service taint Kubernetes' non-graceful node
shutdown asks of an admin, are test_disruption.py's, both in one run. With spec.disruption.resume (the
default) each run must end Succeeded with one model, every epoch ended once across its attempts (the chief's log on
the shared volume), whether the operator resumed it (status.resumes) or the training-operator made the lost pod
again in place (a race in v1.9.4: docs/clusters.md). Each case's times go to docs/reliability.md's fault table (the
reliability ledger)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from reliability.ledger import Ledger, Record, results_path
from support.multinode import (
    OUT_OF_SERVICE,
    MultiNode,
    claim_dir,
    epochs_ended,
    finish,
    one_node_run,
    pv_node,
    spread_run,
    wait_node_ready,
    worker_nodes,
)
from support.runs import saved_models
from support.wait import wait_for

# The fault lands once the status says epoch 2: by then the chief may be a few epochs on (the operator reads its
# log every 5 s; one cut here landed at epoch 8), well before the end. 60 before 2026-12-05: the four tests took
# 454 s, 352 s with 20 (the same checks; each resume trains what is left, so fewer epochs cost less after it).
EPOCHS = 20


@pytest.fixture(scope="module")
def ledger() -> Iterator[Ledger]:
    book = Ledger()
    yield book
    book.save(results_path())


def start(multinode: MultiNode, namespace: str, doc: dict[str, Any]) -> list[str]:
    """The run training, past its second epoch: its workers' nodes, the chief's first."""
    name = doc["metadata"]["name"]
    multinode.real.apply(namespace, doc)
    nodes = worker_nodes(multinode, namespace, name)

    def past_epoch_two() -> bool:
        return ((multinode.real.run_status(namespace, name).get("progress") or {}).get("epoch") or 0) >= 2

    wait_for(past_epoch_two, timeout=300, interval=0.5, what=f"{name} past epoch 2")
    return nodes


def survived(multinode: MultiNode, namespace: str, name: str, st: dict[str, Any], models: int,
             loads: bool | None, epochs: int = EPOCHS) -> bool:  # fmt: skip
    """Succeeded, one model that loads and scores, every epoch ended once across the attempts."""
    ended = epochs_ended(multinode, namespace, name)
    assert ended == list(range(1, epochs + 1)), f"each epoch once across the attempts: {ended}"
    return st.get("phase") == "Succeeded" and models == 1 and bool(loads)


def record(ledger: Ledger, case: str, ok: bool, st: dict[str, Any], models: int, sees: str, **detail: Any) -> None:
    ledger.add(Record(
        area="fault", case=case, tried=1, correct=int(ok), duplicated=int(models > 1), user_sees=sees,
        detail={"phase": st.get("phase"), "reason": st.get("reason"), "models": models, **detail},
    ))  # fmt: skip


def test_a_workers_node_powered_off_and_left_waits_naming_it_then_resumes_when_it_is_back(
    multinode: MultiNode, namespace: str, ledger: Ledger, powered_back: list[str]
) -> None:
    """Without the admin's taint the lost worker's pod stays Terminating (its kubelet is gone): the run resumes, but
    its failed TFJob cannot go before that pod does, and the operator never force-deletes it (the node may only be cut
    off). The status names the pod, its node and the taint that would release it; when the node comes back, the pod
    goes and the run carries on to Succeeded."""
    name = "left-node"
    _, victim = start(multinode, namespace, spread_run(name, epochs=EPOCHS))
    t0 = time.monotonic()
    multinode.nodes.node(victim).power_off()
    powered_back.append(victim)

    def waits() -> dict[str, Any] | None:
        st = multinode.real.run_status(namespace, name)
        return st if "waiting for the failed TFJob's pods to go" in (st.get("message") or "") else None

    st = wait_for(waits, timeout=420, interval=1, what=f"{name} waiting for its pod on {victim}")
    waited = time.monotonic() - t0
    message = st["message"]
    names_it = f"{name}-worker-1 on node {victim}" in message and f"kubectl taint node {victim} " in message
    multinode.nodes.node(victim).power_on()
    wait_node_ready(multinode, victim, "True")
    st, models, loads = finish(multinode, namespace, name)
    took = time.monotonic() - t0
    ok = names_it and survived(multinode, namespace, name, st, models, loads)
    record(ledger, "a worker's node powered off and left NotReady, then powered on again (several nodes)", ok, st,
           models, f"waited {waited:.0f} s after the cut naming the pod, its node and the out-of-service taint; "
           f"{st.get('phase')} {took:.0f} s after the cut once the node was back: {message[:200]}",
           waited_seconds=round(waited, 1), seconds=round(took, 1))  # fmt: skip
    print(f"power-off, no taint: waited {waited:.0f} s ({message}); {st.get('phase')} {took:.1f} s after the cut")
    assert ok, st


def test_the_node_of_a_readwriteonce_run_lost_holds_the_run_until_it_is_back(
    multinode: MultiNode, namespace: str, ledger: Ledger, powered_back: list[str]
) -> None:
    """The default claim (ReadWriteOnce, the node's own disk) keeps every worker on its volume's node (the PV's node
    affinity: the scheduler's doing, seen before the cut); that node goes away with the backup on its disk, and an
    admin declares it out of service. The run resumes, but no worker can
    start elsewhere (the volume is bound to the node): it must say that it waits and why (the scheduler's words),
    claim no model meanwhile, and carry on from the backup once the node is back and the taint removed."""
    name = "lost-volume"
    nodes = start(multinode, namespace, one_node_run(name, epochs=EPOCHS))
    pv = multinode.cluster.kubectl_json("get", "pvc", f"{name}-data", "-n", namespace)["spec"]["volumeName"]
    assert nodes == [pv_node(multinode, pv)] * 2, (nodes, pv)
    victim = nodes[0]
    t0 = time.monotonic()
    multinode.nodes.node(victim).power_off()
    powered_back.append(victim)
    wait_node_ready(multinode, victim, "Unknown", timeout=120)
    multinode.cluster.kubectl("taint", "node", victim, OUT_OF_SERVICE)

    def cannot_start() -> dict[str, Any] | None:
        st = multinode.real.run_status(namespace, name)
        return st if st.get("resumes") and "cannot be scheduled" in (st.get("message") or "") else None

    st = wait_for(cannot_start, timeout=300, interval=1, what=f"{name} resumed, its workers not schedulable")
    waited = time.monotonic() - t0
    said = st["message"]
    held = st.get("phase") == "Pending" and "model" not in st
    multinode.nodes.node(victim).power_on()
    multinode.cluster.kubectl("taint", "node", victim, "node.kubernetes.io/out-of-service-", check=False)
    wait_node_ready(multinode, victim, "True")
    st = multinode.real.wait_terminal(namespace, name, timeout=600)
    took = time.monotonic() - t0
    models = saved_models(claim_dir(multinode, namespace, f"{name}-data") / "models")
    ended = epochs_ended(multinode, namespace, name)
    ok = held and st.get("phase") == "Succeeded" and len(models) == 1 and ended == list(range(1, EPOCHS + 1))
    record(ledger, "the node of a ReadWriteOnce run's volume and of both its workers powered off, tainted "
           "out-of-service by an admin, then back (several nodes)",
           ok, st, len(models), f"resumed, Pending {waited:.0f} s after the cut saying why ({said[:160]}); "
           f"{st.get('phase')} {took:.0f} s after the cut once the node was back, each epoch once",
           waited_seconds=round(waited, 1), seconds=round(took, 1))  # fmt: skip
    print(f"ReadWriteOnce node lost: {said}; then {st.get('phase')} {took:.1f} s after the cut; epochs {ended}")
    assert ok, (said, st, ended)
