"""A node goes away under a run whose workers are on two nodes: powered off (its kubelet, containerd, flannel,
kube-proxy and every container SIGKILLed at once, the Node left NotReady), with and without the out-of-service
taint Kubernetes' non-graceful node shutdown asks of an admin; and drained. Each case's times go to
docs/reliability.md's fault table (the reliability ledger)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from reliability.ledger import Ledger, Record, results_path
from support.multinode import MultiNode, claim_dir, one_node_run, spread_run, wait_node_ready, worker_nodes
from support.node import score_model
from support.runs import saved_models
from support.wait import wait_for

EPOCHS = 60  # about a minute of training: the fault lands well before the end
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"


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


def finish(multinode: MultiNode, namespace: str, name: str) -> tuple[dict[str, Any], int, bool | None]:
    """The run's final status, how many models it left, and whether they load and score."""
    st = multinode.real.wait_terminal(namespace, name, timeout=600)
    claim = st.get("pvc") or f"{name}-data"
    models = saved_models(claim_dir(multinode, namespace, claim) / "models")
    return st, len(models), (all(score_model(m) > 0.5 for m in models) if models else None)


def record(ledger: Ledger, case: str, ok: bool, st: dict[str, Any], models: int, sees: str, **detail: Any) -> None:
    ledger.add(Record(
        area="fault", case=case, tried=1, correct=int(ok), duplicated=int(models > 1), user_sees=sees,
        detail={"phase": st.get("phase"), "reason": st.get("reason"), "models": models, **detail},
    ))  # fmt: skip


@pytest.fixture
def powered_back(multinode: MultiNode) -> Iterator[list[str]]:
    """The nodes a test powers off: powered on, untainted and Ready again after it."""
    off: list[str] = []
    yield off
    for name in off:
        multinode.nodes.node(name).power_on()
        multinode.cluster.kubectl("taint", "node", name, "node.kubernetes.io/out-of-service-", check=False)
        wait_node_ready(multinode, name, "True")


def test_a_workers_node_powered_off_then_declared_out_of_service(
    multinode: MultiNode, namespace: str, ledger: Ledger, powered_back: list[str]
) -> None:
    """What Kubernetes' non-graceful node shutdown asks of an admin once a node is known to be down: the
    out-of-service taint, after which the pods it held are deleted and their controllers may make them again.
    Two outcomes were measured, by a race in the training-operator: the lost worker's pod is deleted before it
    sees it Failed, makes it again on another node, and the run resumes from its backup and succeeds; or it
    sees the pod Failed first (the pod GC marks it so before deleting it) and fails the TFJob. Either way the
    run must end so, and say so."""
    name = "lost-node"
    _, victim = start(multinode, namespace, spread_run(name, epochs=EPOCHS))
    t0 = time.monotonic()
    multinode.nodes.node(victim).power_off()
    powered_back.append(victim)
    not_ready = wait_node_ready(multinode, victim, "Unknown", timeout=120)
    multinode.cluster.kubectl("taint", "node", victim, OUT_OF_SERVICE)
    st, models, loads = finish(multinode, namespace, name)
    took = time.monotonic() - t0
    message = st.get("message") or ""
    if st.get("phase") == "Succeeded":
        ok = models == 1 and bool(loads)
        sees = (f"Succeeded {took:.0f} s after the cut (NotReady after {not_ready:.0f} s): the worker made again "
                f"on another node, resumed from the backup on the shared volume, one model")  # fmt: skip
    else:
        ok = f"worker {name}-worker-1 on node {victim} " in message
        sees = f"Failed {took:.0f} s after the cut (NotReady after {not_ready:.0f} s): {message}"
    record(ledger, "a worker's node powered off (kubelet, containerd, flannel, every container), then tainted "
           "out-of-service by an admin (several nodes)", ok, st, models, sees,
           not_ready_seconds=round(not_ready, 1), seconds=round(took, 1))  # fmt: skip
    print(f"power-off + out-of-service: {sees}")
    assert ok, st


def test_a_workers_node_powered_off_and_left_fails_the_run_naming_the_node(
    multinode: MultiNode, namespace: str, ledger: Ledger, powered_back: list[str]
) -> None:
    """Without the admin's taint the lost worker's pod stays Terminating (its kubelet is gone), the training-operator
    cannot make it again, and the chief gives up on its peer: the run fails, and must say where and why."""
    name = "left-node"
    _, victim = start(multinode, namespace, spread_run(name, epochs=EPOCHS))
    t0 = time.monotonic()
    multinode.nodes.node(victim).power_off()
    powered_back.append(victim)
    st, models, _ = finish(multinode, namespace, name)
    took = time.monotonic() - t0
    message = st.get("message") or ""
    names_it = f"worker {name}-worker-1 on node {victim} deleted by the taint manager" in message
    ok = st.get("phase") == "Failed" and names_it
    record(ledger, "a worker's node powered off and left NotReady (several nodes)", ok, st, models,
           f"Failed {took:.0f} s after the cut: {message}", failed_seconds=round(took, 1))  # fmt: skip
    print(f"power-off, no taint: {st.get('phase')} {took:.1f} s after the cut: {message}")
    assert ok, st


def test_a_workers_node_drained_resumes_elsewhere_or_fails_naming_the_node_and_the_drain(
    multinode: MultiNode, namespace: str, ledger: Ledger
) -> None:
    """The drained worker's pod is evicted (SIGTERM: the trainer stops at once, its backup kept) and deleted. Two
    outcomes were measured, by a race in the training-operator: it saw the pod Failed (the kubelet reports that
    before the pod is gone) and failed the TFJob, or it saw the pod gone and made it again on another node, where
    it resumed from the backup. Either way the run must end so, and say so."""
    name = "drained"
    _, victim = start(multinode, namespace, spread_run(name, epochs=EPOCHS))
    t0 = time.monotonic()
    try:
        multinode.cluster.kubectl("drain", victim, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s",
                                  timeout=200)  # fmt: skip
        st, models, loads = finish(multinode, namespace, name)
    finally:
        multinode.cluster.kubectl("uncordon", victim, check=False)
    took = time.monotonic() - t0
    message = st.get("message") or ""
    if st.get("phase") == "Succeeded":
        ok = models == 1 and bool(loads)
        sees = f"Succeeded {took:.0f} s after the drain began: the worker made again on another node, resumed"
    else:
        ok = f"worker {name}-worker-1 on node {victim} evicted through the Eviction API (kubectl drain" in message
        sees = f"Failed {took:.0f} s after the drain began: {message}"
    record(ledger, "a worker's node drained with kubectl drain (several nodes)", ok, st, models, sees,
           seconds=round(took, 1))  # fmt: skip
    print(f"drain: {sees}")
    assert ok, st


def test_the_node_of_a_readwriteonce_run_powered_off_fails_it_naming_the_node_and_claims_no_model(
    multinode: MultiNode, namespace: str, ledger: Ledger, powered_back: list[str]
) -> None:
    """The default claim (ReadWriteOnce, the node's own disk) keeps every worker on its volume's node; that node goes
    away with the backup on its disk, and an admin declares it out of service (without that, measured by hand, the
    run fails the same way, its pods left Terminating). No worker can start elsewhere (the volume is bound to the
    node), so the run must fail naming the node, and claim no model."""
    name = "lost-volume"
    victim, _ = start(multinode, namespace, one_node_run(name, epochs=EPOCHS))
    t0 = time.monotonic()
    multinode.nodes.node(victim).power_off()
    powered_back.append(victim)
    wait_node_ready(multinode, victim, "Unknown", timeout=120)
    multinode.cluster.kubectl("taint", "node", victim, OUT_OF_SERVICE)
    st = multinode.real.wait_terminal(namespace, name, timeout=600)
    took = time.monotonic() - t0
    message = st.get("message") or ""
    ok = st.get("phase") == "Failed" and f" on node {victim} " in message and "model" not in st
    record(ledger, "the node of a ReadWriteOnce run's volume and of both its workers powered off, then tainted "
           "out-of-service by an admin (several nodes)",
           ok, st, 0, f"Failed {took:.0f} s after the cut, no model claimed: {message}",
           failed_seconds=round(took, 1))  # fmt: skip
    print(f"ReadWriteOnce node powered off: {st.get('phase')} {took:.1f} s after the cut: {message}")
    assert ok, st
