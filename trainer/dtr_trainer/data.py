"""The built-in datasets as arrays (numpy only), and the sharded tf.data pipelines every run trains on.

Every built-in dataset becomes float32 images [N, H, W, C] in [0, 1] with int32 class labels 0, 1, ...,
split into a training part and a held-out evaluation part (mnist, fashion_mnist, digits and synthetic:
28x28x1, 10 classes; a .npz: its own shape and classes). `load_arrays` runs no TensorFlow op, so the CLI
checks data before it creates the strategy. `loader` makes one the load_data(ctx) of docs/own-model.md.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np
from dtr_contract import flags

from dtr_trainer import keras_cache, userdata
from dtr_trainer.errors import DataError
from dtr_trainer.user import GUIDE

KERAS_DATASETS = ("mnist", "fashion_mnist")
BUILTIN_DATASETS = (*KERAS_DATASETS, "digits", "synthetic")
EVAL_FRACTION = 0.2  # held out when a dataset has no test split of its own
NUM_CLASSES = 10  # of the built-in datasets (a .npz has its own)
IMAGE_SHAPE = (28, 28, 1)


@dataclass(frozen=True)
class Splits:
    x_train: np.ndarray
    y_train: np.ndarray
    x_eval: np.ndarray
    y_eval: np.ndarray

    @property
    def train_size(self) -> int:
        return int(self.x_train.shape[0])

    def pairs(self) -> tuple:
        """What load_data(ctx) returns: ((x_train, y_train), (x_eval, y_eval))."""
        return (self.x_train, self.y_train), (self.x_eval, self.y_eval)


# ---------------------------------------------------------------- pure helpers


def to_unit_images(x: np.ndarray, what: str) -> np.ndarray:
    """uint8 0..255 or float 0..1 images [N,H,W] or [N,H,W,C] -> float32 [N,H,W,C] in [0,1]."""
    x = _image_stack(x, what)
    if np.issubdtype(x.dtype, np.integer):
        return _scaled_integer_pixels(x, what)
    return _checked_float_pixels(x, what)


def _image_stack(x: np.ndarray, what: str) -> np.ndarray:
    """x as [N,H,W,C] with N > 0 (a channel axis added to [N,H,W])."""
    if x.ndim == 3:
        x = x[..., np.newaxis]
    if x.ndim != 4:
        raise DataError(f"{what}: the built-in models train on images [N,H,W] or [N,H,W,C], got {list(x.shape)}; "
                        f"for other data, write your own model and loader ({GUIDE})")
    if x.shape[0] == 0:
        raise DataError(f"{what}: no images")
    return x


def _scaled_integer_pixels(x: np.ndarray, what: str) -> np.ndarray:
    if x.min() < 0 or x.max() > 255:
        raise DataError(f"{what}: integer pixels must be in 0..255")
    return (x.astype(np.float32) / 255.0).astype(np.float32)


def _checked_float_pixels(x: np.ndarray, what: str) -> np.ndarray:
    if not np.issubdtype(x.dtype, np.floating):
        raise DataError(f"{what}: images must be integers 0..255 or floats 0..1, got {x.dtype}")
    if not np.isfinite(x).all() or x.min() < 0.0 or x.max() > 1.0:
        raise DataError(f"{what}: float pixels must be finite and in [0, 1]")
    return x.astype(np.float32)


def to_labels(y: np.ndarray, count: int, what: str) -> np.ndarray:
    y = np.asarray(y).reshape(-1)
    if y.shape[0] != count:
        raise DataError(f"{what}: {y.shape[0]} labels for {count} images")
    whole_floats = np.issubdtype(y.dtype, np.floating) and bool(np.all(np.mod(y, 1) == 0))
    if not (np.issubdtype(y.dtype, np.integer) or whole_floats) or y.min() < 0:
        raise DataError(f"{what}: labels must be class numbers 0, 1, ... (the built-in models classify; for "
                        f"regression, write your own model: {GUIDE})")
    return y.astype(np.int32)


def hold_out(x: np.ndarray, y: np.ndarray, seed: int, fraction: float = EVAL_FRACTION) -> Splits:
    """A seeded split into train and held-out eval (same on every worker)."""
    order = np.random.RandomState(seed).permutation(x.shape[0])
    n_eval = max(1, round(x.shape[0] * fraction))
    if x.shape[0] - n_eval < 1:
        raise DataError("dataset too small to hold out an evaluation split")
    ev, tr = order[:n_eval], order[n_eval:]
    return Splits(x[tr], y[tr], x[ev], y[ev])


def upscale_digits(images_8x8: np.ndarray) -> np.ndarray:
    """scikit-learn's 8x8 digits (0..16) -> [N,28,28,1] in [0,1]: 3x nearest upscale to 24x24,
    padded by 2 on each side, like MNIST's centred digit in a 28x28 frame."""
    x = images_8x8.reshape(-1, 8, 8).astype(np.float32) / 16.0
    x = np.kron(x, np.ones((1, 3, 3), dtype=np.float32))
    x = np.pad(x, ((0, 0), (2, 2), (2, 2)))
    return x[..., np.newaxis].astype(np.float32)


def synthetic(seed: int, n_train: int = 4096, n_eval: int = 1024) -> Splits:
    """Ten random prototype images plus noise: learnable, offline, any size."""
    rng = np.random.RandomState(seed)
    prototypes = rng.uniform(0.0, 1.0, size=(NUM_CLASSES, *IMAGE_SHAPE)).astype(np.float32)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.randint(0, NUM_CLASSES, size=n).astype(np.int32)
        noise = rng.normal(0.0, 0.35, size=(n, *IMAGE_SHAPE)).astype(np.float32)
        return np.clip(prototypes[y] + noise, 0.0, 1.0).astype(np.float32), y

    x_train, y_train = draw(n_train)
    x_eval, y_eval = draw(n_eval)
    return Splits(x_train, y_train, x_eval, y_eval)


def resolve_npz(data_dir: str, name: str) -> Path:
    """The .npz path under data_dir; refuse anything that escapes it (symlinks included)."""
    if not name.endswith(".npz"):
        raise DataError(f"unknown dataset {name!r}: choose {', '.join(BUILTIN_DATASETS)} or a .npz file")
    if os.path.isabs(name):
        raise DataError(f"dataset {name!r}: give a path relative to {flags.DATA_DIR}, not an absolute path")
    root = Path(data_dir).resolve()
    path = (root / name).resolve()
    if path != root and root not in path.parents:
        raise DataError(f"dataset {name!r} escapes {flags.DATA_DIR} {data_dir}")
    if not path.is_file():
        raise DataError(f"dataset file {name!r} not found in {flags.DATA_DIR} {data_dir}")
    return path


def validate_dataset_name(name: str, data_dir: str) -> None:
    """Cheap checks before the strategy exists (so bad input fails before joining the cluster)."""
    if name not in BUILTIN_DATASETS:
        resolve_npz(data_dir, name)


# ---------------------------------------------------------------- file I/O


def read_npz(path: Path | BinaryIO, seed: int, what: str) -> Splits:
    """Keys: x_train, y_train and optionally x_test, y_test (else 20% is held out). path: a file, or one opened
    (bytes already checked, an object in a bucket through tf.io.gfile: data_s3.py)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays: dict[str, np.ndarray] = {k: f[k] for k in f.files}
    except (OSError, ValueError) as exc:
        raise DataError(f"{what}: cannot read as .npz ({exc})") from None
    return splits_of(arrays, seed, what)


def splits_of(arrays: Mapping[str, np.ndarray], seed: int, what: str) -> Splits:
    """The arrays of a .npz's keys, checked and scaled (read_npz)."""
    missing = {"x_train", "y_train"} - set(arrays)
    if missing:
        raise DataError(f"{what}: missing keys {sorted(missing)} (need x_train, y_train; optional x_test, y_test)")
    x = to_unit_images(arrays["x_train"], what)
    y = to_labels(arrays["y_train"], x.shape[0], what)
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise DataError(f"{what}: x_test and y_test must come together")
    if "x_test" not in arrays:
        return hold_out(x, y, seed)
    xt = to_unit_images(arrays["x_test"], what)
    return Splits(x, y, xt, to_labels(arrays["y_test"], xt.shape[0], what))


def idx_arrays(files: Mapping[str, bytes], prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """(images [N, 28, 28], labels [N]) from the gzipped IDX files <prefix>-images-idx3-ubyte.gz and
    <prefix>-labels-idx1-ubyte.gz, as Keras' fashion_mnist loader reads them."""
    try:
        labels = np.frombuffer(gzip.decompress(files[f"{prefix}-labels-idx1-ubyte.gz"]), np.uint8, offset=8)
        images = np.frombuffer(gzip.decompress(files[f"{prefix}-images-idx3-ubyte.gz"]), np.uint8, offset=16)
        return images.reshape(len(labels), 28, 28), labels
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"fashion_mnist: cannot read {prefix}'s IDX files ({exc})") from None


def _mnist(files: Mapping[str, bytes], seed: int) -> Splits:
    return read_npz(io.BytesIO(files["mnist.npz"]), seed, "mnist")


def _fashion_mnist(files: Mapping[str, bytes], seed: int) -> Splits:
    (x_train, y_train), (x_test, y_test) = idx_arrays(files, "train"), idx_arrays(files, "t10k")
    return splits_of({"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}, seed,
                     "fashion_mnist")  # fmt: skip


# The Keras datasets from the bytes keras_cache checked (never the files again: they may have changed since).
KERAS_READERS: dict[str, Callable[[Mapping[str, bytes], int], Splits]] = {"mnist": _mnist,
                                                                         "fashion_mnist": _fashion_mnist}


def digits_arrays() -> tuple:
    """scikit-learn's bundled digits as its load_digits returns them (images [1797, 8, 8] of 0..16 as float64, and
    their labels), read from the file load_digits reads, without importing scikit-learn: that import took 0.45 s
    of every worker's start. No network either way."""
    import gzip
    import importlib.util

    package = importlib.util.find_spec("sklearn")  # found, not imported
    path = Path(package.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():  # another scikit-learn's layout: its own loader
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.images, bunch.target
    with gzip.open(path, mode="rt", encoding="utf-8") as rows:
        table = np.loadtxt(rows, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(int)


def _digits(data_dir: str, seed: int) -> Splits:
    images, labels = digits_arrays()
    return hold_out(upscale_digits(images), labels.astype(np.int32), seed)


def _keras(name: str, data_dir: str, seed: int) -> Splits:
    return KERAS_READERS[name](keras_cache.load(name, data_dir), seed)


def _npz(name: str, data_dir: str, seed: int) -> Splits:
    return read_npz(resolve_npz(data_dir, name), seed, f"dataset {name!r}")


# The one registry of the built-in datasets: name -> (data_dir, seed) -> Splits. Any other name is a .npz.
DATASETS: dict[str, Callable[[str, int], Splits]] = {
    "mnist": partial(_keras, "mnist"),
    "fashion_mnist": partial(_keras, "fashion_mnist"),
    "digits": _digits,
    "synthetic": lambda data_dir, seed: synthetic(seed),
}


def load_arrays(name: str, data_dir: str, seed: int) -> Splits:
    """The dataset named on the command line, as train/eval arrays."""
    return DATASETS.get(name, partial(_npz, name))(data_dir, seed)


def loader(name: str, content: bytes | None = None) -> Callable:
    """The built-in dataset `name` as a load_data(ctx) (docs/own-model.md). content: a --dataset-url file's bytes as
    their digest was checked (fetch.Fetcher.content), read instead of the file, which another run's code may have
    changed since; let go once the arrays are made (the first call: the run's load_data is called once for them)."""
    source, made = [content], []

    def load_data(ctx) -> tuple:
        if source[0] is not None:
            made.append(read_npz(io.BytesIO(source[0]), ctx.seed, f"dataset {name!r}"))
            source[0] = None
        return (made[-1] if made else load_arrays(name, ctx.data_dir, ctx.seed)).pairs()

    return load_data


# ---------------------------------------------------------------- tf.data


def steps_for(train_size: int, global_batch: int) -> int:
    return max(1, train_size // global_batch)


def _source(split: userdata.Split):
    """A Dataset of the split's examples, its size known to tf.data (Keras' evaluate needs it with
    steps_per_execution > 1; userdata counted what TensorFlow could not). Not for a Dataset that shards itself
    (own_policy): sharded by file, a worker's part is smaller than the size counted."""
    import tensorflow as tf

    if not split.is_dataset:
        return tf.data.Dataset.from_tensor_slices(split.data)
    if own_policy(split) is not None:
        return split.data
    return split.data.apply(tf.data.experimental.assert_cardinality(split.size))


def own_policy(split: userdata.Split):
    """The auto-shard policy a Dataset set itself (data_s3.py: FILE or DATA over files it streams), else None: such
    a split keeps it and is never cached in memory, which could not hold it."""
    import tensorflow as tf

    if not split.is_dataset:
        return None
    policy = split.data.options().experimental_distribute.auto_shard_policy
    return None if policy == tf.data.experimental.AutoShardPolicy.AUTO else policy


def shuffle_buffer(split: userdata.Split) -> int:
    """NumPy data are shuffled whole; a Dataset (maybe larger than memory) through a bounded buffer."""
    size = split.size or userdata.SHUFFLE_BUFFER
    return min(size, userdata.SHUFFLE_BUFFER) if split.is_dataset else size


def _options(policy):
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy
    options.deterministic = True
    return options


def make_datasets(data: userdata.Data, global_batch: int, seed: int, cache: bool = True):
    """Training (cached, shuffled, repeated) and evaluation pipelines batched by the global batch, from
    what load_data returned (NumPy arrays or unbatched Datasets alike).

    AutoShardPolicy.DATA needs every worker to produce the same element order: the
    shuffle is seeded, so it is, and each worker keeps its own share of every batch.
    """
    import tensorflow as tf

    options = _options(tf.data.experimental.AutoShardPolicy.DATA)
    own = own_policy(data.train)
    train_options = options if own is None else _options(own)

    train = _source(data.train)
    if cache and own is None:
        train = train.cache()
    train = (
        train.shuffle(shuffle_buffer(data.train), seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(global_batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(train_options)
    )
    return train, evaluation_pipeline(data.eval, global_batch)


def evaluation_pipeline(split: userdata.Split, global_batch: int):
    """A split evaluated (the eval split during training and after it, or the test split at the end), batched by
    the global batch, each worker its share of every batch."""
    import tensorflow as tf

    options = _options(tf.data.experimental.AutoShardPolicy.DATA)
    return _source(split).batch(global_batch).prefetch(tf.data.AUTOTUNE).with_options(options)
