"""The TFRecord schema the built-in models read (docs/object-storage.md#the-data), and a writer of such shards.

Each record is a tf.train.Example with two features:

    image   float_list of 784 values in [0, 1]: a 28x28x1 image, row by row
    label   int64_list of 1 value: the class, 0 .. 9

Files are shards of a dataset: names starting with `eval` hold the evaluation split, every other one training data
(`train-00000-of-00004.tfrecord` ... and `eval-00000-of-00001.tfrecord`, as `write` names them). The writer runs in
the trainer's environment, to a directory or to s3:// (the store's settings in the environment, as in a pod):

    python -m dtr_trainer.records digits s3://datasets/digits --shards 4
"""

from __future__ import annotations

import argparse
import posixpath
import sys
from collections.abc import Sequence

import numpy as np
from dtr_contract import flags

IMAGE, LABEL = "image", "label"
IMAGE_SHAPE = (28, 28, 1)
IMAGE_SIZE = 28 * 28
EVAL_PREFIX = "eval"  # a shard whose name starts with this is the evaluation split
SUFFIXES = (".tfrecord", ".tfrecords", ".tfr")


def is_eval(uri: str) -> bool:
    return posixpath.basename(uri).startswith(EVAL_PREFIX)


def is_tfrecord(uri: str) -> bool:
    return uri.endswith(SUFFIXES)


def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def features() -> dict:
    import tensorflow as tf

    return {IMAGE: tf.io.FixedLenFeature([IMAGE_SIZE], tf.float32), LABEL: tf.io.FixedLenFeature([], tf.int64)}


def parse(serialized):
    """One record -> (image [28, 28, 1] float32, label int32): what the built-in models train on."""
    import tensorflow as tf

    example = tf.io.parse_single_example(serialized, features())
    return tf.reshape(example[IMAGE], IMAGE_SHAPE), tf.cast(example[LABEL], tf.int32)


def example(image: np.ndarray, label: int) -> bytes:
    import tensorflow as tf

    feature = {IMAGE: tf.train.Feature(float_list=tf.train.FloatList(value=np.asarray(image, np.float32).ravel())),
               LABEL: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}  # fmt: skip
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write(x: np.ndarray, y: np.ndarray, base: str, split: str, shards: int) -> list[str]:
    """x [N, 28, 28, 1] in [0, 1] and y [N] as `shards` files <base>/<split>-i-of-n.tfrecord, examples dealt out in
    turn (shard i holds examples i, i + shards, ...); the files written. A shard is uploaded when it is closed."""
    import tensorflow as tf

    if x.shape[1:] != IMAGE_SHAPE or x.shape[0] != y.shape[0] or x.shape[0] < shards:
        raise ValueError(f"need {shards} or more images {list(IMAGE_SHAPE)} with one label each, got {list(x.shape)}")
    paths = [posixpath.join(base, shard_name(split, i, shards)) for i in range(shards)]
    for i, path in enumerate(paths):
        with tf.io.TFRecordWriter(path) as writer:
            for image, label in zip(x[i::shards], y[i::shards]):
                writer.write(example(image, label))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    from dtr_trainer import data

    parser = argparse.ArgumentParser(prog="python -m dtr_trainer.records",
                                     description="write a built-in dataset as TFRecord shards (docs/object-storage.md)")
    parser.add_argument("dataset", choices=("digits", "synthetic"), help="a built-in dataset that needs no network")
    parser.add_argument("base", help="a directory or an s3:// prefix")
    parser.add_argument("--shards", type=int, default=4, help="training shards (default 4); evaluation: 1")
    parser.add_argument(flags.SEED, type=int, default=42, help="the held-out split's seed, as the trainer's")
    args = parser.parse_args(argv)
    splits = data.load_arrays(args.dataset, "", args.seed)
    written = (write(splits.x_train, splits.y_train, args.base, "train", args.shards)
               + write(splits.x_eval, splits.y_eval, args.base, EVAL_PREFIX, 1))  # fmt: skip
    print("\n".join(written), file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
