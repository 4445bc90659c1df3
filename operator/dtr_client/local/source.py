"""What `dtr run` trains: the one run of a run file (with its code given as a local file), or the run for a model
file (FILE.py) as `dtr submit` would send it; refused with one line (RunError) as the API server would refuse it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dtr_contract import flags

from dtr_operator.api import KIND
from dtr_operator.spec import DEFAULT_TRAINER_IMAGE, RunSpec, SpecError

from .. import submit
from ..runfile import RunFileError, parse_run_doc, runs_from_text


class RunError(Exception):
    """Bad input for `dtr run`: one line for the user."""


def load_run(text: str, source: str, code: submit.CodeFile | None = None) -> RunSpec:
    """The one DistTrainingRun of a run file, read exactly as `dtr render` reads it (with code: the local file
    as its code, with_local_code)."""
    try:
        docs = runs_from_text(text, source)
    except RunFileError as exc:
        raise RunError(str(exc)) from None
    if len(docs) != 1:
        raise RunError(f"{source}: dtr run trains one {KIND} at a time; this file has {len(docs)}")
    return admit(with_local_code(docs[0], code, source), source)


def admit(doc: dict[str, Any], source: str) -> RunSpec:
    """A run document parsed as the API server would admit it; a suspended run is refused."""
    try:
        run = parse_run_doc(doc, source, DEFAULT_TRAINER_IMAGE)
    except SpecError as exc:
        raise RunError(exc.listed()) from None
    if run.suspend:
        raise RunError(f"{source}: spec.suspend is true: a suspended run trains nowhere; set it to false to run it")
    return run


def with_local_code(doc: dict[str, Any], code: submit.CodeFile | None, source: str) -> dict[str, Any]:
    """The run document with a local file (--code) as its code ConfigMap: the ConfigMap and key it names, else
    `<name>-code` and the file's name, as `dtr submit` makes them. A run naming a ConfigMap needs the file: there
    is no cluster to read it from."""
    training = (doc.get("spec") or {}).get("training") or {}
    named = dict(training.get("code") or {})
    _check_local_code(named, code is not None, source)
    if code is None:
        return doc
    name = str((doc.get("metadata") or {}).get("name") or "")
    local = {"configMap": named.get("configMap") or submit.configmap_name(name), "key": named.get("key") or code.key}
    spec = dict(doc.get("spec") or {})
    spec["training"] = {**training, "code": local}
    return {**doc, "spec": spec}


def _check_local_code(named: Mapping[str, Any], file_given: bool, source: str) -> None:
    """RunError when the run's code and --code disagree: a ConfigMap without the file, a module with one."""
    if not file_given and "configMap" in named:
        raise RunError(f"{source}: spec.training.code.configMap {named['configMap']}: dtr run has no cluster to "
                       f"read it from: give the file with {flags.CODE} FILE")  # fmt: skip
    if file_given and "module" in named:
        raise RunError(f"{source}: spec.training.code.module {named['module']}: the run's code is a module in its "
                       f"image; {flags.CODE} is for a file")  # fmt: skip


def code_run(path: str, given: Mapping[str, Any]) -> tuple[RunSpec, submit.CodeFile]:
    """`dtr run FILE.py`: the run `dtr submit FILE.py` would send (the options given, the API's defaults for the
    rest), and the file, checked as dtr submit checks it."""
    try:
        code = submit.read_code(path)
        name = submit.run_name(given.get("name"), path)
    except submit.SubmitError as exc:
        raise RunError(str(exc)) from None
    return admit(submit.code_run_doc(name, None, code.key, given), path), code
