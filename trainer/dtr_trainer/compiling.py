"""build_model's model made ready for fit (docs/own-model.md): checked on one batch of the data, compiled
by the documented rule when build_model left it uncompiled, and tuned like the built-ins
(steps per execution, lazy metrics). Call `prepare` inside strategy.scope().

The rule for an uncompiled model, from the labels and the model's last layer:

    integer labels, more than one output unit -> sparse categorical cross-entropy + accuracy
    integer labels 0/1, one output unit       -> binary cross-entropy + accuracy
    float labels                              -> mean squared error + mae

with Adam(--learning-rate); the cross-entropies take logits unless the last layer ends in softmax (sigmoid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dtr_trainer import userdata
from dtr_trainer.errors import DataError, UserCodeError, one_line
from dtr_trainer.user import GUIDE, Code, Context, call, describe_exception, fail

ACCURACY, MAE = "accuracy", "mae"


@dataclass(frozen=True)
class Rule:
    """The loss and metrics the harness compiles an uncompiled model with."""

    loss: str  # sparse_categorical_crossentropy | binary_crossentropy | mse
    from_logits: bool
    metric: str  # its one metric's name (ACCURACY | MAE)


def final_activation(model: Any) -> str | None:
    """The name of the activation the model's last layer applies (softmax, sigmoid, linear, ...)."""
    import tensorflow as tf

    layers = getattr(model, "layers", None) or []
    if not layers:
        return None
    last = layers[-1]
    if isinstance(last, tf.keras.layers.Softmax):
        return "softmax"
    activation = getattr(last, "activation", None)
    return getattr(activation, "__name__", None)


def choose_rule(data: userdata.Data, units: int, activation: str | None) -> Rule:
    """Pure: the documented rule (module docstring). ValueError when the model's output cannot fit the labels."""
    if not data.classes:
        return Rule("mse", False, MAE)
    classes = data.num_classes or 0
    if units == 1:
        if classes > 2:
            raise ValueError(f"the model has 1 output unit but the labels are classes 0..{classes - 1}: give its "
                             f"last layer ctx.num_classes ({classes}) units")
        return Rule("binary_crossentropy", activation != "sigmoid", ACCURACY)
    if classes > units:
        raise ValueError(f"the model has {units} output units but the labels are classes 0..{classes - 1}: give its "
                         f"last layer ctx.num_classes ({classes}) units")
    return Rule("sparse_categorical_crossentropy", activation != "softmax", ACCURACY)


def _without_trailing_one(shape: tuple) -> tuple:
    return shape[:-1] if shape and shape[-1] == 1 else shape


def check_regression_shapes(label_shape: tuple, output_shape: tuple) -> None:
    """Pure: float targets of shape S need an output of shape S per example (a trailing 1 aside)."""
    if _without_trailing_one(tuple(label_shape)) != _without_trailing_one(tuple(output_shape)):
        raise ValueError(f"the model outputs {list(output_shape)} per example but the targets have shape "
                         f"{list(label_shape)}")


def _loss_and_metric(rule: Rule):
    import tensorflow as tf

    if rule.loss == "mse":
        return tf.keras.losses.MeanSquaredError(), tf.keras.metrics.MeanAbsoluteError(name=MAE)
    if rule.loss == "binary_crossentropy":
        return (tf.keras.losses.BinaryCrossentropy(from_logits=rule.from_logits),
                tf.keras.metrics.BinaryAccuracy(name=ACCURACY, threshold=0.0 if rule.from_logits else 0.5))
    return (tf.keras.losses.SparseCategoricalCrossentropy(from_logits=rule.from_logits),
            tf.keras.metrics.SparseCategoricalAccuracy(name=ACCURACY))


def compile_by_rule(model: Any, rule: Rule, learning_rate: float) -> None:
    """No jit_compile: TF 2.11 cannot XLA-compile MWMS collectives on CPU ("Collectives are not
    yet implemented for CPU devices when compiling with XLA"); see bench/trainer/results.md. Steps per
    execution: `tune`, as for a model build_model compiled."""
    import tensorflow as tf

    loss, metric = _loss_and_metric(rule)
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=learning_rate), loss=loss, metrics=[metric])


# ---------------------------------------------------------------- one batch


def first_batch(data: userdata.Data, size: int) -> tuple:
    """Up to `size` training examples, as the model will see them (x, y)."""
    split = data.train
    if not split.is_dataset:
        x, y = split.data
        return x[:size], y[:size]
    return next(iter(split.data.take(size).batch(size)))


def _output(model: Any, x: Any) -> Any:
    """The model's output for x; one tensor, or a list/dict for a model with several outputs."""
    return model(x, training=False)


def _units(y_pred: Any) -> int:
    shape = y_pred.shape
    return int(shape[-1]) if shape.rank and shape.rank >= 2 else 1


def _loss_function(model: Any):
    """The compiled loss as a function of (y_true, y_pred) per example (a Loss's reduction refuses to run
    under a strategy outside Keras' loops); None for a structure of losses."""
    import tensorflow as tf

    loss = getattr(model, "loss", None)
    if isinstance(loss, tf.keras.losses.Loss):
        return loss.call
    if isinstance(loss, str) or callable(loss):
        return tf.keras.losses.get(loss)
    return None


def _is_compiled(model: Any) -> bool:
    return bool(getattr(model, "_is_compiled", False))


class _Misfit(Exception):
    """The model and the data do not fit; the message says how."""


def _check_output(model: Any, data: userdata.Data, ctx: Context, y_pred: Any) -> Rule | None:
    """Compile an uncompiled model by the rule (and return it), or check a compiled one's classes against
    its output."""
    import tensorflow as tf

    if not tf.is_tensor(y_pred):
        if _is_compiled(model):
            return None
        raise _Misfit(f"the model has several outputs ({type(y_pred).__name__}): compile it yourself in "
                      f"build_model (the harness's loss rule covers one output; {GUIDE})")
    units = _units(y_pred)
    if _is_compiled(model):
        if data.classes and units > 1 and (data.num_classes or 0) > units:
            raise _Misfit(f"the model has {units} output units but the labels are classes 0..{data.num_classes - 1}")
        return None
    try:
        rule = choose_rule(data, units, final_activation(model))
        if not data.classes:
            check_regression_shapes(data.label_shape, tuple(y_pred.shape[1:]))
    except ValueError as exc:
        raise _Misfit(str(exc)) from None
    compile_by_rule(model, rule, ctx.learning_rate)
    return rule


def _check_loss(model: Any, y: Any, y_pred: Any) -> None:
    import tensorflow as tf

    loss = _loss_function(model)
    if loss is None or not tf.is_tensor(y_pred):
        return
    try:
        loss(tf.convert_to_tensor(y), y_pred)  # raises when they do not fit
    except Exception as exc:
        raise _Misfit(f"its loss cannot compare the labels {list(getattr(y, 'shape', []))} with the output "
                      f"{y_pred.shape.as_list()}: {type(exc).__name__}: {one_line(str(exc), '')}") from None


def metric_names(model: Any, y: Any, y_pred: Any) -> list:
    """The names evaluate() will report (loss first): Keras builds its loss and metric containers the
    way its train step would, from one batch."""
    import tensorflow as tf

    model.compiled_loss.build(y_pred)
    model.compiled_metrics.build(y_pred, tf.convert_to_tensor(y))
    return [m.name for m in model.metrics]


def tune(model: Any, steps_per_execution: int, lazy_metrics: bool) -> bool:
    """The harness's steps per execution (also for a model build_model compiled) and, for Keras' own
    train_step, lazy metrics. Returns whether the metrics are read lazily."""
    from dtr_trainer.models import read_metrics_at_execution_end

    model._steps_per_execution.assign(steps_per_execution)
    # A train_step of the model's own would be bypassed by the lazy loop: keep Keras' loop for it.
    lazy = lazy_metrics and steps_per_execution > 1 and keras_train_step(model)
    if lazy:
        read_metrics_at_execution_end(model)
    return lazy


def keras_train_step(model: Any) -> bool:
    import tensorflow as tf

    return type(model).train_step is tf.keras.Model.train_step


def build_optimizer(model: Any) -> bool:
    """The optimizer's variables (Adam's m and v per weight) made now, as its first apply_gradients would make
    them: a tf.function whose first trace creates variables is traced a second time, and the train function's
    second trace was 0.6 s of the first epoch's CPU. Only Keras' own train_step (which applies the gradients of
    all trainable variables) and TF 2.11's optimizers (not the legacy ones); returns whether it built."""
    import tensorflow as tf

    optimizer = getattr(model, "optimizer", None)
    if not isinstance(optimizer, tf.keras.optimizers.Optimizer) or not keras_train_step(model):
        return False
    optimizer.build(model.trainable_variables)
    return True


def _fitting(code: Code, model: Any, data: userdata.Data, ctx: Context) -> tuple[list, Rule | None]:
    """The checks on one batch, compile: (the metric names, the rule it was compiled by); any failure is a
    UserCodeError (DataError for a built-in)."""
    x, y = first_batch(data, ctx.batch_size_per_worker)
    try:
        y_pred = _output(model, x)
    except Exception as exc:
        if code.builtin:
            raise
        shape = list(getattr(x, "shape", [])) or "(a structure)"
        raise UserCodeError(f"{describe_exception(code.origin, exc, code.build_model.where)} "
                            f"(the model, given a batch of x of shape {shape})") from exc
    try:
        rule = _check_output(model, data, ctx, y_pred)
        _check_loss(model, y, y_pred)
    except _Misfit as exc:
        raise fail(code.build_model, f"{exc} ({GUIDE})", DataError if code.builtin else UserCodeError) from None
    return metric_names(model, y, y_pred), rule


@dataclass(frozen=True)
class Prepared:
    model: Any
    names: list  # what evaluate() will report, loss first
    rule: Rule | None  # how the trainer compiled it; None: build_model did
    lazy: bool  # metrics read once per execution

    def describe(self) -> str:
        """For the log: how the model was compiled and what it reports."""
        how = (f"compiled by the trainer: {self.rule.loss}{' from logits' if self.rule.from_logits else ''}"
               if self.rule else "compiled by build_model")
        lazy = "; metrics read once per execution" if self.lazy else ""
        return f"model {how}; it reports {', '.join(self.names)}{lazy}"


def prepare(code: Code, ctx: Context, data: userdata.Data, args: Any) -> Prepared:
    """build_model(ctx)'s model, checked, compiled and tuned."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(ctx.seed)  # the same initial weights on every worker and in every run
    model = call(code, code.build_model, ctx)
    if not isinstance(model, tf.keras.Model):
        raise fail(code.build_model, f"returned {userdata.kind(model)}, not a tf.keras.Model")
    names, rule = _fitting(code, model, data, ctx)
    lazy = tune(model, args.steps_per_execution, args.lazy_metrics)
    build_optimizer(model)
    return Prepared(model, names, rule, lazy)
