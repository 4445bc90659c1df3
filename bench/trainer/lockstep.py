"""What running in step costs on this machine, with no communication at all.

A diagnostic for bench/trainer/results.md. Two processes, each pinned to one core, each trains
the cnn on its own (no MWMS, no gRPC, no all-reduce) for the same steps, in two modes:

- free: each goes at its own pace (what the two independent processes of the scaling bench do);
- lockstep: both wait at a barrier before every step (what any synchronous trainer does: MWMS
  waits at the gradient all-reduce), so their steps start together and their phases line up.

The barrier costs microseconds. What lockstep loses besides it is the part of the scaling gap
that no communication setting can remove: waiting for the slower worker at every step (wall)
and two cores running the same memory-heavy kernels at the same moment (CPU per step).

    .venv/trainer/bin/python bench/trainer/lockstep.py [--steps 300] [--batch 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path

WARMUP = 20


def worker(core: int, steps: int, batch: int, barrier, out) -> None:
    os.sched_setaffinity(0, {core})  # before TF starts its thread pools: they size themselves by it
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np
    import tensorflow as tf
    from dtr_trainer.models import BUILT_IN
    from dtr_trainer.user import Context

    tf.keras.utils.set_random_seed(1)
    model = BUILT_IN["cnn"](Context(worker_index=0, num_workers=1, is_chief=True, batch_size_per_worker=batch,
                                    global_batch_size=batch, data_dir="", seed=1, epochs=1, learning_rate=0.001,
                                    dataset=None, input_shape=(28, 28, 1), label_shape=(), num_classes=10))
    optimizer = tf.keras.optimizers.Adam(0.001)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
    rng = np.random.default_rng(core)
    x = tf.constant(rng.random((batch, 28, 28, 1), dtype=np.float32))
    y = tf.constant(rng.integers(0, 10, batch))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    for _ in range(WARMUP):
        step()
    if barrier is not None:
        barrier.wait()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        if barrier is not None:
            barrier.wait()
        step().numpy()  # .numpy(): the step is finished before the next barrier
    out.put({"core": core, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu})


def run(mode: str, steps: int, batch: int) -> dict:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2) if mode == "lockstep" else None
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(core, steps, batch, barrier, out)) for core in (0, 1)]
    for p in procs:
        p.start()
    results = sorted((out.get(timeout=900) for _ in procs), key=lambda r: r["core"])
    for p in procs:
        p.join()
    return {"mode": mode, "steps_per_s": sum(steps / r["wall"] for r in results),
            "cpu_ms_per_step": statistics.mean(r["cpu"] / steps * 1e3 for r in results),
            "core_share": statistics.mean(r["cpu"] / r["wall"] for r in results)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results-lockstep.json"))
    args = p.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    ratios = []
    for rnd in range(args.rounds):
        free, lock = run("free", args.steps, args.batch), run("lockstep", args.steps, args.batch)
        ratio = {"round": rnd + 1, "throughput": lock["steps_per_s"] / free["steps_per_s"],
                 "cpu_per_step": lock["cpu_ms_per_step"] / free["cpu_ms_per_step"], "free": free, "lockstep": lock}
        ratios.append(ratio)
        print(json.dumps(ratio), flush=True)
    summary = {"date": started, "steps": args.steps, "batch": args.batch, "model": "cnn",
               "throughput_ratio_median": round(statistics.median(r["throughput"] for r in ratios), 3),
               "cpu_per_step_ratio_median": round(statistics.median(r["cpu_per_step"] for r in ratios), 3),
               "rounds": ratios}
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(f"lockstep / free, median of {args.rounds} rounds ({args.steps} steps, batch {args.batch}): "
          f"throughput {summary['throughput_ratio_median']:.3f}, "
          f"CPU per step {summary['cpu_per_step_ratio_median']:.3f} "
          f"-> {args.out}")


if __name__ == "__main__":
    main()
