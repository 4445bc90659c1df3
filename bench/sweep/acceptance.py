"""Issue 42's acceptance run, on the real node: examples/sweep-wine.yaml, 8 trials over the width and learning rate of
a user's own Keras file (the wine classifier, its width a param), 2 at a time through a Kueue queue, the weak trials
stopped early, with an MLflow server named by the admin; then the best trial's model copied out and scored, its
params in the sweep's status and in MLflow, and `dtr sweep plot` drawing every trial.

    python -m bench.sweep.acceptance [--epochs 40]    (root; `make images`, `make setup-mlflow`; not a timed test)

Writes bench/sweep/acceptance.json and .md (what was seen, with times); the plot goes to .dtr/sweep-acceptance.png
(drawn again by each run, not committed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from devcluster import kueue
from devcluster.node import NODE_IP
from support import mlflow_server
from support.node import TRAINER_PYTHON, RealNode, dtr, start_real_node

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
WINE = REPO / "examples" / "own-model" / "wine" / "wine_model.py"  # its width is a param: ctx.params["width"]
EXAMPLE = REPO / "examples" / "sweep-wine.yaml"
HOST = REPO / "tests" / "node" / "own_model_host.py"
NS, QUEUE, SWEEP = "accept", "team", "wine-width"
PLOT = REPO / ".dtr" / "sweep-acceptance.png"
CLAIM = "my-data"  # the example's: its data, and each trial's model


def sweep_doc(epochs: int) -> dict[str, Any]:
    """examples/sweep-wine.yaml through the namespace's Kueue queue (with the CPU requests its quota counts)."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    template = doc["spec"]["template"]["spec"]
    assert template["storage"]["claimName"] == CLAIM, "the example's claim changed: update CLAIM"
    template.update(queueName=QUEUE, resources={"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}})
    template["training"]["epochs"] = epochs
    assert doc["metadata"]["name"] == SWEEP, "the example's name changed: update SWEEP"
    return doc


def queues(node: RealNode) -> float:
    """Kueue, a ClusterQueue of 2 CPUs (two trials of two 500m workers), the namespace's LocalQueue."""
    seconds = kueue.install(node.cluster.kubeconfig, log=print)
    for doc in ({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
                {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "sweeps"},
                 "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                     {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "2"}]}]}]}}):  # fmt: skip
        node.apply("default", doc)
    node.apply(NS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": QUEUE},
                    "spec": {"clusterQueue": "sweeps"}})  # fmt: skip
    return seconds


def tracked_by(node: RealNode, uri: str) -> None:
    """The admin names the MLflow server (the operator's --mlflow-tracking-uri, by its environment variable)."""
    kubectl = node.cluster.kubectl
    kubectl("-n", "dtr-system", "set", "env", "deployment/dtr-operator", f"DTR_MLFLOW_TRACKING_URI={uri}")
    kubectl("-n", "dtr-system", "rollout", "status", "deployment/dtr-operator", "--timeout=180s", timeout=200)


def data_and_code(node: RealNode, tmp: Path) -> None:
    subprocess.run([TRAINER_PYTHON, str(HOST), "data", str(tmp / "data")], check=True, capture_output=True)
    put = dtr(node, NS, "data", "put", "--create", "1Gi", CLAIM, str(tmp / "data" / "put" / "wine.npz"))
    assert put.returncode == 0, put.stdout + put.stderr
    node.cluster.kubectl("create", "configmap", "wine-code", "-n", NS, f"--from-file={WINE}")


def trials_of(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"run": t["run"], "phase": t.get("phase"), "point": t.get("point"), "final": t.get("final"),
             "last_epoch": (t.get("curve") or [[None]])[-1][0], "reason": t.get("reason")}
            for t in status.get("trials") or []]  # fmt: skip


def mlflow_runs(uri: str) -> list[dict[str, Any]]:
    found = []
    for run in mlflow_server.runs(uri, SWEEP):
        tags, params = mlflow_server.as_dict(run["data"]["tags"]), mlflow_server.as_dict(run["data"]["params"])
        found.append({"name": run["info"]["run_name"], "status": run["info"]["status"],
                      "trial": tags.get("dtr.trial"), "width": params.get("params.width"),
                      "learningRate": params.get("learningRate"),
                      "val_accuracy_epochs": len(mlflow_server.metric_history(uri, run["info"]["run_id"],
                                                                                "val_accuracy"))})  # fmt: skip
    return sorted(found, key=lambda r: r["name"])


def accept(node: RealNode, tmp: Path, epochs: int) -> dict[str, Any]:
    node.create_restricted_namespace(NS)
    result: dict[str, Any] = {"kueue_install_seconds": round(queues(node), 1)}
    server = mlflow_server.start(tmp, host=NODE_IP)
    try:
        tracked_by(node, server.uri)
        data_and_code(node, tmp)
        (tmp / "sweep.yaml").write_text(json.dumps(sweep_doc(epochs)))
        started = time.monotonic()
        run = dtr(node, NS, "sweep", "start", str(tmp / "sweep.yaml"), "--wait", timeout=3000)
        result["sweep_seconds"] = round(time.monotonic() - started, 1)
        result["sweep_exit"] = run.returncode
        status = node.cluster.kubectl_json("get", "dts", SWEEP, "-n", NS).get("status") or {}
        result.update(phase=status.get("phase"), message=status.get("message"), best=status.get("best"),
                      counts=status.get("counts"), trials=trials_of(status))  # fmt: skip
        workloads = node.cluster.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", NS)["items"]
        result["kueue_workloads"] = len(workloads)
        best = (status.get("best") or {}).get("run")
        if best:
            got = dtr(node, NS, "model", "get", best, str(tmp / "best"))
            scored = subprocess.run([TRAINER_PYTHON, str(HOST), "score", "wine", str(tmp / "best"),
                                     str(tmp / "data" / "kept")], capture_output=True, text=True, check=False)
            result["best_model"] = {"get_exit": got.returncode, "score": scored.stdout.strip()[-500:],
                                    "score_exit": scored.returncode}  # fmt: skip
        result["mlflow"] = mlflow_runs(server.uri)
        PLOT.parent.mkdir(exist_ok=True)
        plot = dtr(node, NS, "sweep", "plot", SWEEP, "-o", str(PLOT))
        said = (plot.stdout + plot.stderr).strip().replace(f"{REPO}/", "")  # the repository's path, not this machine's
        result["plot"] = {"exit": plot.returncode, "said": said[-300:]}
    finally:
        server.stop()
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# Sweep acceptance run ({result['when']})", "",
             f"{SWEEP}: 8 trials of the wine classifier's width and learning rate (tpe), 2 at a time through a "
             f"Kueue queue, {result['epochs']} epochs each, median rule (warm-up 3, 2 finished trials), MLflow on; "
             f"the real node (2 cores). Sweep: {result.get('phase')} in {result.get('sweep_seconds')} s: "
             f"{result.get('message')}.", "",
             "| trial | phase | point | last epoch seen | final |", "|---|---|---|---|---|"]  # fmt: skip
    for t in result.get("trials") or []:
        point = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in (t["point"] or {}).items())
        lines.append(f"| {t['run']} | {t['phase']} | {point} | {t['last_epoch']} | {t['final']} |")
    lines += ["", f"Best model copied out and scored on held-back wines: {result.get('best_model')}",
              f"Kueue workloads made: {result.get('kueue_workloads')}; MLflow runs in experiment {SWEEP}: "
              f"{len(result.get('mlflow') or [])}; dtr sweep plot: {result.get('plot')}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sweep-accept-") as tmp, start_real_node(Path(tmp) / "node") as node:
        result = {"when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "epochs": args.epochs,
                  **accept(node, Path(tmp), args.epochs)}  # fmt: skip
    (HERE / "acceptance.json").write_text(json.dumps(result, indent=1) + "\n")
    (HERE / "acceptance.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
