"""Scaling in pods against its ceiling, on the real node (issue 30, item 2).

    python -m bench.scaling.run [--rounds 2] [--batches 64,256] [--name results]   (`make bench-scaling`, root)

Every worker is a pod of the trainer image with a CPU limit of 1 (--cpu; its request 900m, so that two fit beside
the node's own pods) on this 2-core machine. For
each per-worker batch, three shapes, run one after the other, the order turning each round:

- **alone**: one 1-worker job, the other core idle;
- **pair**: two 1-worker jobs at once, each on its own (what two workers would do with no communication:
  the same two cores busy, the same memory traffic);
- **mwms**: one 2-worker job, MultiWorkerMirroredStrategy over the pod network.

and two programs in each shape:

- **trainer**: the trainer as the operator runs it (its builders' TFJob and PVC for a run of the built-in cnn on
  `synthetic` data, a fixed stepsPerEpoch); throughput over epochs 2..n from the chief's log timestamps (the
  first epoch traces);
- **ceiling**: bench/scaling/ceiling.py: the same model's gradients on a batch in memory, all-reduced once per
  step, nothing else (no input, metrics, Keras loop or checkpoint); it also times the all-reduce alone.

Efficiency = mwms global examples/s / the pair's sum (the contention-matched baseline, as bench/trainer's);
also against 2 x alone. The trainer's efficiency / the ceiling's is the ratio the issue's goal is on (>= 0.95),
and at a per-worker batch of 256 the trainer's efficiency itself (>= 0.90). A step's time is attributed from the
same run: compute (a pair job's step), synchronisation (the ceiling's mwms step less that: the all-reduce and
waiting for the peer; the all-reduce timed alone is shown beside it), and the trainer's own (its mwms step less
the ceiling's: input, Keras' loop, metrics).
Writes bench/scaling/<name>.json and .md; nothing here is a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

from dtr_operator.builders import build_pvc, build_tfjob
from dtr_operator.spec import parse_run

from devcluster import node as realnode
from tests.support.node import RealNode, restricted_namespace, stamped_lines, start_real_node

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CEILING = HERE / "ceiling.py"
CONFIGMAP = "scaling-ceiling"
LABELS = {"app.kubernetes.io/name": "bench-scaling"}  # not a run's: the operator leaves these TFJobs alone
EPOCHS = 4
SHAPES = ("alone", "pair", "mwms")
PROGRAMS = ("trainer", "ceiling")
POLL = 3.0  # seconds between looks at a TFJob: each kubectl takes a tenth of a core from the workers measured


@dataclass(frozen=True)
class Config:
    batch: int  # per worker
    trainer_steps: int  # per epoch
    ceiling_steps: int

    @staticmethod
    def for_batch(batch: int) -> Config:
        """About 6 s per epoch and 20 s of ceiling steps on one of these cores (cnn: ~1000 examples/s)."""
        return Config(batch, trainer_steps=max(10, 6400 // batch), ceiling_steps=max(40, 20000 // batch))


@dataclass
class Job:
    """One job's measurement: global examples/s, the seconds of a step, the window it was measured in."""

    program: str
    shape: str
    batch: int
    name: str
    workers: int
    examples_per_second: float
    step_s: float
    window: tuple[float, float]  # epoch seconds (the trainer: its log's timestamps; the ceiling: the pod's end)
    cpu_per_step_s: float | None = None
    allreduce_s: float | None = None
    between_epochs_s: float | None = None  # the trainer: from each epoch's end line to the next one's begin


def epoch_marks(log: str) -> tuple[dict[int, float], dict[int, float]]:
    """Epoch -> when the chief logged its begin, and its end (the container runtime's timestamps)."""
    begins: dict[int, float] = {}
    ends: dict[int, float] = {}
    for at, text in stamped_lines(log):
        if m := re.search(r"epoch (\d+)/\d+ (begin|end)", text):
            (begins if m[2] == "begin" else ends).setdefault(int(m[1]), at)
    return begins, ends


REQUEST_CPU = "900m"  # two workers on 2 cores beside the node's own pods (~100m of requests): the limit is what binds


def pod_shape(cpu: str, env: dict[str, str]) -> dict[str, Any]:
    return {"resources": {"requests": {"cpu": REQUEST_CPU, "memory": "1Gi"}, "limits": {"cpu": cpu, "memory": "2Gi"}},
            "env": [{"name": k, "value": v} for k, v in env.items()]}  # fmt: skip


def trainer_objects(name: str, namespace: str, image: str, workers: int, config: Config,
                    shape: dict[str, Any]) -> list[dict[str, Any]]:  # fmt: skip
    doc = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun",
           "metadata": {"name": name, "namespace": namespace, "uid": "bench"},
           "spec": {"workers": workers, "resources": shape["resources"],
                    "training": {"model": "cnn", "dataset": "synthetic", "epochs": EPOCHS,
                                 "batchSizePerWorker": config.batch, "stepsPerEpoch": config.trainer_steps},
                    "storage": {"size": "256Mi", "reclaimPolicy": "Delete"}}}  # fmt: skip
    run = parse_run(doc, image)
    tfjob, pvc = build_tfjob(run), build_pvc(run)
    assert pvc is not None
    for obj in (tfjob, pvc):
        obj["metadata"]["labels"] = dict(LABELS)
    pod = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    pod["metadata"]["labels"] = dict(LABELS)
    pod["spec"]["containers"][0].setdefault("env", []).extend(shape["env"])
    return [pvc, tfjob]


def ceiling_objects(name: str, namespace: str, image: str, workers: int, config: Config,
                    shape: dict[str, Any]) -> list[dict[str, Any]]:  # fmt: skip
    """A TFJob of the same pods (the trainer's builders, so the same securityContext) running ceiling.py."""
    pvc, tfjob = trainer_objects(name, namespace, image, workers, config, shape)
    pod = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    container = pod["spec"]["containers"][0]
    container["command"] = ["python", f"/opt/bench/{CEILING.name}"]
    container["args"] = ["--batch", str(config.batch), "--steps", str(config.ceiling_steps)]
    container.setdefault("volumeMounts", []).append({"name": "bench", "mountPath": "/opt/bench", "readOnly": True})
    pod["spec"].setdefault("volumes", []).append({"name": "bench", "configMap": {"name": CONFIGMAP}})
    return [pvc, tfjob]


class Bench:
    def __init__(self, node: RealNode, namespace: str, cpu: str, env: dict[str, str]) -> None:
        self.node, self.ns = node, namespace
        self.shape = pod_shape(cpu, env)
        self.image = realnode.image_names()[1]
        self.kubectl = node.cluster.kubectl

    def start(self) -> None:
        self.kubectl("create", "configmap", CONFIGMAP, "-n", self.ns, f"--from-file={CEILING}")

    def apply(self, objects: list[dict[str, Any]]) -> None:
        self.kubectl("apply", "-n", self.ns, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                          "items": objects}))  # fmt: skip

    def wait_done(self, name: str, timeout: float = 900) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            job = self.node.cluster.kubectl_json("get", "tfjob", name, "-n", self.ns)
            done = {c["type"] for c in (job.get("status") or {}).get("conditions") or [] if c["status"] == "True"}
            if "Succeeded" in done:
                return
            if "Failed" in done:
                said = [c.get("message", "") for c in job["status"]["conditions"] if c["type"] == "Failed"]
                raise RuntimeError(f"{name} failed: {said} {self.node.logs(self.ns, f'{name}-worker-0')[-2000:]}")
            time.sleep(POLL)
        raise TimeoutError(f"{name} did not finish in {timeout} s")

    def delete(self) -> None:
        self.kubectl("delete", "tfjobs,pvc", "-n", self.ns, "-l", "app.kubernetes.io/name=bench-scaling",
                     "--wait=false")  # fmt: skip
        while self.node.names("pods", self.ns, "app.kubernetes.io/name=bench-scaling"):
            time.sleep(0.5)  # the next shape must not share the cores with these

    def measure(self, program: str, shape: str, config: Config, tag: str) -> list[Job]:
        workers = 2 if shape == "mwms" else 1
        names = [f"{program[:2]}-{shape}-{config.batch}-{tag}-{i}" for i in range(2 if shape == "pair" else 1)]
        build = trainer_objects if program == "trainer" else ceiling_objects
        objects = [o for n in names for o in build(n, self.ns, self.image, workers, config, self.shape)]
        self.apply(objects)
        for name in names:
            self.wait_done(name)
        jobs = [self.read(program, shape, config, name, workers) for name in names]
        self.delete()
        return jobs

    def read(self, program: str, shape: str, config: Config, name: str, workers: int) -> Job:
        log = self.node.logs(self.ns, f"{name}-worker-0", timestamps=True)
        if program == "trainer":
            begins, ends = epoch_marks(log)
            begin, end = begins[2], ends[EPOCHS]
            steps = config.trainer_steps * (EPOCHS - 1)
            between = sum(begins[e + 1] - ends[e] for e in range(2, EPOCHS))
            return Job(program, shape, config.batch, name, workers,
                       examples_per_second=steps * config.batch * workers / (end - begin),
                       step_s=(end - begin) / steps, window=(begin, end), between_epochs_s=between)  # fmt: skip
        line = [text for _, text in stamped_lines(log) if text.startswith("{")][-1]
        out = json.loads(line)
        end = stamped_lines(log)[-1][0]
        return Job(program, shape, config.batch, name, workers, examples_per_second=out["examples_per_second"],
                   step_s=out["step_s"], window=(end - out["step_s"] * out["steps"], end),
                   cpu_per_step_s=out["cpu_per_step_s"], allreduce_s=out["allreduce_s"])  # fmt: skip


def overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    """The part of the shorter window that both jobs of a pair ran at once (1.0: fully together)."""
    both = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    return both / min(a[1] - a[0], b[1] - b[0])


def summarize(jobs: list[Job], batches: list[int]) -> dict[str, Any]:
    """Per batch and program, per round then median: efficiency, against alone, the step's attribution."""
    out: dict[str, Any] = {}
    for batch in batches:
        row: dict[str, Any] = {}
        tags = sorted({j.name.rsplit("-", 2)[1] for j in jobs if j.batch == batch})
        for program in PROGRAMS:
            eff, eff_alone, mwms_eps, pair_eps, alone_eps, overlaps = [], [], [], [], [], []
            for tag in tags:
                mine = [j for j in jobs if j.batch == batch and j.program == program and f"-{tag}-" in j.name]
                by = {s: [j for j in mine if j.shape == s] for s in SHAPES}
                if not all(by.values()):
                    continue
                pair = sum(j.examples_per_second for j in by["pair"])
                mwms, alone = by["mwms"][0].examples_per_second, by["alone"][0].examples_per_second
                eff.append(mwms / pair)
                eff_alone.append(mwms / (2 * alone))
                mwms_eps.append(mwms), pair_eps.append(pair), alone_eps.append(alone)
                overlaps.append(overlap(by["pair"][0].window, by["pair"][1].window))
            row[program] = {"efficiency": median(eff), "efficiency_rounds": eff,
                            "efficiency_vs_alone": median(eff_alone), "mwms_examples_per_second": median(mwms_eps),
                            "pair_examples_per_second": median(pair_eps),
                            "alone_examples_per_second": median(alone_eps), "pair_overlap": min(overlaps)}  # fmt: skip
        ceiling_jobs = [j for j in jobs if j.batch == batch and j.program == "ceiling"]
        trainer_mwms = [j.step_s for j in jobs if j.batch == batch and j.program == "trainer" and j.shape == "mwms"]
        compute = median([j.step_s for j in ceiling_jobs if j.shape == "pair"])
        allreduce = median([j.allreduce_s for j in ceiling_jobs if j.allreduce_s is not None])
        ceiling_step = median([j.step_s for j in ceiling_jobs if j.shape == "mwms"])
        row["step_ms"] = {"compute": 1000 * compute, "allreduce_alone": 1000 * allreduce,
                          "synchronisation": 1000 * (ceiling_step - compute),
                          "trainer_own": 1000 * (median(trainer_mwms) - ceiling_step),
                          "trainer_step": 1000 * median(trainer_mwms)}  # fmt: skip
        row["ratio_to_ceiling"] = row["trainer"]["efficiency"] / row["ceiling"]["efficiency"]
        out[str(batch)] = row
    return out


def markdown(r: dict[str, Any]) -> str:
    lines = [
        "# Scaling in pods against its ceiling, on the real node",
        "",
        f"`{r['command']}`, {r['finished']}, `{r['commit']}`, {r['cpus']} CPUs, load average "
        f"{r['loadavg_before'][0]} before, {r['loadavg_after'][0]} after; {r['rounds']} rounds; every worker a pod "
        f"with a CPU limit of {r['cpu']} (request {REQUEST_CPU}); extra environment {r['env'] or 'none'}. "
        "Efficiency = 2-worker MWMS global examples/s / the sum of two 1-worker jobs running at once "
        "(median of the rounds; each round's in brackets); 'vs alone' divides by twice one 1-worker job with "
        "the other core idle. Definitions: "
        "bench/scaling/run.py.",
        "",
        "| per-worker batch | program | efficiency | vs alone | MWMS ex/s | pair ex/s | alone ex/s | pair overlap |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for batch, row in r["summary"].items():
        for program in PROGRAMS:
            p = row[program]
            rounds = ", ".join(f"{e:.3f}" for e in p["efficiency_rounds"])
            lines.append(f"| {batch} | {program} | **{p['efficiency']:.3f}** ({rounds}) | "
                         f"{p['efficiency_vs_alone']:.3f} | {p['mwms_examples_per_second']:.0f} | "
                         f"{p['pair_examples_per_second']:.0f} | {p['alone_examples_per_second']:.0f} | "
                         f"{p['pair_overlap']:.2f} |")  # fmt: skip
    lines += ["", "| per-worker batch | trainer / ceiling | a 2-worker step of the trainer, ms | compute | "
              "synchronisation (all-reduce, waiting) | the trainer's own (input, Keras loop, metrics) | "
              "an all-reduce timed alone |",
              "|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for batch, row in r["summary"].items():
        s = row["step_ms"]
        lines.append(f"| {batch} | **{row['ratio_to_ceiling']:.3f}** | {s['trainer_step']:.1f} | {s['compute']:.1f} "
                     f"| {s['synchronisation']:.1f} | {s['trainer_own']:.1f} | {s['allreduce_alone']:.1f} |")
    lines += ["", "| job | program | shape | batch | workers | global ex/s | step ms | CPU s/step | all-reduce ms "
              "| between epochs s |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for j in r["jobs"]:
        cpu = f"{j['cpu_per_step_s'] * 1000:.1f} ms" if j["cpu_per_step_s"] is not None else ""
        ar = f"{j['allreduce_s'] * 1000:.2f}" if j["allreduce_s"] is not None else ""
        between = f"{j['between_epochs_s']:.2f}" if j.get("between_epochs_s") is not None else ""
        lines.append(f"| {j['name']} | {j['program']} | {j['shape']} | {j['batch']} | {j['workers']} | "
                     f"{j['examples_per_second']:.0f} | {j['step_s'] * 1000:.1f} | {cpu} | {ar} | {between} |")
    return "\n".join(lines) + "\n"


def measure_on(node: RealNode, namespace: str, args: argparse.Namespace) -> list[Job]:
    bench = Bench(node, namespace, args.cpu, dict(kv.split("=", 1) for kv in args.env))
    bench.start()
    jobs: list[Job] = []
    for r in range(args.rounds):
        for batch in args.batches:
            config = Config.for_batch(batch)
            order = [(p, s) for p in args.programs for s in args.shapes]
            for program, shape in order if r % 2 == 0 else order[::-1]:
                got = bench.measure(program, shape, config, f"r{r}")
                for j in got:
                    print(f"round {r} batch {batch} {program} {shape}: {j.examples_per_second:.0f} ex/s, "
                          f"step {j.step_s * 1000:.1f} ms", flush=True)
                jobs += got
    return jobs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=lambda s: [int(b) for b in s.split(",")], default=[64, 256])
    parser.add_argument("--cpu", default="1", help="each worker pod's CPU request and limit (default 1)")
    parser.add_argument("--env", action="append", default=[], metavar="K=V", help="extra environment of every pod")
    parser.add_argument("--programs", type=lambda s: s.split(","), default=list(PROGRAMS),
                        help="a part of trainer,ceiling (the summary needs both)")
    parser.add_argument("--shapes", type=lambda s: s.split(","), default=list(SHAPES),
                        help="a part of alone,pair,mwms (the summary needs all three)")
    parser.add_argument("--name", default="results", help="file name stem of the outputs (default results)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0 and not os.environ.get("DTR_NODE_DIR"):
        print("bench-scaling starts a real node and needs root (or DTR_NODE_DIR of a running one)", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(prefix="dtr-bench-scaling-") as tmp,
        start_real_node(Path(tmp)) as node,
        restricted_namespace(node, "bench-scaling") as namespace,
    ):
        jobs = measure_on(node, namespace, args)
    commit = os.popen(f"git -C {REPO} rev-parse --short HEAD").read().strip()
    result = {
        "command": "python -m bench.scaling.run " + " ".join(argv), "commit": commit,
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "rounds": args.rounds, "cpu": args.cpu, "env": args.env,
        "summary": summarize(jobs, args.batches) if (args.programs, args.shapes) == (list(PROGRAMS), list(SHAPES))
        else {}, "jobs": [asdict(j) for j in jobs],
    }  # fmt: skip
    (HERE / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (HERE / f"{args.name}.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
