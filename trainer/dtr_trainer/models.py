"""The small Keras CNN family for 28x28x1 images in [0, 1] -> 10 class probabilities."""

from __future__ import annotations

MODELS = ("cnn", "dropout", "batch_norm")


def _layers(kind: str) -> list:
    from tensorflow.keras import layers

    def conv(filters: int) -> list:
        block = [layers.Conv2D(filters, 3, activation=None if kind == "batch_norm" else "relu")]
        if kind == "batch_norm":
            block += [layers.BatchNormalization(), layers.Activation("relu")]
        return block

    def drop(rate: float) -> list:
        return [layers.Dropout(rate)] if kind == "dropout" else []

    return [
        *conv(32),
        layers.MaxPooling2D(),
        *drop(0.25),
        *conv(64),
        layers.MaxPooling2D(),
        *drop(0.25),
        *conv(64),
        layers.Flatten(),
        layers.Dense(64, activation="relu"),
        *drop(0.5),
        layers.Dense(10, activation="softmax", name="probabilities"),
    ]


def build_model(kind: str, seed: int):
    """An uncompiled model; call inside strategy.scope()."""
    import tensorflow as tf

    if kind not in MODELS:
        raise ValueError(f"unknown model {kind!r}")
    tf.keras.utils.set_random_seed(seed)  # same initial weights on every worker and every run
    inputs = tf.keras.Input(shape=(28, 28, 1), name="images")
    x = inputs
    for layer in _layers(kind):
        x = layer(x)
    return tf.keras.Model(inputs, x, name=kind)


def compile_model(model, learning_rate: float, steps_per_execution: int) -> None:
    """No jit_compile: TF 2.11 cannot XLA-compile MWMS collectives on CPU ("Collectives are not
    yet implemented for CPU devices when compiling with XLA"); see bench/trainer/results.md."""
    import tensorflow as tf

    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate=learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )


def read_metrics_at_execution_end(model) -> None:
    """Make model.fit read its metrics once per execution (steps_per_execution steps), not per step.

    Under MultiWorkerMirroredStrategy, Keras' train_function reads every metric at every step, and
    a read is an all-reduce (total and count of the loss and of the accuracy); the step's outputs
    are then summed across workers again: seven collectives per step where the gradients need one.
    Only the outputs of an execution's last step are ever seen (logs, callbacks), so the steps
    before it only update their metrics. Keras' data handler shortens the last execution of an
    epoch through model._steps_per_execution, which this loop reads too. Call after compile.
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

    def update_and_read(data):
        update(data)
        # At the top level of the replica function, where the metrics' merge_call is allowed.
        return model.get_metrics_result()

    def train_function(iterator):
        for _ in tf.range(model._steps_per_execution - 1):
            strategy.run(update, args=(next(iterator),))
        outputs = strategy.run(update_and_read, args=(next(iterator),))
        # The values are global already (the reads all-reduced them): take the first replica's.
        return strategy.experimental_local_results(outputs)[0]

    compiled = tf.function(train_function, reduce_retracing=True)

    def make_train_function(force: bool = False):
        model.train_function = compiled
        return compiled

    model.make_train_function = make_train_function
