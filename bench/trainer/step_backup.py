"""What saves inside an epoch (dtr_trainer.step_backup) cost per training step, and what a SIGTERM then keeps.

Per-step time: two local MWMS workers train digits (--steps-per-epoch 200, 5 epochs) without either flag (off),
with --backup-on-sigterm (sigterm) and with --backup-every-steps 50 (every: 3 saves inside each epoch, at steps
50, 100 and 150, besides the epoch's own); worker-0's `window` line (epochs 2..N: no tracing) gives the wall
seconds per step. The three run in a rotating order, reversed every other round, at --steps-per-execution 50 (the
default: the flags' work is once per execution) and 5 (ten times as often), so all see the same load; each ratio
is to off, of the medians, and the median of each round's own.

SIGTERM: once per round and steps-per-execution, worker 1 is told to stop 0.5 s into epoch 2 (with
--backup-on-sigterm): the seconds until both workers left, the step both saved at (the steps of epoch 2 that the
restart keeps; without the flag it redoes them all) and, after a restart, the step it resumed at (steps redone =
resumed - saved - 1).

    .venv/trainer/bin/python -m bench.trainer.step_backup --rounds 6   (from the repository root)

Writes results-step-backup.json and results-step-backup.md here (--out for another prefix).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from devcluster.controlplane import free_ports

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EPOCHS, STEPS = 5, 200
EVERY = 50
CONFIGS = {"off": [], "sigterm": ["--backup-on-sigterm"], "every": ["--backup-every-steps", str(EVERY)]}
TIMEOUT = 600
WINDOW = re.compile(r"window epochs=(\d+) examples=\d+ wall_s=([\d.]+)")
SAVED = re.compile(r"saved the training state at epoch \d+, step (\d+)/")
RESUMED = re.compile(r"resumed from backup at epoch \d+/\d+, step (\d+)/")


def args_for(root: Path, per_execution: int, extra: list[str]) -> list[str]:
    return ["--dataset", "digits", "--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS),
            "--batch-size-per-worker", "16", "--steps-per-execution", str(per_execution), "--seed", "3",
            "--data-dir", str(root / "data"), "--export-dir", str(root / "models" / "bench"),
            "--backup-dir", str(root / "backup"), "--log-dir", str(root / "logs"),
            "--termination-message-path", "", *extra]  # fmt: skip


def start(root: Path, ports: list[int], argv: list[str], attempt: str) -> list[tuple[subprocess.Popen, Path]]:
    procs = []
    for i in range(len(ports)):
        tf_config = {"cluster": {"worker": [f"localhost:{p}" for p in ports]}, "task": {"type": "worker", "index": i}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "TF_CPP_MIN_LOG_LEVEL": "2",
               "PYTHONPATH": os.pathsep.join(str(REPO / d) for d in ("trainer", "contract")),
               "no_proxy": "localhost,127.0.0.1", "NO_PROXY": "localhost,127.0.0.1"}  # fmt: skip
        log = root / f"worker{i}-{attempt}.log"
        with open(log, "w") as out:
            procs.append((subprocess.Popen([sys.executable, "-m", "dtr_trainer", *argv], env=env, stdout=out,
                                           stderr=subprocess.STDOUT), log))  # fmt: skip
    return procs


def finish(procs: list[tuple[subprocess.Popen, Path]]) -> list[int]:
    try:
        return [p.wait(timeout=TIMEOUT) for p, _ in procs]
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def fresh_root(parent: Path, name: str) -> Path:
    root = parent / name
    shutil.rmtree(root, ignore_errors=True)
    for sub in ("data", "models", "backup", "logs"):
        (root / sub).mkdir(parents=True)
    return root


def per_step_ms(parent: Path, per_execution: int, extra: list[str]) -> float:
    root = fresh_root(parent, "steady")
    procs = start(root, free_ports(2), args_for(root, per_execution, extra), "a")
    codes = finish(procs)
    text = procs[0][1].read_text()
    window = WINDOW.search(text)
    if codes != [0, 0] or window is None:
        raise SystemExit(f"a run failed ({codes}):\n{text[-3000:]}")
    return float(window.group(2)) / (int(window.group(1)) * STEPS) * 1e3


def sigterm_run(parent: Path, per_execution: int) -> dict:
    """Worker 1 told to stop 0.5 s into epoch 2, with the flag; both restarted."""
    root = fresh_root(parent, "sigterm")
    ports = free_ports(2)
    argv = args_for(root, per_execution, CONFIGS["sigterm"])
    procs = start(root, ports, argv, "a")
    deadline = time.monotonic() + TIMEOUT
    while f"epoch 2/{EPOCHS} begin" not in procs[1][1].read_text():
        if time.monotonic() > deadline or procs[1][0].poll() is not None:
            finish(procs)
            raise SystemExit(f"no epoch 2:\n{procs[1][1].read_text()[-3000:]}")
        time.sleep(0.05)
    time.sleep(0.5)
    procs[1][0].send_signal(signal.SIGTERM)
    sent = time.monotonic()
    codes = finish(procs)
    stop_seconds = time.monotonic() - sent
    saved = SAVED.search(procs[1][1].read_text())
    again = start(root, ports, argv, "b")
    again_codes = finish(again)
    resumed = RESUMED.search(again[0][1].read_text())
    saved_step = int(saved.group(1)) if saved else 0  # steps of epoch 2 done and saved
    resumed_step = int(resumed.group(1)) if resumed else 1
    return {"codes": codes, "restart_codes": again_codes, "stop_seconds": round(stop_seconds, 3),
            "saved_after_step": saved_step, "resumed_at_step": resumed_step,
            "steps_redone": resumed_step - 1 - saved_step if saved else None}  # fmt: skip


def callback_us(calls: int = 20_000) -> dict:
    """In this process, no strategy, a tiny model: microseconds per execution in the batch hooks of fit's default
    BackupAndRestore (a variable written per execution) and of StepBackup (a flag and a tuple compared)."""
    import tensorflow as tf
    from dtr_trainer.step_backup import StepBackup

    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
    model.compile(optimizer="sgd", loss="mse")
    out = {}
    with tempfile.TemporaryDirectory(prefix="dtr-step-backup-cb-") as tmp:
        default = tf.keras.callbacks.BackupAndRestore(f"{tmp}/a", delete_checkpoint=False)
        step = StepBackup(f"{tmp}/b", 10**9, 50, 1, 0, lambda line: None)
        for name, callback in (("BackupAndRestore", default), ("StepBackup", step)):
            callback.set_model(model)
            callback.on_train_begin()
            callback.on_epoch_begin(0)
            began = time.perf_counter()
            for i in range(calls):
                callback.on_train_batch_begin(i * 50)
                callback.on_train_batch_end(i * 50 + 49)
            out[name] = round((time.perf_counter() - began) / calls * 1e6, 2)
            callback.on_train_end()
    return out


def save_ms(saves: int = 20) -> dict:
    """In this process, no strategy: milliseconds per save inside an epoch (StepBackup._save: the checkpoint of
    weights, Adam's slots and counters that an epoch's end writes too) of the built-in cnn on digits' shape."""
    import numpy as np
    from dtr_trainer.models import BUILT_IN
    from dtr_trainer.step_backup import StepBackup
    from dtr_trainer.user import Context

    ctx = Context(worker_index=0, num_workers=1, is_chief=True, batch_size_per_worker=32, global_batch_size=32,
                  data_dir="", seed=3, epochs=1, learning_rate=0.001, dataset="digits", input_shape=(28, 28, 1),
                  label_shape=(), num_classes=10)  # fmt: skip
    model = BUILT_IN["cnn"](ctx)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.train_on_batch(np.zeros((32, 28, 28, 1), "float32"), np.zeros((32,), "int64"))  # Adam's slots
    with tempfile.TemporaryDirectory(prefix="dtr-step-backup-save-") as tmp:
        backup = StepBackup(tmp, 200, 5, 1, 0, lambda line: None, on_sigterm=False, every_steps=50)
        backup.set_model(model)
        backup.on_train_begin()
        backup.on_epoch_begin(0)
        times = []
        for _ in range(saves):
            began = time.perf_counter()
            backup._save(49)
            times.append((time.perf_counter() - began) * 1e3)
        backup.on_train_end()
        size = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
    return {"parameters": int(model.count_params()), "checkpoint_bytes": size, "ms_per_save": summary(times)}


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "values": [round(v, 4) for v in values]}  # fmt: skip


def round_order(r: int) -> list[str]:
    """Round r's order of the configurations: rotated by r, reversed every other round."""
    names = list(CONFIGS)
    order = names[r % len(names) :] + names[: r % len(names)]
    return order[::-1] if r % 2 else order


def measure(rounds: int, per_execution: int, parent: Path) -> dict:
    runs: dict[str, list[float]] = {name: [] for name in CONFIGS}
    paired: dict[str, list[float]] = {name: [] for name in CONFIGS if name != "off"}
    sigterms = []
    for r in range(rounds):
        got = {name: per_step_ms(parent, per_execution, CONFIGS[name]) for name in round_order(r)}
        for name, ms in got.items():
            runs[name].append(ms)
        for name in paired:
            paired[name].append(got[name] / got["off"])
        sigterms.append(sigterm_run(parent, per_execution))
        print(f"spe {per_execution} round {r + 1}: " + ", ".join(f"{n} {ms:.3f} ms/step" for n, ms in got.items())
              + f"; SIGTERM {sigterms[-1]}", flush=True)  # fmt: skip
    off = statistics.median(runs["off"])
    saves = (STEPS - 1) // EVERY  # per epoch, inside it
    return {
        "steps_per_execution": per_execution,
        "ms_per_step": {name: summary(values) for name, values in runs.items()},
        "ratio_of_medians": {name: round(statistics.median(runs[name]) / off, 4) for name in paired},
        "median_paired_ratio": {name: round(statistics.median(values), 4) for name, values in paired.items()},
        "paired_ratios": {name: [round(p, 4) for p in values] for name, values in paired.items()},
        "every_ms_per_save": round((statistics.median(runs["every"]) - off) * STEPS / saves, 2),
        "sigterm": sigterms,
    }


def markdown(doc: dict) -> str:
    lines = [
        "# Saves inside an epoch: cost per step, and what a SIGTERM keeps",
        "",
        f"`{doc['command']}`, {doc['time']}, `{doc['commit']}`, {doc['cpus']} CPUs, {doc['rounds']} rounds "
        f"(1-min load average {doc['loadavg_before']} at start, {doc['loadavg_after']} at end). Two local MWMS "
        f"workers, digits, {STEPS} steps/epoch, {EPOCHS} epochs, global batch 32; per step: worker-0's epochs "
        f"2..N. off: neither flag; sigterm: --backup-on-sigterm; every: --backup-every-steps {EVERY}. The three "
        "alternate (a rotating order, reversed every other round).",
        "",
        "| steps/execution | flags | ms/step, median (min..max) | / off, medians | / off, median of rounds |",
        "|---:|---|---:|---:|---:|",
    ]
    for m in doc["results"]:
        for name, ms in m["ms_per_step"].items():
            ratios = ("", "") if name == "off" else (m["ratio_of_medians"][name], m["median_paired_ratio"][name])
            lines.append(f"| {m['steps_per_execution']} | {name} | {ms['median']} ({ms['min']}..{ms['max']}) | "
                         f"{ratios[0]} | {ratios[1]} |")  # fmt: skip
    lines += ["", "every: what one save adds, from the medians (ms/step every - off, x steps per save): "
              + ", ".join(f"{m['every_ms_per_save']} ms at {m['steps_per_execution']} steps/execution"
                          for m in doc["results"]) + "."]  # fmt: skip
    hooks = doc["batch_hooks_us_per_execution"]
    lines += ["", "The callbacks' own batch hooks, per execution, in one process (no strategy, 20,000 calls): "
              f"fit's default BackupAndRestore {hooks['BackupAndRestore']} µs (it writes a variable), StepBackup "
              f"{hooks['StepBackup']} µs (it replaces it)."]  # fmt: skip
    save = doc["one_save_in_process"]
    lines += ["", f"One save inside an epoch, in one process (no strategy), the built-in cnn ({save['parameters']:,} "
              f"parameters, a checkpoint of {save['checkpoint_bytes']:,} bytes with Adam's slots): "
              f"{save['ms_per_save']['median']} ms median ({save['ms_per_save']['min']}..{save['ms_per_save']['max']}, "
              f"{len(save['ms_per_save']['values'])} saves)."]  # fmt: skip
    lines += ["", "SIGTERM to worker 1, 0.5 s into epoch 2, with --backup-on-sigterm (each round):", "",
              "| steps/execution | both left after, s | saved after step (kept) | resumed at step | steps redone |",
              "|---:|---|---|---|---|"]  # fmt: skip
    for m in doc["results"]:
        s = m["sigterm"]
        lines.append(f"| {m['steps_per_execution']} | {', '.join(str(x['stop_seconds']) for x in s)} | "
                     f"{', '.join(str(x['saved_after_step']) for x in s)} | "
                     f"{', '.join(str(x['resumed_at_step']) for x in s)} | "
                     f"{', '.join(str(x['steps_redone']) for x in s)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps-per-execution", type=int, nargs="+", default=[50, 5])
    p.add_argument("--out", default=str(HERE / "results-step-backup"))
    args = p.parse_args()
    before = os.getloadavg()[0]
    started = datetime.now(timezone.utc)
    hooks, one_save = callback_us(), save_ms()
    with tempfile.TemporaryDirectory(prefix="dtr-step-backup-") as tmp:
        results = [measure(args.rounds, spe, Path(tmp)) for spe in args.steps_per_execution]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    doc = {"command": "python -m bench.trainer.step_backup " + " ".join(sys.argv[1:]),
           "time": started.strftime("%Y-%m-%d %H:%M UTC"), "commit": commit.strip(), "cpus": os.cpu_count(),
           "rounds": args.rounds, "loadavg_before": round(before, 2), "loadavg_after": round(os.getloadavg()[0], 2),
           "batch_hooks_us_per_execution": hooks, "one_save_in_process": one_save, "results": results}  # fmt: skip
    Path(args.out + ".json").write_text(json.dumps(doc, indent=2) + "\n")
    Path(args.out + ".md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
