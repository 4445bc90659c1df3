"""Where the wall time of `dtr run examples/digits.yaml` goes outside the training epochs.

Each run is the user's command, `dtr run FILE --dir TMP` (2 local MWMS workers), with every line of its output
timestamped as it arrives. From worker-0's lines the run splits into:

    start            dtr's start, the workers' start (imports, data, the peers meeting, the model) -> `epoch 1/N begin`
    epoch 1          -> `epoch 1/N end` (the first epoch: its training, and tracing, first collectives)
    epochs 2..N      -> `epoch N/N end`
    evaluation+export -> `model exported to` (evaluate, every worker's save, the chief's publish)
    status           -> dtr exits (the workers' exit, the final status printed)

The time outside training is the total minus N steady epochs (the mean of epochs 2..N, so epoch 1's own training
counts as training and only its extra, `first-epoch overhead`, as outside).

--baseline REF checks REF out into a temporary git worktree and runs it alternately with this tree (ABBA order
within each pair of rounds), both through the same environments (.venv/op, .venv/trainer) with PYTHONPATH
pointing at each tree's sources, so both are measured in one run under the same load. Writes results-overhead.json
and results-overhead.md here (--out for another prefix).

    .venv/op/bin/python -m bench.trainer.overhead --rounds 4 --baseline HEAD~3   (from the repository root)
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
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RUN_FILE = "examples/digits.yaml"
TIMEOUT = 900
PHASES = ("start", "epoch_1", "epochs_2_n", "evaluation_export", "status")
LABELS = {"epochs_2_n": "epochs 2..N", "evaluation_export": "evaluation + export"}


@dataclass(frozen=True)
class Tree:
    """Sources to run: this worktree, or a baseline checked out elsewhere."""

    name: str
    root: Path
    commit: str


@dataclass
class Run:
    tree: str
    round: int
    total: float
    phases: dict  # seconds per PHASES entry
    first_epoch_overhead: float  # epoch 1 minus a steady epoch
    outside_training: float  # total minus epochs x a steady epoch
    accuracy: float | None
    loadavg_before: float
    loadavg_after: float


# ---------------------------------------------------------------- parsing (pure)


def milestones(lines: list[tuple[float, str]], epochs: int) -> dict:
    """Seconds from the start at which worker-0 said each milestone (missing ones are absent)."""
    patterns = {
        "epoch_1_begin": f"[worker-0] dtr_trainer[worker-0]: epoch 1/{epochs} begin",
        "epoch_1_end": f"[worker-0] dtr_trainer[worker-0]: epoch 1/{epochs} end",
        "last_epoch_end": f"[worker-0] dtr_trainer[worker-0]: epoch {epochs}/{epochs} end",
        "exported": "[worker-0] dtr_trainer[worker-0]: model exported to",
    }
    found = {}
    for seconds, line in lines:
        for name, prefix in patterns.items():
            if name not in found and line.startswith(prefix):
                found[name] = seconds
    return found


def accuracy_of(lines: list[tuple[float, str]]) -> float | None:
    """The chief's summary's accuracy."""
    for _, line in lines:
        if line.startswith("[worker-0] {") and '"accuracy"' in line:
            return json.loads(line.split(" ", 1)[1])["accuracy"]
    return None


def breakdown(marks: dict, total: float, epochs: int) -> tuple[dict, float, float]:
    """(seconds per phase, first-epoch overhead, time outside training)."""
    phases = {
        "start": marks["epoch_1_begin"],
        "epoch_1": marks["epoch_1_end"] - marks["epoch_1_begin"],
        "epochs_2_n": marks["last_epoch_end"] - marks["epoch_1_end"],
        "evaluation_export": marks["exported"] - marks["last_epoch_end"],
        "status": total - marks["exported"],
    }
    steady = phases["epochs_2_n"] / max(epochs - 1, 1)
    return phases, phases["epoch_1"] - steady, total - epochs * steady


def epochs_of(run_file: Path) -> int:
    match = re.search(r"^\s*epochs:\s*(\d+)", run_file.read_text(), re.MULTILINE)
    if not match:
        raise SystemExit(f"{run_file}: no spec.training.epochs")
    return int(match.group(1))


# ---------------------------------------------------------------- running


def trainer_python(tree: Tree, work: Path) -> Path:
    """The trainer environment's Python with the tree's sources first on the path (dtr run starts it as is)."""
    wrapper = work / f"python-{tree.name}"
    path = f"{tree.root / 'trainer'}:{tree.root / 'contract'}"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH='{path}' exec '{REPO / '.venv/trainer/bin/python'}' \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def timestamped(argv: list[str], env: dict) -> tuple[list[tuple[float, str]], float, int]:
    """Run argv; (each output line with its arrival time, the total seconds, the exit code)."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic() - started, line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait(TIMEOUT)
    total = time.monotonic() - started
    reader.join(10)
    return lines, total, code


def run_once(tree: Tree, rnd: int, work: Path, epochs: int) -> Run:
    run_dir = work / f"run-{tree.name}-{rnd}"
    env = {**os.environ, "PYTHONPATH": f"{tree.root / 'operator'}:{tree.root / 'contract'}"}
    argv = [str(REPO / ".venv/op/bin/python"), "-m", "dtr_cli", "run", str(tree.root / RUN_FILE),
            "--dir", str(run_dir), "--python", str(trainer_python(tree, work))]
    before = os.getloadavg()[0]
    lines, total, code = timestamped(argv, env)
    after = os.getloadavg()[0]
    if code != 0:
        tail = "\n".join(line for _, line in lines[-30:])
        raise SystemExit(f"{tree.name} round {rnd}: dtr run exited {code}:\n{tail}")
    phases, first, outside = breakdown(milestones(lines, epochs), total, epochs)
    shutil.rmtree(run_dir, ignore_errors=True)
    return Run(tree.name, rnd, round(total, 2), {k: round(v, 2) for k, v in phases.items()}, round(first, 2),
               round(outside, 2), accuracy_of(lines), round(before, 2), round(after, 2))


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def baseline_tree(ref: str, work: Path) -> Tree:
    root = work / "baseline"
    git("worktree", "add", "--detach", str(root), ref)
    return Tree("baseline", root, git("rev-parse", "--short", "HEAD", cwd=root))


def order(trees: list[Tree], rnd: int) -> list[Tree]:
    """ABBA: a pair of rounds runs each tree once first and once second."""
    return trees if rnd % 2 == 0 else list(reversed(trees))


# ---------------------------------------------------------------- report


def summary(runs: list[Run]) -> dict:
    """Per tree: the median and range of each phase, the first-epoch overhead, outside training and the total."""
    by_tree: dict = {}
    for name in dict.fromkeys(r.tree for r in runs):
        mine = [r for r in runs if r.tree == name]
        figures = {**{p: [r.phases[p] for r in mine] for p in PHASES},
                   "first_epoch_overhead": [r.first_epoch_overhead for r in mine],
                   "outside_training": [r.outside_training for r in mine], "total": [r.total for r in mine]}
        by_tree[name] = {k: {"median": round(statistics.median(v), 2), "min": min(v), "max": max(v)}
                         for k, v in figures.items()}
        by_tree[name]["accuracy"] = sorted({r.accuracy for r in mine}, key=lambda a: (a is None, a))
    return by_tree


def markdown(report: dict) -> str:
    trees = report["summary"]
    names = list(trees)
    rows = [*PHASES, "first_epoch_overhead", "outside_training", "total"]
    head = "| seconds, median (min..max) | " + " | ".join(
        f"{n} (`{report['commits'][n]}`)" for n in names) + (" | ratio |" if len(names) == 2 else " |")
    lines = [
        "# Time outside the training epochs: `dtr run examples/digits.yaml`",
        "",
        f"`{report['command']}`, {report['date']}, {report['cpus']} CPUs, {report['rounds']} rounds "
        f"(1-min load average {report['loadavg_start']} at start, {report['loadavg_end']} at end; "
        "each run's own in the JSON).",
        "",
        head,
        "|---|" + "---:|" * (len(names) + (1 if len(names) == 2 else 0)),
    ]
    for row in rows:
        cells = [f"{trees[n][row]['median']} ({trees[n][row]['min']}..{trees[n][row]['max']})" for n in names]
        if len(names) == 2:
            base = trees[names[0]][row]["median"]
            cells.append(f"{trees[names[1]][row]['median'] / base:.2f}" if base else "")
        lines.append(f"| {LABELS.get(row, row.replace('_', ' '))} | " + " | ".join(cells) + " |")
    lines += ["", "Test accuracy (worker-0's summary): " + "; ".join(
        f"{n} {', '.join(str(a) for a in trees[n]['accuracy'])}" for n in names) + ".", ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="runs of each tree [3]")
    p.add_argument("--baseline", metavar="REF", help="also run this commit, alternately (a temporary git worktree)")
    p.add_argument("--out", default=str(HERE / "results-overhead"), help="prefix of the .json and .md written")
    args = p.parse_args()
    epochs = epochs_of(REPO / RUN_FILE)
    work = Path(tempfile.mkdtemp(prefix="dtr-bench-overhead-"))
    changed = git("status", "--porcelain", "--untracked-files=no")  # "+": tracked files differ from the commit
    current = Tree("current", REPO, git("rev-parse", "--short", "HEAD") + ("+" if changed else ""))
    trees = [current]
    try:
        if args.baseline:
            trees = [baseline_tree(args.baseline, work), current]
        report = {"command": " ".join(["python -m bench.trainer.overhead", *sys.argv[1:]]),
                  "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count(),
                  "rounds": args.rounds, "run_file": RUN_FILE, "epochs": epochs,
                  "commits": {t.name: t.commit for t in trees}, "loadavg_start": round(os.getloadavg()[0], 2)}
        runs = []
        for rnd in range(args.rounds):
            for tree in order(trees, rnd):
                run = run_once(tree, rnd, work, epochs)
                print(f"round {rnd} {tree.name}: total {run.total} s, outside training {run.outside_training} s, "
                      f"{run.phases}, load {run.loadavg_before}", flush=True)
                runs.append(run)
        report.update(loadavg_end=round(os.getloadavg()[0], 2), summary=summary(runs), runs=[asdict(r) for r in runs])
    finally:
        if args.baseline and (work / "baseline").exists():
            git("worktree", "remove", "--force", str(work / "baseline"))
        shutil.rmtree(work, ignore_errors=True)
    Path(f"{args.out}.json").write_text(json.dumps(report, indent=1) + "\n")
    Path(f"{args.out}.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
