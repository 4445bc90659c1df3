"""Your own model on TFRecord shards in an object store (docs/object-storage.md#your-own-load_data).

ctx.dataset is the run's s3:// URI as given (spec.training.dataset); the store's endpoint and keys are in the
environment, where TensorFlow's s3:// reads them. The shards here are the built-in schema's (`python -m
dtr_trainer.records digits s3://datasets/digits`): `image`, 784 floats, and `label`, one int64; names starting
with `eval` hold the evaluation split.

    spec:
      objectStore: {endpoint: http://s3.example.com:8333, credentialsSecret: s3-keys}
      training: {code: {configMap: s3-digits-code}, dataset: s3://datasets/digits}
"""

import tensorflow as tf

FEATURES = {"image": tf.io.FixedLenFeature([784], tf.float32), "label": tf.io.FixedLenFeature([], tf.int64)}


def _parse(record):
    example = tf.io.parse_single_example(record, FEATURES)
    return tf.reshape(example["image"], (28, 28, 1)), example["label"]


def _split(ctx, pattern):
    files = sorted(tf.io.gfile.glob(f"{ctx.dataset.rstrip('/')}/{pattern}"))
    return tf.data.TFRecordDataset(files, num_parallel_reads=4).map(_parse)


def load_data(ctx):
    # Unbatched (x, y) Datasets: the harness shuffles, batches with the global batch and shares them out.
    return _split(ctx, "train-*.tfrecord"), _split(ctx, "eval-*.tfrecord")


def build_model(ctx):
    inputs = tf.keras.Input(shape=ctx.input_shape, name="image")
    x = tf.keras.layers.Conv2D(16, 3, activation="relu")(inputs)
    x = tf.keras.layers.MaxPooling2D()(x)
    x = tf.keras.layers.Flatten()(x)
    outputs = tf.keras.layers.Dense(ctx.num_classes, activation="softmax", name="probabilities")(x)
    return tf.keras.Model(inputs, outputs)
