"""Scaling benchmark of the trainer: two MWMS workers vs two independent single-worker processes.

Each process is pinned to one core with taskset and runs the real trainer CLI
(`python -m dtr_trainer`) on the synthetic dataset with the same per-worker batch and the
same step window: epoch 1 is the warm-up (tracing, first collectives), the window is
epochs 2..E, timed by the trainer itself (its `window ... wall_s= cpu_s=` log line).

    scaling efficiency = MWMS global examples/s / sum of the two independent examples/s

1.0 is the limit (two independent processes use both cores fully). Variants and rounds are
interleaved so that drift in the shared machine's load hits every variant alike; the
median over rounds is reported, with the min and max.

    make bench-trainer   (or, from the repository root: .venv/trainer/bin/python -m bench.trainer.run_bench --help)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from devcluster.controlplane import free_ports

HERE = Path(__file__).resolve().parent

TIMEOUT = 600


@dataclass(frozen=True)
class Variant:
    name: str
    flags: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    note: str = ""


def trainer_defaults() -> dict:
    """The trainer's current defaults (what a run without tuning flags gets)."""
    from dtr_trainer import main

    return {"steps_per_execution": main.DEFAULT_STEPS_PER_EXECUTION, "bytes_per_pack": main.DEFAULT_BYTES_PER_PACK,
            "lazy_metrics": main.DEFAULT_LAZY_METRICS, "retain_memory": main.DEFAULT_RETAIN_MEMORY, "xla": "off"}


# Flags are explicit, so a variant means the same whatever the trainer's defaults are.
# bytes_per_pack=0 is TF 2.11's "one pack": all gradients concatenated into a single all-reduce
# (cross_device_utils.group_by_size); a positive size splits them so early packs can start while
# later gradients are still being computed.
SMALL_PACK = 128 << 10
XLA_AUTO = (("TF_XLA_FLAGS", "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"),)


def flags(spe: int = 1, pack: int = 0, cache: bool = True, lazy: bool = False, retain: bool = False) -> tuple[str, ...]:
    """Every tuning flag spelled out (the defaults here are model.fit's, not the trainer's)."""
    return ("--steps-per-execution", str(spe), "--bytes-per-pack", str(pack),
            "--cache" if cache else "--no-cache", "--lazy-metrics" if lazy else "--no-lazy-metrics",
            "--retain-memory" if retain else "--no-retain-memory")


VARIANTS = {v.name: v for v in (
    Variant("plain", flags(), note="model.fit defaults: 1 step per call, one gradient pack, no XLA, cached input"),
    Variant("no_cache", flags(cache=False), note="input pipeline without .cache()"),
    Variant("pack_128k", flags(pack=SMALL_PACK), note="gradients in 128 KiB packs"),
    Variant("spe10", flags(spe=10), note="10 steps per tf.function call"),
    Variant("spe10_lazy", flags(spe=10, lazy=True), note="10 steps per call, metrics read (all-reduced) once per call"),
    Variant("spe10_pack_128k", flags(spe=10, pack=SMALL_PACK), note="10 steps per call + 128 KiB packs"),
    # Keras' jit_compile=True cannot work here: TF 2.11 cannot XLA-compile the MWMS collectives on
    # CPU. Auto-clustering compiles the model's ops and leaves the collectives to the runtime.
    Variant("xla_auto", flags(), env=XLA_AUTO, note="XLA auto-clustering (TF_XLA_FLAGS)"),
    Variant("spe10_xla_auto", flags(spe=10), env=XLA_AUTO, note="10 steps per call + XLA auto-clustering"),
    Variant("spe10_lazy_retain", flags(spe=10, lazy=True, retain=True),
            note="spe10_lazy + malloc keeps freed memory (no page faults per step)"),
    Variant("spe10_lazy_bfc", flags(spe=10, lazy=True), env=(("TF_CPU_ALLOCATOR_USE_BFC", "true"),),
            note="spe10_lazy + TensorFlow's BFC allocator for CPU tensors"),
    Variant("spe50_lazy_retain", flags(spe=50, lazy=True, retain=True), note="50 steps per call, lazy metrics, retain"),
    Variant("default", (), note="the trainer's defaults (no tuning flags)"),
)}
DEFAULT_RUN = ("plain", "spe10", "spe10_lazy", "spe50_lazy_retain", "pack_128k", "xla_auto", "no_cache")


def trainer_cmd(core: int, variant: Variant, args: argparse.Namespace, work: Path, tag: str) -> list[str]:
    return [
        "taskset", "-c", str(core), sys.executable, "-m", "dtr_trainer",
        "--dataset", "synthetic", "--model", args.model,
        "--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps),
        "--batch-size-per-worker", str(args.batch), "--seed", "1",
        "--data-dir", str(work / "data"), "--export-dir", str(work / f"models-{tag}"),
        "--termination-message-path", "", *variant.flags,
    ]


WINDOW = re.compile(r"window epochs=(\d+) examples=(\d+) wall_s=([\d.]+) cpu_s=([\d.]+)(?: max_rss_mb=(\d+))?")


@dataclass(frozen=True)
class Window:
    """One process's steady-state window, from the trainer's `window ...` log line."""

    examples: int  # global examples (the whole cluster's) in the window
    wall: float
    cpu: float  # this process's CPU seconds, all threads
    max_rss_mb: int  # peak resident memory of the process (0: not reported)

    @property
    def utilization(self) -> float:  # < 1: the core was shared with something else
        return self.cpu / self.wall


def launch(cmds: list[list[str]], envs: list[dict], logs: list[Path]) -> list[Window]:
    """Start all at once, wait, return each process's window."""
    procs = []
    for cmd, env, log in zip(cmds, envs, logs):
        with open(log, "w") as out:
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
    for proc, log in zip(procs, logs):
        try:
            proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise SystemExit(f"benchmark process timed out; see {log}") from None
        if proc.returncode != 0:
            raise SystemExit(f"benchmark process failed ({proc.returncode}); see {log}:\n{log.read_text()[-2000:]}")
    windows = []
    for log in logs:
        found = WINDOW.search(log.read_text())
        if not found:
            raise SystemExit(f"no window line in {log}")
        _, examples, wall, cpu, rss = found.groups()
        windows.append(Window(int(examples), float(wall), float(cpu), int(rss or 0)))
    return windows


def base_env(variant: Variant) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", "no_proxy": "localhost,127.0.0.1", "NO_PROXY": "localhost,127.0.0.1"})
    env.update(dict(variant.env))
    return env


def measure_mwms(variant: Variant, args: argparse.Namespace, work: Path, rnd: int) -> list[Window]:
    ports = free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    envs = [{**base_env(variant), "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})}
            for i in range(2)]
    cmds = [trainer_cmd(i, variant, args, work, f"mwms-{variant.name}-{rnd}") for i in range(2)]
    logs = [work / f"mwms-{variant.name}-{rnd}-w{i}.log" for i in range(2)]
    return launch(cmds, envs, logs)


def measure_independent(variant: Variant, args: argparse.Namespace, work: Path, rnd: int) -> list[Window]:
    cmds = [trainer_cmd(i, variant, args, work, f"solo-{variant.name}-{rnd}-{i}") for i in range(2)]
    logs = [work / f"solo-{variant.name}-{rnd}-p{i}.log" for i in range(2)]
    return launch(cmds, [base_env(variant)] * 2, logs)


def compare(mwms: list[Window], solo: list[Window]) -> dict:
    """Wall efficiency (the goal's definition) and CPU efficiency (examples per CPU-second, which
    other load on the machine does not distort, but which also does not see idle waiting)."""
    chief = mwms[0]
    mwms_rate = chief.examples / chief.wall
    solo_rate = sum(w.examples / w.wall for w in solo)
    mwms_per_cpu = chief.examples / sum(w.cpu for w in mwms)
    solo_per_cpu = sum(w.examples for w in solo) / sum(w.cpu for w in solo)
    return {
        "mwms": round(mwms_rate, 1), "independent": [round(w.examples / w.wall, 1) for w in solo],
        "efficiency": round(mwms_rate / solo_rate, 3),
        "cpu_efficiency": round(mwms_per_cpu / solo_per_cpu, 3),
        "utilization_mwms": round(statistics.mean(w.utilization for w in mwms), 2),
        "utilization_independent": round(statistics.mean(w.utilization for w in solo), 2),
        "max_rss_mb_mwms": max(w.max_rss_mb for w in mwms), "max_rss_mb_independent": max(w.max_rss_mb for w in solo),
    }


def slower_core_efficiency(sample: dict) -> float:
    """MWMS global examples/s / (2 x the slower independent process's examples/s).

    A diagnostic beside the goal's figure, not a replacement: MWMS is synchronous, so both workers
    go at the pace of the slower core. When the two pinned cores are not equally fast (a shared VM's
    vCPUs often are not), 1.0 of the goal's figure is out of reach for any synchronous trainer; this
    ratio shows how much is lost to MWMS itself.
    """
    return round(sample["mwms"] / (2 * min(sample["independent"])), 3)


def summarize(samples: list[dict]) -> dict:
    def med(key: str) -> float:
        return round(statistics.median(s[key] for s in samples), 3)

    eff = [s["efficiency"] for s in samples]
    return {
        "efficiency_median": med("efficiency"),
        "efficiency_min": round(min(eff), 3),
        "efficiency_max": round(max(eff), 3),
        "cpu_efficiency_median": med("cpu_efficiency"),
        "slower_core_efficiency_median": round(statistics.median(slower_core_efficiency(x) for x in samples), 3),
        "utilization_mwms_median": med("utilization_mwms"),
        "utilization_independent_median": med("utilization_independent"),
        "mwms_examples_per_s_median": round(statistics.median(s["mwms"] for s in samples), 1),
        "independent_sum_examples_per_s_median": round(statistics.median(sum(s["independent"]) for s in samples), 1),
        "rounds": samples,
    }


def markdown(report: dict) -> str:
    cfg = report["config"]
    window = cfg["steps"] * (cfg["epochs"] - 1)
    method = (
        f"Model `{cfg['model']}`, synthetic 28x28 data, per-worker batch {cfg['batch']}, {cfg['steps']} steps/epoch, "
        f"{cfg['epochs']} epochs: epoch 1 is warm-up, the window is epochs 2..{cfg['epochs']} ({window} steps). "
        "Each process is pinned to one core (`taskset`). Efficiency = MWMS global examples/s / the sum of two "
        "independent single-worker processes' examples/s, measured back to back, median of "
        f"{cfg['rounds']} interleaved rounds (min..max). CPU efficiency = the same ratio in examples per "
        "CPU-second (all threads): blind to idle waiting, less distorted by other load. Core share = CPU "
        "seconds / wall seconds of a pinned process: below 1.00 it was not running, waiting (on a peer, on "
        "its input) or preempted by the machine's other work; the wall figures carry that noise. Rounds with "
        "an efficiency above 1.0 (impossible on idle cores) show how large the noise was. Slower-core "
        "efficiency = MWMS global examples/s / (2 x the slower independent process): a synchronous trainer "
        "goes at the pace of its slower core, so when the two cores are not equally fast (independent "
        "rates in the last columns) this shows the part lost to MWMS itself; it is a diagnostic, the goal "
        "is on the first figure."
    )
    header = ("| variant | what | efficiency (median) | min..max | CPU efficiency | slower-core efficiency "
              "| core share MWMS / indep. | MWMS global ex/s | independent sum ex/s | independent per core ex/s "
              "(medians) | peak RSS MB MWMS / indep. |")
    lines = [
        "# Trainer scaling benchmark",
        "",
        (f"Generated by `make bench-trainer` on {report['date']} ({report['cpus']} cores, shared machine; "
        f"1-min load average {report['loadavg_start']} at start, {report['loadavg_end']} at end)."),
        "",
        method,
        "",
        header,
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in report["variants"].items():
        rounds = r["rounds"]
        slower = statistics.median(slower_core_efficiency(x) for x in rounds)
        rss = " / ".join(str(max(x.get(k, 0) for x in rounds)) for k in ("max_rss_mb_mwms", "max_rss_mb_independent"))
        per_core = " / ".join(f"{statistics.median(x['independent'][i] for x in rounds):.0f}" for i in range(2))
        lines.append(f"| `{name}` | {VARIANTS[name].note} | **{r['efficiency_median']:.3f}** | "
                     f"{r['efficiency_min']:.3f}..{r['efficiency_max']:.3f} | {r['cpu_efficiency_median']:.3f} | "
                     f"{slower:.3f} | "
                     f"{r['utilization_mwms_median']:.2f} / {r['utilization_independent_median']:.2f} | "
                     f"{r['mwms_examples_per_s_median']:.0f} | {r['independent_sum_examples_per_s_median']:.0f} | "
                     f"{per_core} | {rss} |")
    lines += ["", f"Trainer defaults when this ran: `{json.dumps(report['trainer_defaults'])}`.", ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default=",".join(DEFAULT_RUN), help=f"comma-separated of {', '.join(VARIANTS)}")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--batch", type=int, default=64, help="per-worker batch (the API's default)")
    p.add_argument("--steps", type=int, default=40, help="steps per epoch (a multiple of 10 for steps_per_execution)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--model", default="cnn")
    p.add_argument("--out", default=str(HERE))
    p.add_argument("--render", action="store_true", help="only rewrite results.md from results.json")
    args = p.parse_args()
    if args.render:
        out = Path(args.out)
        (out / "results.md").write_text(markdown(json.loads((out / "results.json").read_text())))
        return
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("needs 2 cores")
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}")
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
              "loadavg_start": round(os.getloadavg()[0], 2), "trainer_defaults": trainer_defaults(),
              "config": {"batch": args.batch, "steps": args.steps, "epochs": args.epochs, "rounds": args.rounds,
                         "model": args.model}}
    samples: dict[str, list[dict]] = {n: [] for n in names}
    work = Path(tempfile.mkdtemp(prefix="dtr-bench-"))  # kept on failure: the logs are there
    print(f"logs in {work}", flush=True)
    for rnd in range(args.rounds):
        for name in names:
            variant = VARIANTS[name]
            result = compare(measure_mwms(variant, args, work, rnd), measure_independent(variant, args, work, rnd))
            samples[name].append(result)
            print(f"round {rnd + 1}/{args.rounds} {name:>13}: MWMS {result['mwms']:7.1f} ex/s, independent "
                  f"{' + '.join(map(str, result['independent']))} ex/s -> efficiency {result['efficiency']:.3f} "
                  f"(cpu {result['cpu_efficiency']:.3f}; core share mwms {result['utilization_mwms']:.2f}, "
                  f"independent {result['utilization_independent']:.2f})", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    report["loadavg_end"] = round(os.getloadavg()[0], 2)
    report["variants"] = {n: summarize(s) for n, s in samples.items()}
    out = Path(args.out)
    (out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "results.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
