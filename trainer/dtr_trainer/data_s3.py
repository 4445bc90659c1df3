"""The built-in models' data from an object store (--dataset s3://...; docs/object-storage.md#the-data): the load_data
of a run whose dataset is an s3:// URI, from the files its preflight listed (preflight.py).

- TFRecord shards (records.py's schema): read through TensorFlow's s3:// (tensorflow-io registers it on `import
  tensorflow`), never cached in memory by the harness (tensorflow-io's reads seem to hold memory per open file in
  proportion to its size: small shards, docs/object-storage.md#memory). The training files are shared out by file
  when there are at least as many as workers (worker i reads files[i::n] of the sorted list: tf.data's
  AutoShardPolicy.FILE), else by data (every worker reads them all, and keeps its share of each batch); the
  evaluation files (names starting with `eval`) by data.
- One .npz object: read whole, as from the volume (data.read_npz), through tf.io.gfile.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence

from dtr_trainer import data, records
from dtr_trainer.errors import DataError

TFRECORD_BUFFER = 8 * 1024 * 1024  # per file read: 8 MiB read 5% faster than 256 KiB from S3 (bench/s3/results-read.md)
CYCLE_LENGTH = 8  # files read at once by each worker (the spike's pipeline)
FILE, DATA = "FILE", "DATA"


# ---------------------------------------------------------------- pure


def shard_policy(files: int, workers: int) -> str:
    """By file when every worker gets at least one, else by data (tf.data's FILE policy raises with fewer)."""
    return FILE if files >= workers else DATA


def worker_files(files: Sequence[str], index: int, workers: int) -> list[str]:
    """The training files worker `index` reads by file: every workers-th of the sorted list, from its own index
    (what AutoShardPolicy.FILE does with the file list in this order)."""
    return list(sorted(files)[index::workers])


def splits(files: Sequence[str], uri: str) -> tuple[list[str], list[str]]:
    """(training files, evaluation files) of a TFRecord dataset; DataError when it is not one the built-in models
    read."""
    other = [f for f in files if not records.is_tfrecord(f)]
    if other:
        raise DataError(f"{uri}: {posixpath.basename(other[0])} is not a TFRecord shard ({', '.join(records.SUFFIXES)})"
                        ": the built-in models read TFRecord shards or one .npz (docs/object-storage.md#the-data)")
    train = sorted(f for f in files if not records.is_eval(f))
    evaluation = sorted(f for f in files if records.is_eval(f))
    _both(train, evaluation, uri, len(files))
    return train, evaluation


def _both(train: Sequence[str], evaluation: Sequence[str], uri: str, count: int) -> None:
    if not train or not evaluation:
        missing = "training shards" if not train else f"evaluation shards (names starting with {records.EVAL_PREFIX})"
        raise DataError(f"{uri}: no {missing} among its {count} file(s) (docs/object-storage.md#the-data)")


def describe_share(files: Sequence[str], index: int, workers: int) -> str:
    """The log line of what this worker reads: which files by file, or all of them by data."""
    if shard_policy(len(files), workers) == DATA:
        return f"{len(files)} training file(s) for {workers} workers: shared by data (every worker reads them all)"
    mine = worker_files(files, index, workers)
    return (f"training files shared by file: this worker reads {len(mine)} of {len(files)}: "
            + ", ".join(posixpath.basename(f) for f in mine))  # fmt: skip


# ---------------------------------------------------------------- tf.data


def tfrecords(files: Sequence[str], policy: str | None):
    """An unbatched Dataset of (image, label) over the files in this order; with a policy, its own auto-shard policy
    (data.make_datasets keeps it, and does not cache the split in memory)."""
    import tensorflow as tf

    names = tf.data.Dataset.from_tensor_slices(list(files))
    dataset = names.interleave(lambda f: tf.data.TFRecordDataset(f, buffer_size=TFRECORD_BUFFER),
                               cycle_length=min(CYCLE_LENGTH, len(files)), num_parallel_calls=tf.data.AUTOTUNE,
                               deterministic=True).map(records.parse, num_parallel_calls=tf.data.AUTOTUNE)  # fmt: skip
    if policy is None:
        return dataset
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, policy)
    return dataset.with_options(options)


def read_npz(uri: str, seed: int) -> data.Splits:
    import tensorflow as tf

    with tf.io.gfile.GFile(uri, "rb") as f:
        return data.read_npz(f, seed, f"dataset {uri}")


def loader(uri: str, files: Sequence[str], log: Callable[[str], None]) -> Callable:
    """The built-in models' load_data(ctx) for the dataset at uri, whose files the preflight listed."""
    if len(files) == 1 and files[0].endswith(".npz"):
        return lambda ctx: read_npz(files[0], ctx.seed).pairs()
    train, evaluation = splits(files, uri)
    # Imported now, so that the harness's guard refuses this load_data's first op before the strategy exists and
    # calls it again after (user.load_data_before_strategy): imported inside it, the op would run unguarded.
    import tensorflow  # noqa: F401

    def load_data(ctx) -> tuple:
        # Called before the strategy too, where its first op is refused (user.py): the line once, after it.
        datasets = tfrecords(train, shard_policy(len(train), ctx.num_workers)), tfrecords(evaluation, None)
        log(describe_share(train, ctx.worker_index, ctx.num_workers))
        return datasets

    return load_data
