"""dtr_trainer.iterators: fit's and evaluate's iterators are kept (never destroyed before the process leaves),
once each, and the loops train and evaluate as they did."""

from __future__ import annotations

import numpy as np
import pytest
from dtr_trainer import iterators


class Loops:
    """What keep_until_exit touches of a Keras model: Keras caches the function it made."""

    def __init__(self) -> None:
        self.train_function = self.test_function = None

    def make_train_function(self, force: bool = False):
        self.train_function = self.train_function or (lambda iterator: ("trained", iterator))
        return self.train_function

    def make_test_function(self, force: bool = False):
        self.test_function = self.test_function or (lambda iterator: ("tested", iterator))
        return self.test_function


def test_each_iterator_is_kept_once_and_the_functions_answer_as_before():
    model, first, second = Loops(), object(), object()
    kept = iterators.keep_until_exit(model)
    train = model.make_train_function()
    assert model.train_function is train
    assert [train(first), train(first), train(second)] == [("trained", first)] * 2 + [("trained", second)]
    assert model.make_test_function()(first) == ("tested", first)
    assert kept.iterators == [first, second]


def test_keras_fit_and_evaluate_hand_over_their_iterators_and_report_the_same():
    import tensorflow as tf

    x = np.random.RandomState(0).normal(size=(64, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)

    def trained(keep: bool) -> tuple:
        tf.keras.utils.set_random_seed(1)
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
        model.compile(tf.keras.optimizers.SGD(0.1), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=4)
        kept = iterators.keep_until_exit(model) if keep else None
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
        history = model.fit(data, epochs=2, verbose=0).history["loss"]
        return history, model.evaluate(data, verbose=0), kept

    plain_history, plain_loss, _ = trained(keep=False)
    kept_history, kept_loss, kept = trained(keep=True)
    assert kept_history == pytest.approx(plain_history) and kept_loss == pytest.approx(plain_loss)
    assert len(kept.iterators) == 3  # fit made one per epoch (a finite dataset), evaluate one
