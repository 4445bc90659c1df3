"""Training across nodes against training on one node, same run, on three real nodes (devcluster/cluster.py).

    python -m bench.multinode.run [--rounds 3] [--epochs 16]   (the repository root; `make bench-multinode`, root)

Each round trains examples/digits-spread.yaml twice, the order alternating: its two workers on two nodes (a required
anti-affinity, the `shared-path` volume every node mounts), and the same run with a required pod *affinity* that
keeps both workers on one node (same class, same everything else). Reported, median of the rounds: the trainer's
examples per second (status.metrics, the last epoch) and kubectl apply -> Succeeded; the ratio spread / one node
is the cost of the all-reduce over the pod network between nodes (flannel host-gw through the host bridge), in one
run of the bench on a noisy machine. Uses DTR_CLUSTER_DIR's cluster, else starts one. Writes
bench/multinode/results.json and results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.multinode import spread_run, start_multinode, worker_nodes
from tests.support.node import restricted_namespace

HERE = Path(__file__).resolve().parent


def together(doc: dict[str, Any]) -> dict[str, Any]:
    """The run with its workers kept on one node: the anti-affinity term turned into an affinity term."""
    affinity = doc["spec"]["affinity"]
    affinity["podAffinity"] = affinity.pop("podAntiAffinity")
    return doc


def attempt(cluster: Any, namespace: str, shape: str, epochs: int, index: int) -> dict[str, Any]:
    name = f"{shape}-{index}"
    doc = spread_run(name, epochs=epochs)
    if shape == "one-node":
        doc = together(doc)
    t0 = time.monotonic()
    cluster.real.apply(namespace, doc)
    nodes = worker_nodes(cluster, namespace, name)
    st = cluster.real.wait_terminal(namespace, name, timeout=900)
    took = time.monotonic() - t0
    if st.get("phase") != "Succeeded":
        raise SystemExit(f"{name} ended {st.get('phase')}: {st.get('message')}")
    return {"shape": shape, "name": name, "nodes": nodes, "seconds": round(took, 1),
            "examples_per_second": st["metrics"]["examplesPerSecond"], "accuracy": st["metrics"]["accuracy"]}


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    def med(shape: str, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["shape"] == shape)

    ratio = med("spread", "examples_per_second") / med("one-node", "examples_per_second")
    lines = [
        "# Training across nodes against one node (`make bench-multinode`)",
        "",
        f"{meta['date']}, commit {meta['commit']}, {meta['cores']} cores, three nodes on this machine, load "
        f"{meta['load_before']:.2f} before, {meta['load_after']:.2f} after; {meta['rounds']} rounds, the order "
        f"alternating; examples/digits-spread.yaml, {meta['epochs']} epochs, 2 workers.",
        "",
        "| shape | examples/s (median) | apply -> Succeeded (median) | accuracy | by round (examples/s) |",
        "|---|---:|---:|---:|---|",
    ]
    for shape, words in (("spread", "two nodes"), ("one-node", "one node")):
        rounds = ", ".join(f"{r['examples_per_second']:.0f}" for r in rows if r["shape"] == shape)
        lines.append(f"| {words} | {med(shape, 'examples_per_second'):.0f} | {med(shape, 'seconds'):.1f} s | "
                     f"{med(shape, 'accuracy'):.4f} | {rounds} |")  # fmt: skip
    lines += ["", f"**Spread / one node: {ratio:.3f}** (examples per second, medians).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.multinode.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=16)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-multinode-") as tmp,
        start_multinode(Path(tmp)) as cluster,
        restricted_namespace(cluster.real, "bench-multinode") as namespace,
    ):
        for index in range(args.rounds):
            order = ("spread", "one-node") if index % 2 == 0 else ("one-node", "spread")
            for shape in order:
                row = attempt(cluster, namespace, shape, args.epochs, index)
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    commit = os.popen("git rev-parse --short HEAD").read().strip()
    meta = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit, "cores": os.cpu_count(),
            "load_before": load_before, "load_after": os.getloadavg()[0], "rounds": args.rounds,
            "epochs": args.epochs}  # fmt: skip
    (HERE / "results.json").write_text(json.dumps({"meta": meta, "attempts": rows}, indent=1) + "\n")
    (HERE / "results.md").write_text(report(rows, meta))
    print(report(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
