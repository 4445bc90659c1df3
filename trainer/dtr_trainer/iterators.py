"""The input iterators of fit and evaluate kept until the process ends (TensorFlow 2.11).

Destroying a distributed dataset's iterator waits for the tf.data autotuning thread of the per-device pipeline that
MultiWorkerMirroredStrategy builds under it to wake from its sleep, whose period doubles from 10 ms up to a minute:
at the end of fit that was 0 to 13 s, at random, and the peer waited as long at the evaluation's first collective
(docs/performance.md#the-trainers-time-outside-its-epochs). That pipeline is TensorFlow's own: the options of ours
do not reach it. The trainer leaves with os._exit (main.cli), so an iterator kept past its loop is never destroyed
and nothing waits. What it holds (the training set's cache and shuffle buffer) stays allocated until the end instead
of being freed before the evaluation; with --retain-memory (the default) the freed memory stayed in the process's
heap anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# (make_function method, the attribute Keras calls with the iterator)
LOOPS = (("make_train_function", "train_function"), ("make_test_function", "test_function"))


class Kept:
    """Every iterator seen, once each."""

    def __init__(self) -> None:
        self.iterators: list = []

    def add(self, iterator: Any) -> None:
        if not any(kept is iterator for kept in self.iterators):
            self.iterators.append(iterator)


def _keeping(function: Callable, kept: Kept) -> Callable:
    def call(iterator: Any) -> Any:
        kept.add(iterator)
        return function(iterator)

    return call


def keep_until_exit(model: Any, kept: Kept | None = None) -> Kept:
    """Make fit and evaluate hand their iterator to `kept` (a new Kept by default) with every call of their
    train or test function. Call after compiling and tuning (compiling.prepare): it wraps what is there."""
    kept = kept if kept is not None else Kept()
    for make_name, function_name in LOOPS:
        make = getattr(model, make_name)

        def make_keeping(force: bool = False, make: Callable = make, function_name: str = function_name) -> Callable:
            function = _keeping(make(force), kept)
            setattr(model, function_name, function)
            return function

        setattr(model, make_name, make_keeping)
    return kept
