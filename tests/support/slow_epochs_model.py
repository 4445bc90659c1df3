"""A run's own model (docs/own-model.md) whose epochs last seconds without the CPU's work: a two-class softmax on
random features, with a callback that sleeps at the start of every epoch but the first (ctx.params epoch_seconds,
default 8): the time the status has to show the epoch before. The node's progress test (tests/node/test_progress.py)
needs epochs longer than the operator's reads of the chief's log are apart, not training: the built-in digits CNN
made them that long with 1000 steps each (three epochs: 60 CPU seconds of the node's pods here, against 7 with this
file). One label in ten is flipped, so accuracy stays below 1 (the table shows 0.xx)."""

import time

import numpy as np
import tensorflow as tf


def load_data(ctx):
    rng = np.random.default_rng(ctx.seed)
    x = rng.normal(size=(1280, 8)).astype(np.float32)
    y = (x @ rng.normal(size=8) > 0).astype(np.int64)
    flipped = rng.random(y.shape) < 0.1
    y = np.where(flipped, 1 - y, y)
    return (x[:1024], y[:1024]), (x[1024:], y[1024:])


def build_model(ctx):
    inputs = tf.keras.Input(shape=ctx.input_shape, name="features")
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(2, activation="softmax", name="classes")(inputs))
    model.compile(optimizer=tf.keras.optimizers.SGD(ctx.learning_rate), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


class _SlowEpochs(tf.keras.callbacks.Callback):
    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_epoch_begin(self, epoch, logs=None):
        if epoch > 0:
            time.sleep(self.seconds)


def callbacks(ctx):
    return [_SlowEpochs(float(ctx.params.get("epoch_seconds", 8)))]
