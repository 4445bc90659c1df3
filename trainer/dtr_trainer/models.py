"""The built-in models: a small Keras CNN family for images [H, W, C] -> class probabilities, sized from the
data (build_model(ctx) of docs/own-model.md, like a user's). `BUILT_IN` is the one registry; the harness
compiles them like any uncompiled model (compiling.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from dtr_trainer.errors import DataError
from dtr_trainer.user import GUIDE, Context

# Three 3x3 convolutions (valid padding) with a 2x2 pooling after the first two leave 1x1 of an 18x18 image.
MIN_IMAGE_SIDE = 18


def _conv_relu(filters: int) -> list:
    from tensorflow.keras import layers

    return [layers.Conv2D(filters, 3, activation="relu")]


def _conv_batch_norm_relu(filters: int) -> list:
    from tensorflow.keras import layers

    return [layers.Conv2D(filters, 3), layers.BatchNormalization(), layers.Activation("relu")]


def _dropout(rate: float) -> list:
    from tensorflow.keras import layers

    return [layers.Dropout(rate)]


def _no_dropout(rate: float) -> list:
    return []


@dataclass(frozen=True)
class Recipe:
    """What sets one built-in apart: its convolution block and its dropout."""

    conv: Callable[[int], list]
    drop: Callable[[float], list]


RECIPES = {
    "cnn": Recipe(_conv_relu, _no_dropout),  # Conv32-Pool-Conv64-Pool-Conv64-Dense64-Dense(classes): 93k for MNIST
    "dropout": Recipe(_conv_relu, _dropout),  # Dropout 0.25 after each pooling, 0.5 before the output
    "batch_norm": Recipe(_conv_batch_norm_relu, _no_dropout),  # BatchNormalization + ReLU after each convolution
}


def image_shape(ctx: Context, name: str) -> tuple:
    """(H, W, C) of the data's images; DataError when they are no images a built-in CNN can take."""
    shape = ctx.input_shape
    if shape is None or len(shape) != 3 or None in shape:
        raise DataError(f"the built-in model {name} trains on images [H, W, C], and these examples have shape "
                        f"{list(shape) if shape is not None else '(a structure)'}: for other data, write your own "
                        f"model ({GUIDE})")
    if min(shape[:2]) < MIN_IMAGE_SIDE:
        raise DataError(f"the built-in model {name} needs images of at least {MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE}, "
                        f"got {shape[0]}x{shape[1]}: scale them up, or write your own model ({GUIDE})")
    if not ctx.num_classes or ctx.num_classes < 2:
        raise DataError(f"the built-in model {name} classifies, and the labels are "
                        f"{'not integers' if ctx.num_classes is None else 'all 0'}: for other data, write your "
                        f"own model ({GUIDE})")
    return tuple(shape)


def build_cnn(name: str, recipe: Recipe, ctx: Context):
    """An uncompiled model; called inside strategy.scope(). Input `images`, output `probabilities` (softmax)."""
    import tensorflow as tf
    from tensorflow.keras import layers

    shape = image_shape(ctx, name)
    inputs = tf.keras.Input(shape=shape, name="images")
    x = inputs
    for layer in [
        *recipe.conv(32),
        layers.MaxPooling2D(),
        *recipe.drop(0.25),
        *recipe.conv(64),
        layers.MaxPooling2D(),
        *recipe.drop(0.25),
        *recipe.conv(64),
        layers.Flatten(),
        layers.Dense(64, activation="relu"),
        *recipe.drop(0.5),
        layers.Dense(ctx.num_classes, activation="softmax", name="probabilities"),
    ]:
        x = layer(x)
    return tf.keras.Model(inputs, x, name=name)


BUILT_IN: dict[str, Callable[[Context], object]] = {name: partial(build_cnn, name, r) for name, r in RECIPES.items()}
MODELS = tuple(BUILT_IN)


def read_metrics_at_execution_end(model) -> None:
    """Make model.fit read its metrics once per execution (steps_per_execution steps), not per step.

    Under MultiWorkerMirroredStrategy, Keras' train_function reads every metric at every step, and
    a read is an all-reduce (total and count of the loss and of the accuracy); the step's outputs
    are then summed across workers again: seven collectives per step where the gradients need one.
    Only the outputs of an execution's last step are ever seen (logs, callbacks), so the steps
    only update their metrics, and one read follows the last. Keras' data handler shortens the last
    execution of an epoch through model._steps_per_execution, which this loop reads too. Call after
    compile.
    """
    import tensorflow as tf

    strategy = model.distribute_strategy

    def update(data):
        x, y, sample_weight = tf.keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x, y, y_pred, sample_weight)
        model.optimizer.minimize(loss, model.trainable_variables, tape=tape)
        model.compiled_metrics.update_state(y, y_pred, sample_weight)
        model._train_counter.assign_add(1)

    def read():
        # At the top level of a replica function, where the metrics' merge_call is allowed.
        return model.get_metrics_result()

    def train_function(iterator):
        # Every step in the loop, so the step is traced once (forward, backward, optimizer): a last step of
        # its own, with the read, traced them a second time in the first epoch.
        for _ in tf.range(model._steps_per_execution):
            strategy.run(update, args=(next(iterator),))
        outputs = strategy.run(read)
        # The values are global already (the reads all-reduced them): take the first replica's.
        return strategy.experimental_local_results(outputs)[0]

    compiled = tf.function(train_function, reduce_retracing=True)

    def make_train_function(force: bool = False):
        model.train_function = compiled
        return compiled

    model.make_train_function = make_train_function
