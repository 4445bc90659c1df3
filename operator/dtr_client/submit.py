"""Your own model file sent to the cluster with a run, no image to build (docs/own-model.md): what `dtr submit
FILE.py` and the client's create(FILE.py) send.

An immutable ConfigMap `<name>-code` holds the file under its base name (labelled distml.dev/run=<name>), then
the DistTrainingRun names it (spec.training.code), then the run is made the ConfigMap's owner, so deleting the
run deletes its code. The file is checked here first: a Python file (compiled locally: a syntax error names
its file and line before anything reaches the cluster) of at most CONFIGMAP_BYTES (the API server's limit on a
ConfigMap; a larger program goes in an image built FROM the trainer image).

The pure parts (the file's check, the two manifests, the training options) serve `dtr run FILE.py` too.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtr_contract import flags

from dtr_operator.api import API_VERSION, KIND, RUN_LABEL
from dtr_operator.fields import CONFIGMAP_LIMIT, MAX_NAME_LENGTH, find
from dtr_operator.grammar import CODE_KEY, DNS1035_LABEL
from dtr_operator.spec import SpecError, parse_run

from . import complete_run

CONFIGMAP_BYTES = 1024 * 1024  # CONFIGMAP_LIMIT: the API server refuses a ConfigMap whose data is larger
OWN_IMAGE = "build an image FROM the trainer image with your code and name its module in spec.training.code.module"
GUIDE = "docs/own-model.md"


class SubmitError(ValueError):
    """A file or an option dtr submit cannot send: one line naming it."""


@dataclass(frozen=True)
class CodeFile:
    """A checked Python file: its key in the ConfigMap (its base name) and its bytes."""

    key: str
    content: bytes


def read_code(path: str | Path) -> CodeFile:
    """The file at path, checked as the cluster would take it, or SubmitError naming what is wrong."""
    p = Path(path)
    try:
        content = p.read_bytes()
    except OSError as err:
        raise SubmitError(f"{path}: {err.strerror}") from None
    if re.fullmatch(CODE_KEY, p.name) is None:
        raise SubmitError(f"{path}: the file's name is its key in the ConfigMap: it must end in .py and hold only "
                          "letters, digits, '-', '_' and '.'; rename it")  # fmt: skip
    if len(content) > CONFIGMAP_BYTES:
        raise SubmitError(f"{path}: {len(content)} bytes, over the {CONFIGMAP_LIMIT} a ConfigMap holds: {OWN_IMAGE} "
                          f"({GUIDE})")  # fmt: skip
    check_syntax(content, str(path))
    return CodeFile(p.name, content)


def check_syntax(content: bytes, where: str) -> None:
    """Compile the file as the trainer's Python would, without running it: SubmitError `file:line: message`."""
    try:
        compile(content, where, "exec", dont_inherit=True)
    except SyntaxError as err:
        raise SubmitError(f"{where}:{err.lineno}: {type(err).__name__}: {err.msg}") from None
    except ValueError as err:  # null bytes
        raise SubmitError(f"{where}: not Python source: {err}") from None


def run_name(given: str | None, path: str | Path) -> str:
    """--name, else the file's stem as a run name (wine_v2.py -> wine-v2); SubmitError when neither is one."""
    name = given or re.sub(r"[^a-z0-9-]+", "-", Path(path).stem.lower()).strip("-")
    if re.fullmatch(DNS1035_LABEL, name) is None or len(name) > MAX_NAME_LENGTH:
        source = "--name" if given else f"the file name {Path(path).name}"
        raise SubmitError(f"{source} does not make a run name ({name!r}: a DNS-1035 label of at most "
                          f"{MAX_NAME_LENGTH} characters, starting with a letter): give one with --name")  # fmt: skip
    return name


def configmap_name(run: str) -> str:
    return f"{run}-code"


_KINDS = {"integer": int, "number": float, "string": str}


def _option(dest: str, flag: str, path: str, what: str) -> tuple[str, str, type, str, str]:
    """(dest, flag, type, spec path, help): the type and the API's default from the field table (fields.py)."""
    field = find(path)
    default = field.doc_default or (None if field.default is None else str(field.default))
    return dest, flag, _KINDS[field.type], path, what + (f" (API default {default})" if default else "")


# The options both `dtr submit FILE.py` and `dtr run FILE.py` take: (dest, flag, type, spec path, help). The
# trainer's own flag names where the trainer has one (they mean the same).
OPTIONS: tuple[tuple[str, str, type, str, str], ...] = (
    _option("workers", "--workers", "workers", "worker replicas"),
    _option("epochs", flags.EPOCHS, "training.epochs", "passes over the data"),
    _option("dataset", flags.DATASET, "training.dataset",
            "what your load_data gets as ctx.dataset: a name, or a path under the volume's data directory"),
    _option("batch_size_per_worker", flags.BATCH_SIZE_PER_WORKER, "training.batchSizePerWorker",
            "batch size on each worker"),
    _option("learning_rate", flags.LEARNING_RATE, "training.learningRate", "the optimiser's learning rate"),
    _option("metric", flags.METRIC, "training.metric", "the headline metric (status.headline, the METRIC column)"),
)


PARAMS = "params"  # create(FILE.py, params={...}) and `--param name=value`: spec.training.params (docs/experiments.md)


def _set(spec: dict[str, Any], path: str, value: Any) -> None:
    *parents, key = path.split(".")
    for name in parents:
        spec = spec.setdefault(name, {})
    spec[key] = value


def code_run_doc(name: str, namespace: str | None, key: str, given: Mapping[str, Any],
                 extra: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """The DistTrainingRun for a file sent in ConfigMap `<name>-code`: the options given (by dest, None = not
    given, left to the API's defaults) and extra spec paths (storage.claimName, image)."""
    spec: dict[str, Any] = {"training": {"code": {"configMap": configmap_name(name), "key": key}}}
    for dest, _flag, _kind, path, _text in OPTIONS:
        if given.get(dest) is not None:
            _set(spec, path, given[dest])
    if given.get(PARAMS):
        _set(spec, "training.params", dict(given[PARAMS]))
    for path, value in (extra or {}).items():
        if value is not None:
            _set(spec, path, value)
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def code_configmap(run: str, namespace: str, code: CodeFile) -> dict[str, Any]:
    """The immutable ConfigMap holding the file (data when it is UTF-8 text, else binaryData)."""
    try:
        content = {"data": {code.key: code.content.decode()}}
    except UnicodeDecodeError:
        content = {"binaryData": {code.key: base64.b64encode(code.content).decode()}}
    meta = {"name": configmap_name(run), "namespace": namespace, "labels": {RUN_LABEL: run}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "immutable": True, **content}


def run_owner(run: Mapping[str, Any]) -> dict[str, Any]:
    """The run as the ConfigMap's owner: the garbage collector deletes the code with the run. Not a controller
    and not blocking: a run's author needs no rights on the run's finalizers."""
    meta = run["metadata"]
    return {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"], "uid": meta["uid"]}


def checked_code_run(path: str, given: Mapping[str, Any], namespace: str | None) -> tuple[CodeFile, dict[str, Any]]:
    """The file and its DistTrainingRun for the options given (by dest, with `name`, `claim`, `image`, and
    complete_run's: resources, queue, priority classes, `base` a base run file), the run admitted as the API
    server would; SubmitError otherwise."""
    code = read_code(path)
    base = _base(given.get("base"))
    name = run_name(given.get("name") or base.get("metadata", {}).get("name"), path)
    extra = {"storage.claimName": given.get("claim"), "image": given.get("image")}
    doc = complete_run.complete(code_run_doc(name, namespace, code.key, given, extra), base, given)
    try:
        parse_run(doc)
    except SpecError as err:
        raise SubmitError(str(err)) from None
    return code, doc


def _base(path: str | None) -> dict[str, Any]:
    try:
        return complete_run.read_base(path)
    except complete_run.BaseError as err:
        raise SubmitError(str(err)) from None


def manifests(path: str, given: Mapping[str, Any], namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(ConfigMap, DistTrainingRun) for the file and the options given (as checked_code_run takes them), the run
    admitted as the API server would."""
    code, doc = checked_code_run(path, given, namespace)
    return code_configmap(doc["metadata"]["name"], namespace, code), doc


# ---- the shell --------------------------------------------------------------------------------


def submit(kube: Any, config_map: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """Create the ConfigMap, then the run, then make the run own the ConfigMap; the run as created. A run the API
    refuses takes its new ConfigMap with it."""
    from dtr_operator.kube import AlreadyExists, ApiError

    meta = config_map["metadata"]
    try:
        kube.create(config_map)
    except AlreadyExists:
        raise SubmitError(f"ConfigMap {meta['name']} already exists in namespace {meta['namespace']}: delete it "
                          "(kubectl delete configmap ...) or choose another --name") from None  # fmt: skip
    try:
        run = kube.create(doc)
    except ApiError:
        kube.delete("v1", "ConfigMap", meta["namespace"], meta["name"])
        raise
    kube.set_owner("v1", "ConfigMap", meta["namespace"], meta["name"], run_owner(run))
    return run
