"""A 1-D sequence regression: the next value of a time series from the 24 before it, read from a directory
of CSV files (one series per file, columns `t,value`; make_data.py writes some).

load_data(ctx) returns unbatched tf.data.Datasets of (window, next value): the harness counts them,
caches, shuffles, batches with the global batch and shards them across the workers. build_model(ctx)
compiles its model itself: the harness keeps its loss and metrics (the run reports `loss`, `mae` and
`rmse`; `--metric mae` makes mae the headline) and still applies its own tuning. The exported model
takes `window` (float32 [batch, 24, 1]) and returns `next_value` [batch, 1].

Run it locally, one worker:

    python make_data.py /tmp/series/data
    python -m dtr_trainer --code series_model.py --dataset series --data-dir /tmp/series/data \\
        --export-dir /tmp/series/models/series --epochs 5 --batch-size-per-worker 32 --metric mae

Two local workers as on a cluster, and sending the file with a run: docs/own-model.md.
"""

import os

import tensorflow as tf

WINDOW = 24  # values the model sees
STRIDE = 2  # between the starts of two windows of one series


def _value(line):
    t, value = tf.io.decode_csv(line, record_defaults=[[0], [0.0]])  # the columns t,value
    del t
    return value


def _as_tensor(window):
    return window.batch(WINDOW + 1)


def _input_and_target(values):
    return tf.reshape(values[:WINDOW], [WINDOW, 1]), values[WINDOW]


def _windows(path):
    """(the WINDOW values, the next one) for each window of one CSV file."""
    values = tf.data.TextLineDataset(path).skip(1).map(_value)  # skip the header
    windows = values.window(WINDOW + 1, shift=STRIDE, drop_remainder=True).flat_map(_as_tensor)
    return windows.map(_input_and_target)


def _examples(directory):
    # Sorted, not shuffled: every worker must read the same sequence (the harness shuffles, seeded).
    files = tf.data.Dataset.list_files(os.path.join(directory, "*.csv"), shuffle=False)
    return files.flat_map(_windows)


def load_data(ctx):
    root = os.path.join(ctx.data_dir, ctx.dataset or "series")
    return _examples(os.path.join(root, "train")), _examples(os.path.join(root, "eval"))


def build_model(ctx):
    inputs = tf.keras.Input(shape=ctx.input_shape, name="window")
    x = tf.keras.layers.Conv1D(16, 5, activation="relu")(inputs)
    x = tf.keras.layers.Flatten()(x)
    x = tf.keras.layers.Dense(32, activation="relu")(x)
    outputs = tf.keras.layers.Dense(1, name="next_value")(x)
    model = tf.keras.Model(inputs, outputs)
    model.compile(optimizer=tf.keras.optimizers.Adam(ctx.learning_rate), loss="mse",
                  metrics=[tf.keras.metrics.MeanAbsoluteError(name="mae"),
                           tf.keras.metrics.RootMeanSquaredError(name="rmse")])
    return model
