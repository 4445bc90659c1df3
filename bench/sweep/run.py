"""Early stopping's worth, on the real node (issue 42, item 6): the same sweep of 8 trials with the median rule and
without it, one after the other, on the same node and operator.

    python -m bench.sweep.run [--trials 8] [--epochs 12] [--lr-min X --lr-max Y]
                              [--rule halving [--min-epochs 2] [--factor 3]] [--name results]
                                                  (`make bench-sweep`, root; the images built: `make images`)

Both sweeps are examples/sweep-digits.yaml's (the built-in cnn on digits, 2 workers a trial, 2 trials at a time, the
same seed, so the same 8 points), with --epochs each; one keeps its earlyStopping (median, warm-up 2 epochs, 2
finished trials; or with --rule halving, successive halving from epoch --min-epochs, 1 in --factor going on), the
other has none. Measured for each: the wall time from creation to Succeeded, the best trial and its value, the
trials stopped and each trial's curve as the sweep's status holds it (another rule can be tried on paper against
them; a run's early epochs differ from another's, its final values do not). --lr-min/--lr-max widen the learning
rate's range (the example's: 1e-4 to 3e-2, where every trial ends near the best): what early stopping saves depends
on how many trials are weak, as when a range of several decades is searched; such a sweep may fail trials (a loss
gone NaN), so both sweeps let every trial fail. The goal is on the ratio of the two wall times (<= 0.6) and the
difference of the best values (<= 0.01). Writes bench/sweep/<name>.json and .md; nothing here is a timed test.
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.support.node import RealNode, start_real_node

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
EXAMPLE = REPO / "examples" / "sweep-digits.yaml"
NAMESPACE = "bench-sweep"
POLL = 3.0


def sweep(name: str, trials: int, epochs: int, early: bool, lr: tuple[float, float] | None = None,
          halving: dict[str, int] | None = None) -> dict[str, Any]:  # fmt: skip
    doc = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    doc["metadata"] = {"name": name, "namespace": NAMESPACE}
    doc["spec"]["trials"] = trials
    doc["spec"]["template"]["spec"]["training"]["epochs"] = epochs
    if lr is not None:
        doc["spec"]["space"]["learningRate"] = {"logUniform": {"min": lr[0], "max": lr[1]}}
        doc["spec"]["maxFailedTrials"] = trials
    if not early:
        doc["spec"].pop("earlyStopping", None)
    elif halving is not None:
        doc["spec"]["earlyStopping"] = {"halving": dict(halving)}
    return doc


def status(node: RealNode, name: str) -> dict[str, Any]:
    return node.cluster.kubectl_json("get", "dts", name, "-n", NAMESPACE).get("status") or {}


def run_one(node: RealNode, doc: dict[str, Any], timeout: float) -> dict[str, Any]:
    name = doc["metadata"]["name"]
    node.cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    start, st = time.monotonic(), {}
    while time.monotonic() - start < timeout:
        st = status(node, name)
        if st.get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(POLL)
    wall = time.monotonic() - start
    print(f"{name}: {st.get('phase')} in {wall:.0f} s: {st.get('message')}", flush=True)
    trials = st.get("trials") or []
    return {"name": name, "phase": st.get("phase"), "message": st.get("message"), "wall_seconds": round(wall, 1),
            "best": st.get("best"), "counts": st.get("counts"),
            "trials": [{"run": t["run"], "phase": t.get("phase"), "point": t.get("point"), "final": t.get("final"),
                        "epochs_seen": (t.get("curve") or [[0]])[-1][0], "reason": t.get("reason"),
                        "curve": t.get("curve")}
                       for t in trials]}  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    early, full = result["early"], result["full"]
    space = result.get("learningRate") or "the example's"
    lines = [f"# Sweep benchmark ({result['when']})", "",
             f"{result['trials']} trials of examples/sweep-digits.yaml, {result['epochs']} epochs each, 2 at a time, "
             f"learning rate log-uniform over {space}, on the real node (2 cores).", "",
             "| sweep | phase | wall s | best run | best value | stopped |", "|---|---|---|---|---|---|"]  # fmt: skip
    for r in (early, full):
        best = r.get("best") or {}
        lines.append(f"| {r['name']} | {r['phase']} | {r['wall_seconds']} | {best.get('run', '-')} | "
                     f"{best.get('value', '-')} | {(r.get('counts') or {}).get('stopped', 0)} |")  # fmt: skip
    rule = result.get("rule", "median")
    if result.get("halving"):
        rule += " (from epoch {minEpochs}, 1 in {reductionFactor} goes on)".format(**result["halving"])
    lines += ["", f"Wall time ratio ({rule} rule / none): **{result['ratio']}** (goal <= 0.6); best values differ by "
              f"**{result['best_difference']}** (goal <= 0.01)."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--lr-min", type=float)
    parser.add_argument("--lr-max", type=float)
    parser.add_argument("--rule", choices=("median", "halving"), default="median")
    # The CRD's bounds (earlyStopping.halving), refused here in one line rather than by kubectl apply mid-bench.
    parser.add_argument("--min-epochs", type=int, default=2, choices=range(1, 10001), metavar="1..10000",
                        help="halving: the first rung")
    parser.add_argument("--factor", type=int, default=3, choices=range(2, 11), metavar="2..10",
                        help="halving: 1 in this many goes on at each rung")
    parser.add_argument("--name", default="results")
    args = parser.parse_args()
    lr = (args.lr_min, args.lr_max) if args.lr_min and args.lr_max else None
    halving = {"minEpochs": args.min_epochs, "reductionFactor": args.factor} if args.rule == "halving" else None
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp, start_real_node(Path(tmp)) as node:
        node.cluster.kubectl("create", "namespace", NAMESPACE, check=False)
        early = run_one(node, sweep("sweep-early", args.trials, args.epochs, True, lr, halving), args.timeout)
        full = run_one(node, sweep("sweep-full", args.trials, args.epochs, False, lr), args.timeout)
        node.cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
    values = [(r.get("best") or {}).get("value") for r in (early, full)]
    result = {"when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "trials": args.trials, "epochs": args.epochs,
              "learningRate": f"{lr[0]:g} to {lr[1]:g}" if lr else None, "rule": args.rule, "halving": halving,
              "early": early,
              "full": full,
              "ratio": round(early["wall_seconds"] / full["wall_seconds"], 3),
              "best_difference": round(abs(values[0] - values[1]), 4) if None not in values else None}  # fmt: skip
    (HERE / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (HERE / f"{args.name}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
