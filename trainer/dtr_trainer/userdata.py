"""What load_data returned, checked and described (docs/own-model.md): two splits (train, eval) or three (train,
eval, test; docs/experiments.md#validation), each (x, y) NumPy arrays or an unbatched tf.data.Dataset of (x, y)
elements.

NumPy splits are checked with NumPy alone (before the strategy exists); a Dataset is read with TensorFlow
(after it). Each split becomes a `Split` (shapes, label kind and range, size); `combine` decides whether
the two agree and what build_model's context says about them. Every problem is an `Invalid` with a
sentence for the user; the caller adds where in the code it came from.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

SHUFFLE_BUFFER = 10_000  # a Dataset's shuffle buffer, in examples (NumPy data are shuffled whole)
_X_KINDS = "biufUS"  # bool, integers, floats, strings (a TextVectorization layer reads those)


class Invalid(Exception):
    """load_data's result is not what the contract says; the message says what is wrong."""


@dataclass(frozen=True)
class Split:
    data: Any  # (x, y) NumPy arrays, or a tf.data.Dataset of (x, y)
    size: int | None  # examples; None for a Dataset whose size TensorFlow does not know
    input_shape: tuple | None  # one example's x (None entries: not fixed); None for a structure of tensors
    label_shape: tuple
    classes: bool  # integer (or bool) labels: a classifier's
    label_range: tuple[int, int] | None  # (smallest, largest) class label, when counted

    @property
    def is_dataset(self) -> bool:
        return not isinstance(self.data, tuple)


@dataclass(frozen=True)
class Data:
    train: Split
    eval: Split  # evaluated during training (val_*), and at the end when there is no test split
    num_classes: int | None  # 1 + the largest label of the splits; None for regression labels
    test: Split | None = None  # evaluated once, at the end: the run's final figures

    @property
    def final(self) -> Split:
        """The split the final figures (the summary, the lineage) are of."""
        return self.test or self.eval

    @property
    def input_shape(self) -> tuple | None:
        return self.train.input_shape

    @property
    def label_shape(self) -> tuple:
        return self.train.label_shape

    @property
    def classes(self) -> bool:
        return self.train.classes

    @property
    def train_size(self) -> int:
        return int(self.train.size or 0)


def kind(value: Any) -> str:
    """`a list`, `an int`, `a tf.data.Dataset`: what a value is, for messages."""
    name = type(value).__name__
    if _is_dataset(value):
        name = "tf.data.Dataset"
    elif isinstance(value, np.ndarray):
        return f"a NumPy array of shape {list(value.shape)}"
    elif isinstance(value, (tuple, list)):
        name = f"{name} of {len(value)}"
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _is_dataset(value: Any) -> bool:
    tf = sys.modules.get("tensorflow")  # not imported: it cannot be a Dataset
    return tf is not None and isinstance(value, tf.data.Dataset)


def needs_tensorflow(result: Any) -> bool:
    """Whether a result holds a Dataset (read after the strategy exists)."""
    return isinstance(result, (tuple, list)) and any(_is_dataset(part) for part in result)


# ---------------------------------------------------------------- NumPy (no TensorFlow)


def _array(value: Any, what: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise Invalid(f"{what} is {kind(value)}, not a NumPy array (np.asarray it, or DataFrame.to_numpy())")
    if value.ndim == 0 or value.shape[0] == 0:
        raise Invalid(f"{what} holds no examples (shape {list(value.shape)})")
    return value


def _features(x: np.ndarray, what: str) -> np.ndarray:
    if x.dtype.kind not in _X_KINDS:
        raise Invalid(f"{what} has dtype {x.dtype}: give numbers (or strings), one regular array")
    if x.dtype.kind == "f":
        if not np.isfinite(x).all():
            raise Invalid(f"{what} has NaN or infinite values")
        return x.astype(np.float32, copy=False)  # Keras computes in float32
    return x


def _labels(y: np.ndarray, what: str) -> tuple[np.ndarray, bool]:
    """(labels, classes): integer or bool labels are classes, float labels targets of a regression."""
    if y.dtype.kind == "b":
        return y.astype(np.int32), True
    if y.dtype.kind in "iu":
        if y.min() < 0:
            raise Invalid(f"{what} has negative class labels (classes are 0, 1, ...)")
        return y, True
    if y.dtype.kind != "f":
        raise Invalid(f"{what} has dtype {y.dtype}: labels are integers (classes) or floats (regression)")
    if not np.isfinite(y).all():
        raise Invalid(f"{what} has NaN or infinite values")
    return y.astype(np.float32, copy=False), False


def numpy_split(value: Any, which: str) -> Split:
    """An (x, y) pair of NumPy arrays, checked."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise Invalid(f"its {which} split is {kind(value)}: give (x, y) NumPy arrays or an unbatched "
                      "tf.data.Dataset of (x, y)")
    x = _features(_array(value[0], f"{which} x"), f"{which} x")
    y, classes = _labels(_array(value[1], f"{which} y"), f"{which} y")
    if x.shape[0] != y.shape[0]:
        raise Invalid(f"{which} x has {x.shape[0]} examples but {which} y has {y.shape[0]}")
    label_range = (int(y.min()), int(y.max())) if classes else None
    return Split((x, y), int(x.shape[0]), tuple(x.shape[1:]), tuple(y.shape[1:]), classes, label_range)


# ---------------------------------------------------------------- tf.data (TensorFlow, after the strategy)


def _looks_batched(x_spec: Any, y_spec: Any) -> bool:
    """Both x and y start with an unknown dimension: what .batch() leaves (an unbatched example's label is
    a scalar or has a fixed shape)."""
    shapes = [getattr(s, "shape", None) for s in (x_spec, y_spec)]
    return all(s is not None and s.rank and s[0] is None for s in shapes)


def _scan(dataset: Any, classes: bool) -> tuple[int, tuple[int, int] | None]:
    """One pass: (examples, (smallest, largest) label when they are classes)."""
    import tensorflow as tf

    def labels(x, y):
        return tf.reshape(tf.cast(y, tf.int64), [-1]) if classes else tf.zeros([1], tf.int64)

    def step(acc, y):
        return acc[0] + 1, tf.minimum(acc[1], tf.reduce_min(y)), tf.maximum(acc[2], tf.reduce_max(y))

    big = tf.int64.max
    count, low, high = dataset.map(labels).reduce((tf.constant(0, tf.int64), tf.constant(big), tf.constant(-big)),
                                                  step)
    count = int(count)
    return count, ((int(low), int(high)) if classes and count else None)


def _size(dataset: Any, which: str) -> int | None:
    import tensorflow as tf

    cardinality = int(dataset.cardinality())
    if cardinality == int(tf.data.INFINITE_CARDINALITY):
        raise Invalid(f"its {which} Dataset never ends: leave out .repeat() (the harness repeats the training data)")
    return None if cardinality == int(tf.data.UNKNOWN_CARDINALITY) else cardinality


def _element_specs(dataset: Any, which: str) -> tuple:
    """(x's spec, y's spec) of an unbatched Dataset of (x, y) pairs whose y is one tensor."""
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise Invalid(f"its {which} Dataset's elements are {spec}, not (x, y) pairs")
    x_spec, y_spec = spec
    if not hasattr(y_spec, "dtype") or not hasattr(y_spec, "shape"):
        raise Invalid(f"its {which} Dataset's labels are {y_spec}, not one tensor")
    if _looks_batched(x_spec, y_spec):
        raise Invalid(f"its {which} Dataset looks batched (x and y both start with a dimension of unknown "
                      "size): leave out .batch(); the harness batches with the global batch")
    return x_spec, y_spec


def _are_classes(y_spec: Any, which: str) -> bool:
    if y_spec.dtype.is_floating:
        return False
    if y_spec.dtype.is_integer or y_spec.dtype.is_bool:
        return True
    raise Invalid(f"its {which} Dataset's labels are {y_spec.dtype.name}: labels are integers (classes) or "
                  "floats (regression)")


def dataset_split(dataset: Any, which: str) -> Split:
    """An unbatched tf.data.Dataset of (x, y), checked; labels and (when TensorFlow does not know it) the
    size are read in one pass over it."""
    x_spec, y_spec = _element_specs(dataset, which)
    classes = _are_classes(y_spec, which)
    size = _size(dataset, which)
    label_range = None
    if classes or size is None:
        size, label_range = _scan(dataset, classes)
    if size == 0:
        raise Invalid(f"its {which} Dataset is empty")
    input_shape = tuple(x_spec.shape) if hasattr(x_spec, "shape") else None
    return Split(dataset, size, input_shape, tuple(y_spec.shape), classes, label_range)


def split(value: Any, which: str) -> Split:
    return dataset_split(value, which) if _is_dataset(value) else numpy_split(value, which)


# ---------------------------------------------------------------- the two together (pure)


def _same_shape(a: tuple | None, b: tuple | None) -> bool:
    """Equal, an unknown (None) dimension matching any."""
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(p is None or q is None or p == q for p, q in zip(a, b))


def _num_classes(train: Split, *others: Split) -> int | None:
    """1 + the largest label of the splits, for class labels (all >= 0)."""
    ranges = [s.label_range for s in (train, *others) if s.label_range]
    if not (train.classes and ranges):
        return None
    if min(low for low, _ in ranges) < 0:
        raise Invalid("negative class labels (classes are 0, 1, ...)")
    return 1 + max(high for _, high in ranges)


def combine(train: Split, evaluation: Split, test: Split | None = None) -> Data:
    """The splits must hold the same kind of examples."""
    for which, other in (("eval", evaluation), ("test", test)):
        if other is None:
            continue
        if not _same_shape(train.input_shape, other.input_shape):
            raise Invalid(f"train x examples have shape {_shown(train.input_shape)} but {which} x examples "
                          f"{_shown(other.input_shape)}")
        if not _same_shape(train.label_shape, other.label_shape) or train.classes != other.classes:
            raise Invalid(f"train labels are {_labels_shown(train)} but {which} labels {_labels_shown(other)}")
    others = (evaluation,) if test is None else (evaluation, test)
    return Data(train, evaluation, _num_classes(train, *others), test)


def _shown(shape: tuple | None) -> str:
    return "(a structure)" if shape is None else str(list(shape))


def _labels_shown(s: Split) -> str:
    return f"{'class labels' if s.classes else 'float targets'} of shape {list(s.label_shape)}"


def describe(result: Any) -> Data:
    """load_data's return value -> Data, or Invalid saying what is wrong with it."""
    if not (isinstance(result, (tuple, list)) and len(result) in (2, 3)):
        raise Invalid(f"returned {kind(result)}: return (train, eval) or (train, eval, test), each (x, y) NumPy "
                      "arrays or an unbatched tf.data.Dataset of (x, y)")
    if len(result) == 2 and all(isinstance(part, np.ndarray) for part in result):
        raise Invalid("returned two arrays, one (x, y) split: return both, ((x_train, y_train), (x_eval, y_eval))")
    test = split(result[2], "test") if len(result) == 3 else None
    return combine(split(result[0], "train"), split(result[1], "eval"), test)
