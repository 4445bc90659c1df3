"""Your own model on your own data (docs/own-model.md): the context the harness passes to `build_model(ctx)`
and `load_data(ctx)`, and the harness's side of them: importing the code, calling it, and turning every
failure into one line that names the file and line (`my_model.py:12 in load_data: ValueError: ...`).

The built-in models and datasets are a `Code` too (models.BUILT_IN, data.loader): the harness treats both
alike, except that a built-in's own error keeps its exit code (4, bad data) and is not the user's.

MultiWorkerMirroredStrategy must be created before the process's first TensorFlow operation, so the
user's code runs with TensorFlow operations refused until then (`tf_ops_refused`): a module that runs
one when imported fails with its line; a load_data that builds a tf.data.Dataset is simply called again
once the strategy exists, while one that returns NumPy arrays is checked before it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import os
import random
import sys
import traceback
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
from dtr_contract import flags

from dtr_trainer import userdata
from dtr_trainer.errors import CodeChangedError, DataError, TrainerError, UserCodeError, one_line

GUIDE = "docs/own-model.md"
ENTRY_POINTS = ("build_model", "load_data")
OPTIONAL = "callbacks"  # callbacks(ctx): Keras callbacks of the user's own (dtr_trainer.experiment)
MODULE_NAME = "dtr_user_code"  # what a --code file is imported as (never a name it could shadow)


@dataclass(frozen=True)
class Context:
    """What the harness tells build_model(ctx), load_data(ctx) and callbacks(ctx). input_shape, label_shape and
    num_classes are read from the data load_data returned: None in load_data's context."""

    worker_index: int  # 0 .. num_workers-1; 0 is the chief
    num_workers: int
    is_chief: bool
    batch_size_per_worker: int
    global_batch_size: int  # batch_size_per_worker x num_workers: what one training step consumes
    data_dir: str  # --data-dir: where the run's data are (/mnt/dtr/data in a pod)
    seed: int
    epochs: int
    learning_rate: float
    dataset: str | None  # --dataset as given (your code may read it as a name or a path), else None
    input_shape: tuple | None = None  # one example's x, e.g. (13,) or (28, 28, 1); None for a structure
    label_shape: tuple | None = None  # one example's y: () for a class label or a scalar target
    num_classes: int | None = None  # 1 + the largest integer label; None when labels are floats
    params: Mapping[str, Any] = field(default_factory=dict)  # spec.training.params (read-only; docs/experiments.md)
    log_dir: str | None = None  # the run's directory for files your callbacks write (--log-dir); None: none


@dataclass(frozen=True)
class Entry:
    """One function of the code, and how to call it."""

    name: str
    fn: Callable
    takes_context: bool
    where: str  # `my_model.py:12 in load_data`, for messages about what it returned


@dataclass(frozen=True)
class Origin:
    """Where the run's code comes from: a user's file or module, or the built-ins the run names."""

    name: str  # for messages: `my_model.py`, `acme.model`, `cnn on digits`
    file: str | None = None  # the file imported: --code as given, or the module's
    module: str | None = None  # --code-module
    sha256: str | None = None  # of the file that was imported
    roots: tuple[str, ...] = ()  # the user's files (and package dirs): their frames name a failure's line
    builtin: bool = False
    display_base: str = ""  # paths in messages are relative to this dir (else just the file's name)

    def owns(self, filename: str) -> bool:
        path = os.path.realpath(filename)
        return any(path == root or path.startswith(root + os.sep) for root in self.roots)

    def display(self, filename: str) -> str:
        path = os.path.realpath(filename)
        return os.path.relpath(path, self.display_base) if self.display_base else os.path.basename(path)

    def lineage(self) -> dict | None:
        """training.code in lineage.json (docs/lineage.schema.json); None for the built-ins."""
        if self.builtin:
            return None
        return {"file": os.path.basename(self.file) if self.file else None, "module": self.module,
                "sha256": self.sha256 if self.file else None}


@dataclass(frozen=True)
class Code:
    """The run's model and data: build_model and load_data, and where they come from."""

    origin: Origin
    build_model: Entry
    load_data: Entry
    callbacks: Entry | None = None  # the optional callbacks(ctx)

    @property
    def builtin(self) -> bool:
        return self.origin.builtin


# ---------------------------------------------------------------- where a failure is


def _frame_of(origin: Origin, frames: list) -> traceback.FrameSummary | None:
    mine = [f for f in frames if origin.owns(f.filename)]
    return mine[-1] if mine else None


def location(origin: Origin, exc: BaseException, fallback: str) -> str:
    """`file:line in function` of the innermost frame in the user's code, else fallback."""
    if isinstance(exc, SyntaxError) and exc.filename and origin.owns(exc.filename):
        return f"{origin.display(exc.filename)}:{exc.lineno}"
    frame = _frame_of(origin, traceback.extract_tb(exc.__traceback__))
    return f"{origin.display(frame.filename)}:{frame.lineno} in {frame.name}" if frame else fallback


def describe_exception(origin: Origin, exc: BaseException, fallback: str) -> str:
    """`where: Type: message`, the message's telling line only."""
    if isinstance(exc, SyntaxError):
        return f"{location(origin, exc, fallback)}: {type(exc).__name__}: {exc.msg}"
    name = type(exc).__name__
    text = getattr(exc, "message", None) or str(exc)
    return f"{location(origin, exc, fallback)}: {name}: {one_line(text, name)}"


# ---------------------------------------------------------------- TensorFlow operations before the strategy


class _TensorFlowOp(Exception):
    """Raised where a TensorFlow operation would initialize the runtime before the strategy exists."""


@dataclass
class Refusal:
    stack: list | None = None  # where the first refused operation was, once one was


@contextlib.contextmanager
def tf_ops_refused() -> Iterator[Refusal]:
    """Refuse TensorFlow operations (the eager runtime's initialization) inside the block. With TensorFlow
    not imported yet nothing can run one, and the block runs as it is."""
    refusal = Refusal()
    eager = sys.modules.get("tensorflow.python.eager.context")
    context = eager.context() if eager else None
    if context is None or context._initialized:
        yield refusal
        return

    def refuse() -> None:
        if refusal.stack is None:
            refusal.stack = traceback.extract_stack()[:-1]
        raise _TensorFlowOp("a TensorFlow operation before the strategy exists")

    context.ensure_initialized = refuse  # the one gate every op, tensor and Dataset passes first
    try:
        yield refusal
    finally:
        vars(context).pop("ensure_initialized", None)


# ---------------------------------------------------------------- importing the code


def _fail_import(origin: Origin, exc: BaseException, refusal: Refusal) -> UserCodeError:
    if refusal.stack is not None:
        frame = _frame_of(origin, refusal.stack)
        where = f"{origin.display(frame.filename)}:{frame.lineno}" if frame else origin.name
        return UserCodeError(f"{where}: runs a TensorFlow operation when imported; TensorFlow may run only inside "
                             f"build_model and load_data, once the harness has created the strategy ({GUIDE})")
    return UserCodeError(describe_exception(origin, exc, origin.name))


def _execute(origin: Origin, run: Callable[[], Any]) -> Any:
    """Import the user's code with TensorFlow imported (so its operations can be refused) and print()
    sent to stderr (stdout carries only the summary)."""
    import tensorflow  # noqa: F401  (the runtime is not started by an import)

    with tf_ops_refused() as refusal, contextlib.redirect_stdout(sys.stderr):
        try:
            result = run()
        except TrainerError:
            raise
        except Exception as exc:
            raise _fail_import(origin, exc, refusal) from exc
    if refusal.stack is not None:
        raise _fail_import(origin, RuntimeError(), refusal)
    return result


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def changed_message(name: str, got: str, expected: str) -> str:
    """One line, both digests first (a run's status keeps 400 characters of it, the worker's name after)."""
    return (f"{name}: the code changed: its sha256 is {got}, not {expected} as recorded ({flags.CODE_SHA256}, the "
            "run's status.code); none of it ran. Its ConfigMap was replaced after the run started: create a new run "
            "to train it")


def load_file(path: str, expected_sha256: str | None = None) -> Code:
    """--code PATH: its bytes checked against the recorded digest (--code-sha256), then compiled (a syntax error
    fails before TensorFlow is even imported), imported, checked. The digest is of the very bytes compiled: the file
    is read once, so it cannot change between the check and the import."""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        raise UserCodeError(f"cannot read {flags.CODE} {path}: {exc.strerror or exc}") from None
    origin = Origin(os.path.basename(path), file=path, sha256=_sha256(source), roots=(os.path.realpath(path),))
    if expected_sha256 is not None and origin.sha256 != expected_sha256:
        raise CodeChangedError(changed_message(origin.name, origin.sha256 or "", expected_sha256))
    try:
        compiled = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte
        raise UserCodeError(describe_exception(origin, exc, origin.name)) from exc
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = path
    sys.modules[MODULE_NAME] = module
    _execute(origin, lambda: exec(compiled, module.__dict__))
    return _with_entries(origin, module, source.decode(errors="replace"))


def _not_there(name: str, cause: BaseException | None = None) -> UserCodeError:
    why = f" ({one_line(str(cause), type(cause).__name__)})" if cause else ""
    return UserCodeError(f"{flags.CODE_MODULE} {name}: no such module on the trainer's Python path{why}; "
                         f"install it in your image ({GUIDE})")


def _module_origin(name: str) -> Origin:
    """Found without importing anything: the top-level package's directory (or the top-level module's
    file) holds the user's code."""
    try:
        top = importlib.util.find_spec(name.partition(".")[0])
    except (ImportError, ValueError) as exc:
        raise _not_there(name, exc) from None
    if top is None:
        raise _not_there(name)
    if top.submodule_search_locations:
        roots = tuple(os.path.realpath(p) for p in top.submodule_search_locations)
    else:
        roots = (os.path.realpath(top.origin or ""),)
    return Origin(name, module=name, roots=roots, display_base=os.path.dirname(roots[0]))


def load_module(name: str) -> Code:
    """--code-module NAME: a module importable in the trainer's image (one built FROM it)."""
    origin = _module_origin(name)

    def import_it() -> types.ModuleType:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                raise _not_there(name) from None
            raise

    module = _execute(origin, import_it)
    path = getattr(module, "__file__", None)
    source = _read(path)
    if source is not None:
        origin = replace(origin, file=path, sha256=_sha256(source))
    return _with_entries(origin, module, (source or b"").decode(errors="replace"))


def _read(path: str | None) -> bytes | None:
    try:
        with open(path or "", "rb") as f:
            return f.read()
    except OSError:
        return None


# ---------------------------------------------------------------- build_model and load_data


def _binding_line(source: str, name: str) -> int | None:
    """The line of the last top-level statement that binds name (def, assignment, import), if any."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    lines = [node.lineno for node in tree.body if name in _bound_names(node)]
    return lines[-1] if lines else None


def _bound_names(node: Any) -> set:
    import ast

    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).partition(".")[0] for a in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {t.id for t in targets if isinstance(t, ast.Name)}


def _takes_context(fn: Callable) -> bool | None:
    """True: fn(ctx); False: fn(); None: neither call fits its signature."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True  # a builtin or C callable: call it the documented way
    for takes, args in ((True, (None,)), (False, ())):
        try:
            signature.bind(*args)
        except TypeError:
            continue
        return takes
    return None


def _entry(origin: Origin, module: types.ModuleType, name: str, source: str) -> Entry:
    fn = getattr(module, name, None)
    shown = origin.display(origin.file) if origin.file else origin.name
    line = _binding_line(source, name)
    at = f"{shown}:{line}" if line else shown
    if fn is None:
        raise UserCodeError(f"{shown}: defines no {name}(ctx) function; see {GUIDE}")
    if not callable(fn):
        raise UserCodeError(f"{at}: {name} is {userdata.kind(fn)}, not a function; see {GUIDE}")
    code_of = getattr(fn, "__code__", None)
    if code_of is not None and origin.owns(code_of.co_filename):
        at = f"{origin.display(code_of.co_filename)}:{code_of.co_firstlineno}"
    takes = _takes_context(fn)
    if takes is None:
        raise UserCodeError(f"{at} in {name}: takes {inspect.signature(fn)}; the harness calls {name}(ctx) "
                            f"(or {name}() with no parameters)")
    return Entry(name, fn, takes, f"{at} in {name}")


def _with_entries(origin: Origin, module: types.ModuleType, source: str) -> Code:
    build_model, load_data = (_entry(origin, module, name, source) for name in ENTRY_POINTS)
    # `from tensorflow.keras import callbacks` binds the name to a module: an import, not the hook.
    hook = getattr(module, OPTIONAL, None)
    callbacks = None if hook is None or inspect.ismodule(hook) else _entry(origin, module, OPTIONAL, source)
    return Code(origin, build_model, load_data, callbacks)


def builtin(model: str, build_model: Callable, dataset: str, load_data: Callable) -> Code:
    """The built-in model and dataset a run names, as the same kind of code as a user's."""
    return Code(Origin(f"{model} on {dataset}", builtin=True), Entry("build_model", build_model, True, model),
                Entry("load_data", load_data, True, dataset))


def call(code: Code, entry: Entry, ctx: Context) -> Any:
    """entry(ctx), its print() on stderr; a failure of the user's code becomes a UserCodeError naming its
    line. A TrainerError (a built-in's DataError) keeps its own exit code."""
    with contextlib.redirect_stdout(sys.stderr):
        try:
            return entry.fn(ctx) if entry.takes_context else entry.fn()
        except TrainerError:
            raise
        except Exception as exc:
            if code.builtin:
                raise
            raise UserCodeError(describe_exception(code.origin, exc, entry.where)) from exc


def fail(entry: Entry, message: str, error: type = UserCodeError) -> TrainerError:
    """An error about what entry returned or built: `my_model.py:20 in load_data: <message>` (for a built-in,
    its name instead of the file and line)."""
    return error(f"{entry.where}: {message}")


# ---------------------------------------------------------------- load_data, before or after the strategy


def seed_everything_but_tensorflow(seed: int) -> None:
    """Python's and NumPy's global generators: a load_data that shuffles with them does the same on every
    worker (each worker keeps its share of the same sequence)."""
    random.seed(seed)
    np.random.seed(seed)


def _describe(code: Code, result: Any) -> userdata.Data:
    try:
        return userdata.describe(result)
    except userdata.Invalid as exc:
        raise fail(code.load_data, str(exc), DataError if code.builtin else UserCodeError) from None


def load_data_before_strategy(code: Code, ctx: Context) -> userdata.Data | None:
    """load_data's NumPy arrays, checked; None when it needs TensorFlow (it builds a tf.data.Dataset, or
    decodes with TensorFlow): then `load_data_after_strategy` calls it again."""
    seed_everything_but_tensorflow(ctx.seed)
    with tf_ops_refused() as refusal:
        try:
            result = call(code, code.load_data, ctx)
        except (UserCodeError, _TensorFlowOp):  # a built-in's op is not wrapped (call): it builds a Dataset too
            if refusal.stack is None:
                raise
            result = None
    if refusal.stack is not None or userdata.needs_tensorflow(result):
        return None
    return _describe(code, result)


def load_data_after_strategy(code: Code, ctx: Context) -> userdata.Data:
    seed_everything_but_tensorflow(ctx.seed)
    return _describe(code, call(code, code.load_data, ctx))
