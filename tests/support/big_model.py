"""A model file of your own (docs/own-model.md) with 16.8 M parameters, for tests and benchmarks that need a large
SavedModel or backup. Imported as `support.big_model`."""

# 67 MB of variables (a backup with Adam's two slots: 193 MiB): its upload and copies last long enough (about a
# second) for a watcher polling the bucket to kill the chief inside them.
BIG_MODEL = '''
import numpy as np
import tensorflow as tf


def load_data(ctx):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    return (x, y), (x[:32], y[:32])


def build_model(ctx):
    inputs = tf.keras.Input(shape=ctx.input_shape, name="features")
    x = tf.keras.layers.Dense(4096, activation="relu")(inputs)
    x = tf.keras.layers.Dense(4096, activation="relu")(x)
    outputs = tf.keras.layers.Dense(ctx.num_classes, activation="softmax", name="probabilities")(x)
    return tf.keras.Model(inputs, outputs)
'''
