"""The harness's side of a user's code, in this process (fast): importing it, calling it, checking what it
returns, and making its model ready for fit. tests/trainer/test_own_model.py runs the same through the
CLI and real workers."""

from __future__ import annotations

import hashlib
import textwrap
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from dtr_trainer import compiling, user, userdata
from dtr_trainer.errors import UserCodeError

CTX = user.Context(worker_index=0, num_workers=1, is_chief=True, batch_size_per_worker=8, global_batch_size=8,
                   data_dir="/data", seed=1, epochs=1, learning_rate=0.01, dataset=None)
GOOD_DATA = '''
import numpy as np

def load_data(ctx):
    x = np.random.RandomState(ctx.seed).normal(size=(40, 3)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    return (x[:32], y[:32]), (x[32:], y[32:])
'''
GOOD_MODEL = '''
import tensorflow as tf

def build_model(ctx):
    return tf.keras.Sequential([tf.keras.Input(shape=ctx.input_shape), tf.keras.layers.Dense(ctx.num_classes)])
'''


def write(tmp_path: Path, text: str, name: str = "my_model.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def line_of(path: Path, needle: str) -> int:
    (number,) = [n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line]
    return number


def failure(fn, *args) -> str:
    with pytest.raises(UserCodeError) as err:
        fn(*args)
    return str(err.value)


# ---------------------------------------------------------------- importing


def test_a_file_is_imported_with_its_hash_and_both_functions(tmp_path):
    path = write(tmp_path, GOOD_DATA + GOOD_MODEL)
    code = user.load_file(str(path))
    assert code.origin.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and not code.builtin
    assert code.origin.lineage() == {"file": "my_model.py", "module": None, "sha256": code.origin.sha256}
    assert code.load_data.where == f"my_model.py:{line_of(path, 'def load_data')} in load_data"


@pytest.mark.parametrize("text, needle, expected", [
    (GOOD_DATA, None, "my_model.py: defines no build_model(ctx) function; see docs/own-model.md"),
    (GOOD_DATA + "build_model = 3\n", "build_model = 3", "my_model.py:{}: build_model is an int, not a function"),
    (GOOD_DATA + "def build_model(ctx, other):\n    pass\n", "def build_model",
     "my_model.py:{} in build_model: takes (ctx, other); the harness calls build_model(ctx)"),
    ("import nope_not_installed\n" + GOOD_DATA + GOOD_MODEL, "import nope",
     "my_model.py:{} in <module>: ModuleNotFoundError: No module named 'nope_not_installed'"),
    (GOOD_DATA + GOOD_MODEL + "\n1 / 0\n", "1 / 0", "my_model.py:{} in <module>: ZeroDivisionError: division by zero"),
])
def test_an_import_failure_names_the_file_and_line(tmp_path, text, needle, expected):
    path = write(tmp_path, text)
    message = failure(user.load_file, str(path))
    assert message.startswith(expected.format(line_of(path, needle) if needle else None)), message


def test_callbacks_is_the_optional_hook_unless_it_is_an_imported_module(tmp_path):
    assert user.load_file(str(write(tmp_path, GOOD_DATA + GOOD_MODEL))).callbacks is None
    hooked = user.load_file(str(write(tmp_path, GOOD_DATA + GOOD_MODEL + "\ndef callbacks(ctx):\n    return []\n")))
    assert hooked.callbacks is not None and hooked.callbacks.name == "callbacks"
    imported = GOOD_DATA + GOOD_MODEL + "\nfrom tensorflow.keras import callbacks\n"
    assert user.load_file(str(write(tmp_path, imported))).callbacks is None, "an import of Keras' module, not the hook"
    listed = write(tmp_path, GOOD_DATA + GOOD_MODEL + "\ncallbacks = [1]\n")
    assert failure(user.load_file, str(listed)) == (f"my_model.py:{line_of(listed, 'callbacks = [1]')}: callbacks is "
                                                    "a list of 1, not a function; see docs/own-model.md")


def test_a_function_without_parameters_is_called_without_the_context(tmp_path):
    path = write(tmp_path, GOOD_DATA.replace("load_data(ctx)", "load_data()").replace("ctx.seed", "0") + GOOD_MODEL)
    code = user.load_file(str(path))
    assert not code.load_data.takes_context and code.build_model.takes_context
    assert user.load_data_before_strategy(code, CTX).train_size == 32


def package(tmp_path: Path, monkeypatch, name: str, text: str) -> Path:
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    return write(tmp_path / name, text, "model.py")


def test_a_module_is_imported_with_its_files_hash(tmp_path, monkeypatch):
    path = package(tmp_path, monkeypatch, "acme_good", GOOD_DATA + GOOD_MODEL)
    code = user.load_module("acme_good.model")
    assert code.origin.lineage() == {"file": "model.py", "module": "acme_good.model",
                                     "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    assert code.build_model.where == f"acme_good/model.py:{line_of(path, 'def build_model')} in build_model"


def test_a_module_failing_at_import_is_named_from_its_package(tmp_path, monkeypatch):
    path = package(tmp_path, monkeypatch, "acme_boom", GOOD_DATA + "raise RuntimeError('boom')\n")
    message = failure(user.load_module, "acme_boom.model")
    assert message == f"acme_boom/model.py:{line_of(path, 'boom')} in <module>: RuntimeError: boom"


@pytest.mark.parametrize("name", ["acme_there.nothing", "nothing_at_all_here", ""])
def test_a_module_that_is_not_there(tmp_path, monkeypatch, name):
    package(tmp_path, monkeypatch, "acme_there", GOOD_DATA + GOOD_MODEL)
    assert f"--code-module {name}: no such module on the trainer's Python path" in failure(user.load_module, name)


def test_a_missing_file_is_a_user_code_error(tmp_path):
    assert "cannot read --code" in failure(user.load_file, str(tmp_path / "absent.py"))


# ---------------------------------------------------------------- load_data


@pytest.mark.parametrize("body, expected", [
    ("return x", "returned a NumPy array of shape [40, 3]: return (train, eval)"),
    ("return x, y", "returned two arrays, one (x, y) split"),
    ("return (x, y), (x, y), (x, y), (x, y)", "returned a tuple of 4"),
    ("return (x, y), (x, y), (x[:, :2], y)", "train x examples have shape [3] but test x examples [2]"),
    ("return (x, y), (x.tolist(), y)", "eval x is a list of 40, not a NumPy array"),
    ("return (x, y[:5]), (x, y)", "train x has 40 examples but train y has 5"),
    ("return (x, y), (x[:, :2], y)", "train x examples have shape [3] but eval x examples [2]"),
    ("return (x, y), (x, y.astype('float32'))", "train labels are class labels of shape [] but eval labels float"),
    ("return (x, y - 1), (x, y)", "train y has negative class labels"),
    ("return (x * np.nan, y), (x, y)", "train x has NaN or infinite values"),
    ("return (x, y.astype(object)), (x, y)", "train y has dtype object"),
    ("raise KeyError('price')", "KeyError: 'price'"),
])
def test_what_load_data_returns_is_checked(tmp_path, body, expected):
    text = f'''
    import numpy as np

    def load_data(ctx):
        x = np.ones((40, 3), np.float32)
        y = np.arange(40) % 2
        {body}

    def build_model(ctx):
        pass
    '''
    path = write(tmp_path, text)
    code = user.load_file(str(path))
    message = failure(user.load_data_before_strategy, code, CTX)
    # what it returned: the function's line; what it raised: the line that raised
    line = line_of(path, body) if body.startswith("raise") else line_of(path, "def load_data")
    assert message.startswith(f"my_model.py:{line} in load_data: "), message
    assert expected in message, message


def test_numpy_data_are_described_for_build_model(tmp_path):
    code = user.load_file(str(write(tmp_path, GOOD_DATA + GOOD_MODEL)))
    data = user.load_data_before_strategy(code, CTX)
    assert (data.input_shape, data.label_shape, data.num_classes, data.train_size) == ((3,), (), 2, 32)
    assert data.train.data[0].dtype == np.float32  # float64 features become float32


def test_print_in_the_users_code_goes_to_stderr(tmp_path, capsys):
    source = GOOD_DATA.replace("    x =", "    print('loading')\n    x =") + GOOD_MODEL
    code = user.load_file(str(write(tmp_path, source)))
    user.load_data_before_strategy(code, CTX)
    out, err = capsys.readouterr()
    assert out == "" and "loading" in err


# ---------------------------------------------------------------- tf.data


def examples(n: int = 10, labels=np.int64):
    return tf.data.Dataset.from_tensor_slices((np.ones((n, 3), np.float32), (np.arange(n) % 3).astype(labels)))


@pytest.mark.parametrize("dataset, expected", [
    (lambda: examples().batch(4), "looks batched"),
    (lambda: examples().repeat(), "never ends: leave out .repeat()"),
    (lambda: examples().map(lambda x, y: x), "not (x, y) pairs"),
    (lambda: examples().take(0), "is empty"),
    (lambda: examples(labels=np.str_), "labels are string"),
])
def test_a_dataset_is_checked(dataset, expected):
    with pytest.raises(userdata.Invalid, match=expected.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        userdata.dataset_split(dataset(), "train")


def test_a_dataset_of_unknown_size_is_counted_and_its_classes_read():
    unknown = examples(10).filter(lambda x, y: True)
    split = userdata.dataset_split(unknown, "train")
    assert (split.size, split.input_shape, split.label_shape, split.classes, split.label_range) == \
        (10, (3,), (), True, (0, 2))
    regression = userdata.dataset_split(examples(7, np.float32), "eval")
    assert (regression.size, regression.classes, regression.label_range) == (7, False, None)


# ---------------------------------------------------------------- the model, on one batch


def data(classes: int = 3, n: int = 32, labels=np.int64) -> userdata.Data:
    rng = np.random.RandomState(0)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (rng.randint(0, classes, n) if labels is np.int64 else rng.normal(size=n)).astype(labels)
    return userdata.describe(((x, y), (x[:8], y[:8])))


def model_code(build) -> user.Code:
    return user.Code(user.Origin("test"), user.Entry("build_model", build, True, "my_model.py:1 in build_model"),
                     user.Entry("load_data", lambda ctx: None, True, "my_model.py:9 in load_data"))


ARGS = Namespace(steps_per_execution=5, lazy_metrics=True)


def prepared(build, d: userdata.Data) -> tuple:
    ctx = user.Context(**{**vars(CTX), "input_shape": d.input_shape, "label_shape": d.label_shape,
                          "num_classes": d.num_classes})
    ready = compiling.prepare(model_code(build), ctx, d, ARGS)
    return ready.model, ready.names, ready.lazy, ready.describe()


def dense(units: int, activation=None, compile_with=None):
    def build(ctx):
        model = tf.keras.Sequential([tf.keras.Input(shape=ctx.input_shape), tf.keras.layers.Dense(units, activation)])
        if compile_with:
            model.compile(**compile_with)
        return model

    return build


def test_an_uncompiled_classifier_of_logits_gets_the_rule():
    model, names, lazy, described = prepared(dense(3), data())
    assert names == ["loss", "accuracy"] and lazy
    assert described == ("model compiled by the trainer: sparse_categorical_crossentropy from logits; it reports "
                         "loss, accuracy; metrics read once per execution")
    assert isinstance(model.loss, tf.keras.losses.SparseCategoricalCrossentropy)
    assert model.loss.get_config()["from_logits"]
    assert int(model._steps_per_execution.numpy()) == 5


def test_an_uncompiled_regression_gets_mse_and_mae():
    model, names, *_ = prepared(dense(1), data(labels=np.float32))
    assert names == ["loss", "mae"] and isinstance(model.loss, tf.keras.losses.MeanSquaredError)


def test_a_compiled_model_keeps_its_loss_and_metrics_and_gets_the_tuning():
    compile_with = {"optimizer": "sgd", "loss": "mse", "metrics": ["mse", tf.keras.metrics.RootMeanSquaredError()]}
    model, names, lazy, described = prepared(dense(1, compile_with=compile_with), data(labels=np.float32))
    assert names == ["loss", "mse", "root_mean_squared_error"] and lazy and "compiled by build_model" in described
    assert model.loss == "mse" and isinstance(model.optimizer, tf.keras.optimizers.SGD)
    assert int(model._steps_per_execution.numpy()) == 5
    x, y = data(labels=np.float32).train.data
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)  # the lazy loop trains a user-compiled model
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_the_train_function_is_traced_once_its_optimizer_built_before():
    """compiling.build_optimizer: a first trace that creates the optimizer's variables is traced again."""
    model, *_ = prepared(dense(3), data())
    assert model.optimizer.variables()[1:], "Adam's m and v exist before the first step"
    x, y = data().train.data
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    assert model.make_train_function().experimental_get_tracing_count() == 1


def test_a_model_with_a_train_step_of_its_own_keeps_keras_loop():
    class Own(tf.keras.Sequential):
        def train_step(self, batch):
            return super().train_step(batch)

    def build(ctx):
        return Own([tf.keras.Input(shape=ctx.input_shape), tf.keras.layers.Dense(3)])

    model, _, lazy, _ = prepared(build, data())
    assert lazy is False
    assert len(model.optimizer.variables()) == 1, "its own train_step builds the optimizer as it goes"


@pytest.mark.parametrize("build, d, expected", [
    (dense(2, "softmax"), data(3), ("my_model.py:1 in build_model: the model has 2 output units but the labels are "
                                   "classes 0..2: give its last layer ctx.num_classes (3) units")),
    (dense(1), data(3), "the model has 1 output unit but the labels are classes 0..2"),
    (dense(3), data(labels=np.float32), "the model outputs [3] per example but the targets have shape []"),
    (lambda ctx: "a model", data(), "my_model.py:1 in build_model: returned a str, not a tf.keras.Model"),
    (lambda ctx: tf.keras.Sequential([tf.keras.Input(shape=(5,)), tf.keras.layers.Dense(3)]), data(),
     "expected shape=(None, 5), found shape=(8, 4)"),
    (dense(2, compile_with={"optimizer": "adam", "loss": "sparse_categorical_crossentropy"}), data(3),
     "the model has 2 output units but the labels are classes 0..2"),
    (dense(3, compile_with={"optimizer": "adam", "loss": "sparse_categorical_crossentropy"}),
     userdata.describe(((np.ones((16, 4), np.float32), np.ones((16, 2), np.int64)),) * 2),
     "its loss cannot compare the labels [8, 2] with the output [8, 3]: ValueError: `labels.shape` must equal"),
])
def test_a_model_that_does_not_fit_its_data_fails_naming_build_model(build, d, expected):
    message = failure(prepared, build, d)
    assert message.startswith("my_model.py:1 in build_model: ") and expected in message, message
