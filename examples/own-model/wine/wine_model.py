"""A tabular classifier: which of 3 cultivars a wine comes from, from 13 chemical measurements.

The whole contract (docs/own-model.md): load_data(ctx) returns the training and held-out data as NumPy
arrays, build_model(ctx) an uncompiled Keras model; the harness compiles it (integer labels and a
softmax over 3 units: sparse categorical cross-entropy and accuracy), batches, shards, trains on every
worker and exports the model, which takes raw measurements (`features`, float32 [batch, 13]) and returns
`probabilities` [batch, 3].

Run it locally, one worker (the data first: make_data.py, which needs scikit-learn):

    python make_data.py /tmp/wine/data
    python -m dtr_trainer --code wine_model.py --dataset wine.npz --data-dir /tmp/wine/data \\
        --export-dir /tmp/wine/models/wine --epochs 30 --batch-size-per-worker 16 --learning-rate 0.01

Two local workers as on a cluster, and sending the file with a run: docs/own-model.md.
"""

import os

import numpy as np
import tensorflow as tf


def _arrays(ctx):
    """The .npz make_data.py wrote, in the run's data directory (--dataset names it)."""
    with np.load(os.path.join(ctx.data_dir, ctx.dataset or "wine.npz")) as f:
        return {key: f[key] for key in f.files}


def load_data(ctx):
    d = _arrays(ctx)
    return (d["x_train"], d["y_train"]), (d["x_test"], d["y_test"])


def build_model(ctx):
    # The measurements differ in scale by 1000x: standardize inside the model, with the training
    # data's statistics, so the exported model takes raw measurements.
    x_train = _arrays(ctx)["x_train"]
    inputs = tf.keras.Input(shape=ctx.input_shape, name="features")
    x = tf.keras.layers.Normalization(mean=x_train.mean(axis=0), variance=x_train.var(axis=0))(inputs)
    x = tf.keras.layers.Dense(int(ctx.params.get("width", 16)), activation="relu")(x)  # --param width=64
    outputs = tf.keras.layers.Dense(ctx.num_classes, activation="softmax", name="probabilities")(x)
    return tf.keras.Model(inputs, outputs)
