"""A run across nodes: MultiWorkerMirroredStrategy's all-reduce over the pod network between two nodes, the run's
volume on the class every node mounts. What the default ReadWriteOnce volume does with several nodes (every worker on
its volume's node) is test_node_faults.py's ReadWriteOnce run's, before its node is cut off."""

from __future__ import annotations

import time
from typing import Any

from support.multinode import MultiNode, claim_dir, spread_run, worker_nodes
from support.node import score_model


def train(multinode: MultiNode, namespace: str, doc: dict[str, Any], shape: str) -> tuple[list[str], dict[str, Any]]:
    """The run applied and ended: its workers' nodes while they ran, and its final status (time and speed printed)."""
    name = doc["metadata"]["name"]
    t0 = time.monotonic()
    multinode.real.apply(namespace, doc)
    nodes = worker_nodes(multinode, namespace, name)
    st = multinode.real.wait_terminal(namespace, name, timeout=600)
    print(f"{shape} on {nodes}: kubectl apply -> {st['phase']} in {time.monotonic() - t0:.0f} s, "
          f"{st.get('metrics', {}).get('examplesPerSecond')} examples/s")  # fmt: skip
    return nodes, st


def test_workers_on_two_nodes_train_together_and_the_model_scores(multinode: MultiNode, namespace: str) -> None:
    name = "spread"
    nodes, st = train(multinode, namespace, spread_run(name), "spread")
    assert len(set(nodes)) == 2, nodes
    assert st["phase"] == "Succeeded", st
    model = claim_dir(multinode, namespace, st["model"]["claim"]) / "models" / name / "1"
    accuracy = score_model(model)
    assert accuracy >= 0.85, accuracy
    assert abs(accuracy - st["metrics"]["accuracy"]) < 0.02, (accuracy, st["metrics"])

