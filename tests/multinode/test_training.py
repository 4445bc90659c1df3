"""A run across nodes: MultiWorkerMirroredStrategy's all-reduce over the pod network between two nodes, the run's
volume on the class every node mounts; and what the default ReadWriteOnce volume does with several nodes."""

from __future__ import annotations

import time
from typing import Any

from support.multinode import MultiNode, claim_dir, one_node_run, pv_node, spread_run, worker_nodes
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


def test_a_readwriteonce_run_keeps_its_workers_on_its_volumes_node(multinode: MultiNode, namespace: str) -> None:
    """The default claim is ReadWriteOnce on a node's own disk: the scheduler puts every worker on the node its
    volume was made on (the PV's node affinity), and the run trains there."""
    nodes, st = train(multinode, namespace, one_node_run("one-node"), "ReadWriteOnce")
    assert st["phase"] == "Succeeded", st
    pv = multinode.cluster.kubectl_json("get", "pvc", st["pvc"], "-n", namespace)["spec"]["volumeName"]
    assert nodes == [pv_node(multinode, pv)] * 2, (nodes, pv)
