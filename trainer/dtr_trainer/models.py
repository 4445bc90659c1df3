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
