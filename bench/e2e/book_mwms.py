"""The book's way: a plain Keras MultiWorkerMirroredStrategy script, as a book chapter on distributed training
writes it (strategy first, global batch = per-worker batch x workers, auto-sharded tf.data, fit, evaluate, every
worker saves and only the chief's copy is kept). Nothing of distml: bench/e2e/run.py runs it in a plain TFJob beside
the same training as a DistTrainingRun. The data and the model are the trainer's `digits` and `cnn` (same split,
same seed, same layers), so the two reach the same accuracy by the same work.

    python book_mwms.py --model-dir /mnt/dtr/models/book [--epochs 8] [--batch-per-worker 32] [--learning-rate 0.002]
"""

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

SEED = 42


def digits():
    """scikit-learn's 8x8 digits upscaled to 28x28x1 and split 80/20 with the seed (as the trainer does)."""
    bunch = load_digits()
    x = np.kron(bunch.images.astype(np.float32) / 16.0, np.ones((1, 3, 3), dtype=np.float32))
    x = np.pad(x, ((0, 0), (2, 2), (2, 2)))[..., np.newaxis]
    y = bunch.target.astype(np.int32)
    order = np.random.RandomState(SEED).permutation(len(x))
    n_eval = round(len(x) * 0.2)
    return (x[order[n_eval:]], y[order[n_eval:]]), (x[order[:n_eval]], y[order[:n_eval]])


def cnn():
    layers = tf.keras.layers
    inputs = tf.keras.Input(shape=(28, 28, 1), name="images")
    x = layers.Conv2D(32, 3, activation="relu")(inputs)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(64, 3, activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(64, 3, activation="relu")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(64, activation="relu")(x)
    outputs = layers.Dense(10, activation="softmax", name="probabilities")(x)
    return tf.keras.Model(inputs, outputs)


def sharded(dataset):
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-per-worker", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=0.002)
    args = parser.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # before any other TensorFlow op
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    is_chief = task["index"] == 0
    global_batch = args.batch_per_worker * strategy.num_replicas_in_sync

    (x_train, y_train), (x_test, y_test) = digits()
    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train), seed=SEED)
    train = sharded(train.repeat().batch(global_batch))
    test = sharded(tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(global_batch))

    with strategy.scope():
        model = cnn()
        model.compile(optimizer=tf.keras.optimizers.Adam(args.learning_rate),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    steps = len(x_train) // global_batch
    started = time.time()
    history = model.fit(train, epochs=args.epochs, steps_per_epoch=steps, verbose=2)
    seconds = time.time() - started
    loss, accuracy = model.evaluate(test, verbose=0)

    # Every worker saves (MWMS's save is collective); only the chief's copy is the model.
    path = os.path.join(args.model_dir, "1") if is_chief else f"/tmp/book-worker-{task['index']}"
    model.save(path)
    if not is_chief:
        shutil.rmtree(path, ignore_errors=True)
    if is_chief:
        print(json.dumps({"accuracy": accuracy, "loss": loss, "train_seconds": round(seconds, 3),
                          "examples_per_second": round(steps * global_batch * args.epochs / seconds, 1),
                          "final_train_accuracy": history.history["accuracy"][-1]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
