"""Latency of one gradient-sized all-reduce between two MWMS workers, each pinned to one core.

A diagnostic for bench/trainer/results.md: how much of a training step the gradient all-reduce
takes on its own (the cnn model has 93,322 parameters, so one all-reduce of about 365 KB).

    .venv/trainer/bin/python -m bench.trainer.allreduce [--elements 93322] [--calls 300]   (from the repository root)

Runs itself twice as the two workers (TF_CONFIG on loopback) and prints each worker's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from devcluster.controlplane import free_ports


def worker(elements: int, calls: int) -> None:
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # first TF call: reads TF_CONFIG
    payload = tf.ones([elements])

    def reduce():
        return tf.distribute.get_replica_context().all_reduce("sum", tf.identity(payload))

    @tf.function
    def step():
        return strategy.run(reduce)

    for _ in range(20):  # warm-up: tracing, first collective
        step()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        step()
    wall, cpu = (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    print(f"worker {task}: all-reduce of {elements * 4 / 1024:.0f} KB: {wall * 1e3:.2f} ms wall, "
          f"{cpu * 1e3:.2f} ms CPU per call ({calls} calls)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--elements", type=int, default=93_322, help="float32 elements (default: the cnn's parameters)")
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.elements, args.calls)
        return
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(2)]}
    procs = []
    for i in range(2):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "no_proxy": "localhost,127.0.0.1",
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})}
        cmd = ["taskset", "-c", str(i), sys.executable, "-m", "bench.trainer.allreduce", "--worker",
               "--elements", str(args.elements), "--calls", str(args.calls)]
        procs.append(subprocess.Popen(cmd, env=env))
    codes = [proc.wait(timeout=600) for proc in procs]
    if any(codes):
        raise SystemExit(f"a worker failed: exit codes {codes}")


if __name__ == "__main__":
    main()
