"""The ceiling of synchronous data-parallel training, as run in pods: each worker computes the cnn's gradients
on a batch already in memory and the workers all-reduce them once per step (MultiWorkerMirroredStrategy, all
gradients in one pack, as the trainer), nothing else: no input pipeline, no metrics, no Keras loop, no
checkpoint. With one worker (no TF_CONFIG peers) the same step without the all-reduce.

bench/scaling/run.py runs it in the trainer image as a TFJob (python 3.9, TensorFlow 2.11), with the pods' CPU
limits of the trainer's runs and the trainer's compute threads for them; it prints one JSON line:

    {"workers": 2, "task": 0, "batch": 64, "steps": 300, "step_s": ..., "cpu_per_step_s": ...,
     "allreduce_s": ..., "examples_per_second": ...}

step_s is the wall time of a step over --steps steps after --warmup; allreduce_s (several workers only) the wall
time of one all-reduce of the same gradients alone, the workers calling it back to back; examples_per_second the
global figure (batch x workers / step_s).
"""

import argparse
import json
import os
import time

WARMUP = 20


def cnn(batch: int, workers: int):
    """The trainer's built-in cnn for 28x28x1 images and 10 classes (dtr_trainer.models), built as the trainer does."""
    from dtr_trainer.models import BUILT_IN
    from dtr_trainer.user import Context

    return BUILT_IN["cnn"](Context(worker_index=0, num_workers=workers, is_chief=True, batch_size_per_worker=batch,
                                   global_batch_size=batch * workers, data_dir="", seed=1, epochs=1,
                                   learning_rate=0.001, dataset=None, input_shape=(28, 28, 1), label_shape=(),
                                   num_classes=10))


def peers() -> tuple[int, int]:
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    workers = len((config.get("cluster") or {}).get("worker") or []) or 1
    return workers, int((config.get("task") or {}).get("index") or 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64, help="per worker")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--allreduce-calls", type=int, default=200)
    args = parser.parse_args()
    workers, task = peers()
    from dtr_trainer import cpus

    cpus.size_thread_pools(os.environ)  # the trainer's threads (dtr_trainer/cpus.py), so the two compare
    import numpy as np
    import tensorflow as tf

    # The strategy before any other TensorFlow op (MWMS's rule); one worker: the default strategy, no collective.
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if workers > 1 else tf.distribute.get_strategy()
    tf.keras.utils.set_random_seed(1 + task)
    rng = np.random.default_rng(task)
    x = tf.constant(rng.random((args.batch, 28, 28, 1), dtype=np.float32))
    y = tf.constant(rng.integers(0, 10, args.batch))
    with strategy.scope():
        model = cnn(args.batch, workers)
        optimizer = tf.keras.optimizers.Adam(0.001)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(reduction=tf.keras.losses.Reduction.NONE)

    def replica_step():
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                              global_batch_size=args.batch * workers)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905 (Python 3.9: no strict)

    @tf.function
    def steps(n):  # a loop inside the function, as the trainer's steps_per_execution: no Python between steps
        for _ in tf.range(n):
            strategy.run(replica_step)

    def allreduce_only():
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, [tf.zeros_like(v) for v in model.trainable_variables])

    @tf.function
    def allreduce():
        strategy.run(allreduce_only)

    steps(tf.constant(WARMUP))
    wall, cpu = time.perf_counter(), time.process_time()
    steps(tf.constant(args.steps))
    step_s = (time.perf_counter() - wall) / args.steps
    cpu_per_step = (time.process_time() - cpu) / args.steps
    allreduce_s = None
    if workers > 1:
        for _ in range(WARMUP):
            allreduce()
        wall = time.perf_counter()
        for _ in range(args.allreduce_calls):
            allreduce()
        allreduce_s = (time.perf_counter() - wall) / args.allreduce_calls
    print(json.dumps({"workers": workers, "task": task, "batch": args.batch, "steps": args.steps,
                      "step_s": step_s, "cpu_per_step_s": cpu_per_step, "allreduce_s": allreduce_s,
                      "examples_per_second": args.batch * workers / step_s}), flush=True)


if __name__ == "__main__":
    main()
