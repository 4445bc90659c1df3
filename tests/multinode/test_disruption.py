"""Issue 41's measure, on three real nodes: a run training 20 epochs, the node of a worker drained at epoch 5 (and
uncordoned after, as an upgrade does), then the node of a worker powered off once the resumed attempt has ended an
epoch of its own (declared out of service by an admin once NotReady), ends Succeeded, every epoch ended once across
its attempts, its model loading and scoring as the run reported; its status names what happened when the operator
resumed it (status.disruptions).

Both moments are read from the chief's log on the shared volume, not from status.progress: the status lags by its
read interval, and a CI run drained at "epoch 5" of the status evicted at epoch 10, so the resumed attempt ended
before the power-off it waited for.

The one run proves what two runs of tests/multinode/test_node_faults.py did until 2026-12-06 (a drain alone, a
power-off then the out-of-service taint alone: 94 s and 147 s of CI's warm run), and records their two rows of the
reliability ledger beside its own, each fault's time from its own moment."""

from __future__ import annotations

import time
from typing import Any

from reliability.ledger import Ledger, Record, results_path
from support.multinode import (
    OUT_OF_SERVICE,
    MultiNode,
    epochs_ended,
    finish,
    spread_run,
    wait_node_ready,
    worker_nodes,
)
from support.wait import wait_for

EPOCHS = 20


def at_epoch(multinode: MultiNode, namespace: str, name: str, epoch: int) -> None:
    """Once the chief's log on the volume has ended `epoch` (read directly: status.progress lags by its read
    interval, several epochs of this run on a fast machine)."""

    def reached() -> bool:
        return max(ended_so_far(multinode, namespace, name), default=0) >= epoch

    wait_for(reached, timeout=600, interval=0.25, what=f"{name} at epoch {epoch}")


def ended_so_far(multinode: MultiNode, namespace: str, name: str) -> list[int]:
    try:
        return epochs_ended(multinode, namespace, name)
    except (FileNotFoundError, KeyError):
        return []


def trained_again(multinode: MultiNode, namespace: str, name: str, after: int) -> None:
    """Once the run, started again (by the operator's resume or in place by the training-operator), has ended an
    epoch: the chief's log holds more than `after` epoch ends."""

    def more() -> bool:
        phase = multinode.real.run_status(namespace, name).get("phase")
        assert phase not in ("Succeeded", "Failed"), f"{name} ended {phase} before its second disruption"
        return len(ended_so_far(multinode, namespace, name)) > after

    wait_for(more, timeout=600, interval=0.25, what=f"{name} training again")


def test_a_drain_then_a_lost_node_end_in_one_model_every_epoch_once(
    multinode: MultiNode, namespace: str, powered_back: list[str]
) -> None:
    name = "twice"
    multinode.real.apply(namespace, spread_run(name, epochs=EPOCHS))
    t0 = time.monotonic()
    _, drained = worker_nodes(multinode, namespace, name)
    at_epoch(multinode, namespace, name, 5)
    drain_began = time.monotonic() - t0
    try:
        multinode.cluster.kubectl("drain", drained, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s",
                                  timeout=200)  # fmt: skip
    finally:
        multinode.cluster.kubectl("uncordon", drained, check=False)
    drain_done, at_drain = time.monotonic() - t0, ended_so_far(multinode, namespace, name)

    trained_again(multinode, namespace, name, len(at_drain))
    back = time.monotonic() - t0 - drain_began
    resumes_after_drain = multinode.real.run_status(namespace, name).get("resumes") or 0
    _, lost = worker_nodes(multinode, namespace, name)
    cut, cut_epoch = time.monotonic(), max(ended_so_far(multinode, namespace, name))
    multinode.nodes.node(lost).power_off()
    powered_back.append(lost)
    not_ready = wait_node_ready(multinode, lost, "Unknown", timeout=120)
    multinode.cluster.kubectl("taint", "node", lost, OUT_OF_SERVICE)

    st, models, loads = finish(multinode, namespace, name)
    took, after_cut = time.monotonic() - t0, time.monotonic() - cut
    ended = epochs_ended(multinode, namespace, name)
    said = [d.get("message") or "" for d in st.get("disruptions") or []]
    print(f"drain of {drained} done {drain_done:.0f} s in, its epochs then {at_drain}, {lost} cut "
          f"{cut - t0:.0f} s in at epoch {cut_epoch}; {st.get('phase')} after "
          f"{took:.0f} s, resumes {st.get('resumes') or 0}: {said}; epochs ended {ended}")  # fmt: skip
    assert st.get("phase") == "Succeeded", st
    assert ended == list(range(1, EPOCHS + 1)), f"each epoch once across the attempts: {ended}"
    assert models == 1 and loads, (models, loads)
    assert all(f" on node {drained} " in m or f" on node {lost} " in m for m in said), said
    resumes = st.get("resumes") or 0
    book = Ledger()
    book.add(row("a worker's node drained at epoch 5 of 20, then a worker's node powered off once the resumed "
                 "attempt ended an epoch and declared out of service (several nodes)",
                 f"Succeeded {took:.0f} s after apply, {resumes} resume(s) by the operator (the others in place by "
                 f"the training-operator), epochs 1-{EPOCHS} once each, one model",
                 seconds=round(took, 1), resumes=resumes, disruptions=said))  # fmt: skip
    book.add(row("a worker's node drained with kubectl drain (several nodes)",
                 f"training again {back:.0f} s after the drain began ({resumed(resumes_after_drain)}); the run then "
                 f"Succeeded with one model, each epoch once (below)",
                 seconds=round(back, 1), resumes=resumes_after_drain))  # fmt: skip
    book.add(row("a worker's node powered off (kubelet, containerd, flannel, every container), then tainted "
                 "out-of-service by an admin (several nodes)",
                 f"Succeeded {after_cut:.0f} s after the cut (NotReady after {not_ready:.0f} s), "
                 f"{resumed(resumes - resumes_after_drain)}, one model, each epoch once",
                 not_ready_seconds=round(not_ready, 1), seconds=round(after_cut, 1),
                 resumes=resumes - resumes_after_drain))  # fmt: skip
    book.save(results_path())


def resumed(count: int) -> str:
    """How the run came back: the operator's resumes, or the training-operator's pod made again in place."""
    return f"resumed by the operator ({count}x)" if count else "the pod made again in place by the training-operator"


def row(case: str, sees: str, **detail: Any) -> Record:
    """A case this test passed (it asserted the run's end above): Succeeded, one model, each epoch once."""
    return Record(area="fault", case=case, tried=1, correct=1, duplicated=0, user_sees=sees,
                  detail={"phase": "Succeeded", "models": 1, **detail})  # fmt: skip
