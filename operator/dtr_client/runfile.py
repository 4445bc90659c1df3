"""Reading DistTrainingRun files (what `dtr render` and `dtr run` take)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dtr_operator.api import API_VERSION, KIND
from dtr_operator.spec import RunSpec, SpecError, parse_run


class RunFileError(ValueError):
    """A file that cannot be read as DistTrainingRuns; the message says which file and why."""


_WANT = f"want apiVersion: {API_VERSION}, kind: {KIND}"  # what a document must say to be a run


def runs_from_text(text: str, source: str = "<input>") -> list[dict[str, Any]]:
    """The DistTrainingRun documents of a (multi-document) YAML text; other kinds are skipped.

    Refused as `kubectl apply` refuses them: a document without apiVersion or kind, and a
    DistTrainingRun of an apiVersion the CRD does not serve.
    """
    docs = _documents(text, source)
    for number, doc in enumerate(docs, start=1):
        _check_document(doc, f"{source}: document {number}" if len(docs) > 1 else source)
    runs = [d for d in docs if d["kind"] == KIND]
    if not runs:
        found = ", ".join(sorted({str(d["kind"]) for d in docs})) or "nothing"
        raise RunFileError(f"{source}: no {KIND} in this file (found {found}; {_WANT})")
    return runs


def _documents(text: str, source: str) -> list[dict[str, Any]]:
    """The non-empty documents of the text, each a mapping (RunFileError otherwise)."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise RunFileError(f"{source}:{_yaml_line(err)} not valid YAML: {_yaml_problem(err)}") from None
    if not all(isinstance(d, dict) for d in docs):
        raise RunFileError(f"{source}: every YAML document must be a mapping")
    return docs


def _yaml_line(err: yaml.YAMLError) -> str:
    """' line N' where the parser stopped, or '' when it does not say."""
    where = getattr(err, "problem_mark", None)
    return f" line {where.line + 1}" if where is not None else ""


def _yaml_problem(err: yaml.YAMLError) -> str:
    """The parser's complaint, on one line (a reader error, such as a control character, spans two)."""
    problem = getattr(err, "problem", None) or str(err)
    return problem.splitlines()[0]


def _check_document(doc: dict[str, Any], where: str) -> None:
    """apiVersion and kind are set, and a DistTrainingRun's apiVersion is the served one."""
    for field in ("apiVersion", "kind"):
        if not doc.get(field):
            raise RunFileError(f"{where}: {field} not set ({_WANT})")
    if doc["kind"] == KIND and doc["apiVersion"] != API_VERSION:
        raise RunFileError(f"{where}: apiVersion {doc['apiVersion']} is not served for {KIND}: use {API_VERSION}")


def read_run_file(path: str | Path, default_image: str) -> list[RunSpec]:
    """The runs in a file, parsed and validated like the API server would (SpecError otherwise)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise RunFileError(f"{path}: {err.strerror}") from None
    return [parse_run_doc(doc, str(path), default_image) for doc in runs_from_text(text, str(path))]


def parse_run_doc(doc: dict[str, Any], source: str, default_image: str) -> RunSpec:
    """One run of a file, its errors prefixed with the file and the run's name."""
    try:
        return parse_run(doc, default_image=default_image)
    except SpecError as err:
        name = (doc.get("metadata") or {}).get("name", "?")
        raise SpecError(*err.errors, where=f"{source}: {KIND} {name}") from None
