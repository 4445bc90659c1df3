"""A run's own model (docs/own-model.md) whose loss diverges at a large learning rate: a linear regression on
random data, compiled with plain SGD at the run's learning rate. Each step multiplies the error by about
|1 - 2 lr |x|^2|: at 0.01 it converges, at 10 it overflows float32 within a few dozen steps and the loss becomes
inf, then nan. No data to put anywhere: load_data draws it from the run's seed."""

import numpy as np
import tensorflow as tf


def load_data(ctx):
    rng = np.random.default_rng(ctx.seed)
    x = rng.normal(size=(2048, 8)).astype(np.float32)
    y = (x @ rng.normal(size=(8, 1)) + 0.5).astype(np.float32)
    return (x[:1536], y[:1536]), (x[1536:], y[1536:])


def build_model(ctx):
    inputs = tf.keras.Input(shape=ctx.input_shape, name="features")
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, name="y")(inputs))
    model.compile(optimizer=tf.keras.optimizers.SGD(ctx.learning_rate), loss="mse", metrics=["mae"])
    return model
