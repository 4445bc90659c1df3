"""Time to a model on the real node, side by side: the book's way (a plain TFJob running bench/e2e/book_mwms.py)
against the same training as a DistTrainingRun (examples/digits.yaml: same data, split, model, epochs, global batch,
image and TensorFlow; the plain TFJob's pods are the operator's own builders' pods with only the program changed).

    python -m bench.e2e.run [--rounds 3] [--epochs 8]      (from the repository root; `make bench-e2e`, root)

Each round runs both, one after the other, the order alternating. Every timestamp is the arrival of a watch event in
this process (runs, TFJobs) or the moment a poll (0.1 s) of the volume's directory on this machine finds the
model's saved_model.pb and fingerprint.pb. Reported, median of the rounds: apply -> model on disk; apply -> the
run's status says Succeeded (the DistTrainingRun) or the TFJob does (the book); examples per second over epochs
2..n from the chief's log timestamps (the first epoch traces); the model's accuracy on the held-out split; and the
operator's own share: apply -> TFJob created, TFJob Succeeded -> run Succeeded. Writes bench/e2e/results.json and
results.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from dtr_operator.builders import build_pvc, build_tfjob
from dtr_operator.spec import parse_run

from bench.operator.run import Api, Hub, Watch
from devcluster import node as realnode
from tests.support.node import RealNode, restricted_namespace, score_model, stamped_lines, start_real_node

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BOOK = HERE / "book_mwms.py"
EXAMPLE = REPO / "examples" / "digits.yaml"
SCRIPT_CONFIGMAP = "book-mwms"
POLL = 0.1
TRAIN_EXAMPLES = 1438  # digits' 1797 minus the 359 held out


@dataclass
class Attempt:
    way: str  # "book" or "dtr"
    name: str
    to_model: float
    to_succeeded: float
    examples_per_second: float
    accuracy: float
    to_tfjob: float | None = None  # the operator: apply -> TFJob created
    status_after_tfjob: float | None = None  # the operator: TFJob Succeeded -> run Succeeded


def run_doc(name: str, epochs: int) -> dict[str, Any]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"] = {"name": name}
    doc["spec"]["training"]["epochs"] = epochs
    doc["spec"]["export"]["modelName"] = name
    doc["spec"]["storage"]["reclaimPolicy"] = "Delete"
    return doc


def book_objects(name: str, namespace: str, image: str, epochs: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The TFJob and PVC the operator would build for the same run, running the book's script instead."""
    doc = run_doc(name, epochs)
    run = parse_run({**doc, "metadata": {"name": name, "namespace": namespace, "uid": "book"}}, image)
    tfjob, pvc = build_tfjob(run), build_pvc(run)
    assert pvc is not None
    for obj in (tfjob, pvc):
        obj["metadata"]["labels"] = {"app.kubernetes.io/name": "book-mwms"}  # not a run's: the operator ignores it
    training = doc["spec"]["training"]
    pod = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    pod["metadata"]["labels"] = {"app.kubernetes.io/name": "book-mwms"}
    container = pod["spec"]["containers"][0]
    container["command"] = ["python", f"/opt/book/{BOOK.name}"]
    container["args"] = ["--model-dir", f"/mnt/dtr/models/{name}", "--epochs", str(epochs),
                         "--batch-per-worker", str(training["batchSizePerWorker"]),
                         "--learning-rate", str(training["learningRate"])]  # fmt: skip
    container.setdefault("volumeMounts", []).append({"name": "book", "mountPath": "/opt/book", "readOnly": True})
    pod["spec"].setdefault("volumes", []).append({"name": "book", "configMap": {"name": SCRIPT_CONFIGMAP}})
    return tfjob, pvc


def tfjob_succeeded(obj: dict[str, Any]) -> str | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return "yes" if any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions) else None


def run_phase(obj: dict[str, Any]) -> str | None:
    status = obj.get("status") or {}
    return status.get("phase") if status.get("phase") != "Succeeded" or status.get("metrics") else None


def epoch_window(log: str, begins: Callable[[str], bool], ends: Callable[[str], bool]) -> float:
    """Seconds from the first line `begins` to the last line `ends`, by the container runtime's timestamps."""
    stamps = stamped_lines(log)
    start = next(t for t, text in stamps if begins(text))
    end = [t for t, text in stamps if ends(text)][-1]
    return end - start


class Bench:
    def __init__(self, node: RealNode, namespace: str, api: Api, epochs: int) -> None:
        self.node, self.ns, self.api, self.epochs = node, namespace, api, epochs
        self.hub = Hub()
        self.runs = Watch(api, self.hub, f"/apis/distml.dev/v1alpha1/namespaces/{namespace}/disttrainingruns")
        self.runs.keys["phase"] = run_phase
        self.tfjobs = Watch(api, self.hub, f"/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs")
        self.tfjobs.keys["succeeded"] = tfjob_succeeded
        self.image = realnode.image_names()[1]
        spec = yaml.safe_load(EXAMPLE.read_text())["spec"]
        self.global_batch = spec["training"]["batchSizePerWorker"] * spec["workers"]
        self.steps = TRAIN_EXAMPLES // self.global_batch  # what both programs run per epoch

    async def start(self) -> None:
        await self.api.call("POST", f"/api/v1/namespaces/{self.ns}/configmaps", {
            "metadata": {"name": SCRIPT_CONFIGMAP}, "data": {BOOK.name: BOOK.read_text()}})  # fmt: skip
        await self.runs.start()
        await self.tfjobs.start()

    async def model_on_disk(self, claim: str, name: str, t0: float) -> float:
        """Seconds from t0 until the version's saved_model.pb and fingerprint.pb are both on the volume."""
        while not (pv := await self.volume_name(claim)):
            await asyncio.sleep(POLL)
        version = self.node.node.storage / f"{pv}_{self.ns}_{claim}" / "models" / name / "1"
        while not ((version / "saved_model.pb").exists() and (version / "fingerprint.pb").exists()):
            await asyncio.sleep(POLL)
        return time.perf_counter() - t0

    async def volume_name(self, claim: str) -> str | None:
        """The claim's bound volume; None while the claim is missing (the operator has yet to create it) or unbound."""
        path = f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims?fieldSelector=metadata.name={claim}"
        listing = await self.api.call("GET", path)
        items = listing.get("items") or []
        return items[0]["spec"].get("volumeName") if items else None

    def chief_log(self, name: str) -> str:
        return self.node.logs(self.ns, f"{name}-worker-0", timestamps=True)

    def examples_per_second(self, log: str, begins: Callable[[str], bool], ends: Callable[[str], bool]) -> float:
        return self.steps * self.global_batch * (self.epochs - 1) / epoch_window(log, begins, ends)

    async def book(self, name: str) -> Attempt:
        tfjob, pvc = book_objects(name, self.ns, self.image, self.epochs)
        t0 = time.perf_counter()
        await self.api.call("POST", f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims", pvc)
        await self.api.call("POST", f"/apis/kubeflow.org/v1/namespaces/{self.ns}/tfjobs", tfjob)
        to_model = await self.model_on_disk(pvc["metadata"]["name"], name, t0)
        await self.hub.wait(lambda: (name, "succeeded=yes") in self.tfjobs.transitions, 900, f"{name} Succeeded")
        # Keras's verbose=2: "Epoch 2/8" as epoch 2 begins, "22/22 - 1s - loss: ..." as each epoch ends.
        eps = self.examples_per_second(self.chief_log(name), lambda t: t.startswith("Epoch 2/"),
                                       lambda t: t.startswith(f"{self.steps}/{self.steps} - "))  # fmt: skip
        accuracy = score_model(self.node.volume(self.ns, pvc["metadata"]["name"]) / "models" / name / "1")
        done = self.tfjobs.transitions[(name, "succeeded=yes")] - t0
        await self.delete(f"/apis/kubeflow.org/v1/namespaces/{self.ns}/tfjobs/{name}",
                          f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims/{pvc['metadata']['name']}")  # fmt: skip
        return Attempt("book", name, to_model, done, eps, accuracy)

    async def dtr(self, name: str) -> Attempt:
        t0 = time.perf_counter()
        await self.api.call("POST", f"/apis/distml.dev/v1alpha1/namespaces/{self.ns}/disttrainingruns",
                            run_doc(name, self.epochs))  # fmt: skip
        claim = f"{name}-data"
        to_model = await self.model_on_disk(claim, name, t0)
        await self.hub.wait(lambda: (name, "phase=Succeeded") in self.runs.transitions, 900, f"run {name} Succeeded")
        await self.hub.wait(lambda: (name, "succeeded=yes") in self.tfjobs.transitions, 60, f"TFJob {name} Succeeded")
        eps = self.examples_per_second(self.chief_log(name), lambda t: re.search(r"epoch 2/\d+ begin", t) is not None,
                                       lambda t: re.search(rf"epoch {self.epochs}/\d+ end", t) is not None)  # fmt: skip
        accuracy = score_model(self.node.volume(self.ns, claim) / "models" / name / "1")
        succeeded = self.runs.transitions[(name, "phase=Succeeded")]
        attempt = Attempt("dtr", name, to_model, succeeded - t0, eps, accuracy,
                          to_tfjob=self.tfjobs.first_seen[name] - t0,
                          status_after_tfjob=succeeded - self.tfjobs.transitions[(name, "succeeded=yes")])  # fmt: skip
        await self.delete(f"/apis/distml.dev/v1alpha1/namespaces/{self.ns}/disttrainingruns/{name}")
        return attempt

    async def delete(self, *paths: str) -> None:
        for path in paths:
            await self.api.call("DELETE", path)
        # Wait for the workers to go: the next attempt must not share the 2 CPUs with them.
        while (await self.api.call("GET", f"/api/v1/namespaces/{self.ns}/pods"))["items"]:
            await asyncio.sleep(0.5)


def median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def summary(attempts: list[Attempt]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for way in ("book", "dtr"):
        mine = [a for a in attempts if a.way == way]
        out[way] = {"to_model_s": median([a.to_model for a in mine]),
                    "to_succeeded_s": median([a.to_succeeded for a in mine]),
                    "examples_per_second": median([a.examples_per_second for a in mine]),
                    "accuracy": median([a.accuracy for a in mine])}  # fmt: skip
    dtr = [a for a in attempts if a.way == "dtr"]
    out["dtr"]["operator_apply_to_tfjob_s"] = median([a.to_tfjob for a in dtr if a.to_tfjob is not None])
    out["dtr"]["operator_tfjob_to_status_s"] = median([a.status_after_tfjob for a in dtr
                                                       if a.status_after_tfjob is not None])  # fmt: skip
    out["ratio_to_model"] = round(out["dtr"]["to_model_s"] / out["book"]["to_model_s"], 3)
    return out


async def measure_on(node: RealNode, namespace: str, rounds: int, epochs: int) -> list[Attempt]:
    server = yaml.safe_load(node.cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert node.cluster.dir is not None
    api = Api(server, node.cluster.dir / "pki")
    bench = Bench(node, namespace, api, epochs)
    attempts: list[Attempt] = []
    try:
        await bench.start()
        for r in range(rounds):
            for way in (("book", "dtr") if r % 2 == 0 else ("dtr", "book")):
                attempt = await (bench.book(f"book-{r}") if way == "book" else bench.dtr(f"dtr-{r}"))
                print(f"round {r} {way}: model {attempt.to_model:.1f} s, succeeded {attempt.to_succeeded:.1f} s, "
                      f"{attempt.examples_per_second:.0f} ex/s, accuracy {attempt.accuracy:.4f}", flush=True)
                attempts.append(attempt)
    finally:
        await bench.runs.stop()
        await bench.tfjobs.stop()
        await api.close()
    return attempts


def markdown(r: dict[str, Any]) -> str:
    s, b, d = r["summary"], r["summary"]["book"], r["summary"]["dtr"]
    rows = [f"| {a['way']} | {a['name']} | {a['to_model']:.1f} | {a['to_succeeded']:.1f} | "
            f"{a['examples_per_second']:.0f} | {a['accuracy']:.4f} |" for a in r["attempts"]]  # fmt: skip
    return "\n".join([
        "# Time to a model: the book's plain TFJob vs a DistTrainingRun, on the real node",
        "",
        f"`{r['command']}`, {r['finished']}, `{r['commit']}`, {r['cpus']} CPUs, load average "
        f"{r['loadavg_before'][0]} before, {r['loadavg_after'][0]} after; {r['rounds']} rounds of {r['epochs']} "
        "epochs, 2 workers, digits, global batch 64. Median of the rounds:",
        "",
        "| | book (plain TFJob) | DistTrainingRun |",
        "|---|---:|---:|",
        f"| apply -> model on disk | {b['to_model_s']} s | {d['to_model_s']} s (x{s['ratio_to_model']}) |",
        f"| apply -> Succeeded | {b['to_succeeded_s']} s | {d['to_succeeded_s']} s |",
        f"| examples/s, epochs 2..n | {b['examples_per_second']} | {d['examples_per_second']} |",
        f"| held-out accuracy | {b['accuracy']} | {d['accuracy']} |",
        f"| operator: apply -> TFJob created | | {d['operator_apply_to_tfjob_s']} s |",
        f"| operator: TFJob Succeeded -> run Succeeded | | {d['operator_tfjob_to_status_s']} s |",
        "",
        "| way | attempt | model (s) | Succeeded (s) | examples/s | accuracy |",
        "|---|---|---:|---:|---:|---:|",
        *rows,
        "",
    ])  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args(argv)
    if os.geteuid() != 0 and not os.environ.get("DTR_NODE_DIR"):
        print("bench-e2e starts a real node and needs root (or DTR_NODE_DIR of a running one)", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    images = realnode.built_image_ids().split()
    with (
        tempfile.TemporaryDirectory(prefix="dtr-bench-e2e-") as tmp,
        start_real_node(Path(tmp)) as node,
        restricted_namespace(node, "bench-e2e") as namespace,
    ):
        attempts = asyncio.run(measure_on(node, namespace, args.rounds, args.epochs))
    commit = os.popen(f"git -C {REPO} rev-parse --short HEAD").read().strip()
    result = {
        "command": "python -m bench.e2e.run " + " ".join(argv), "commit": commit,
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "rounds": args.rounds, "epochs": args.epochs,
        "images": dict(zip(("operator", "trainer"), images, strict=False)),
        "summary": summary(attempts), "attempts": [vars(a) for a in attempts],
    }  # fmt: skip
    (HERE / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (HERE / "results.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
