"""Reading DistTrainingRun files (what `dtr render` and `dtr run` take)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .spec import KIND, RunSpec, SpecError, parse_run


class RunFileError(ValueError):
    """A file that cannot be read as DistTrainingRuns; the message says which file and why."""


def runs_from_text(text: str, source: str = "<input>") -> list[dict[str, Any]]:
    """The DistTrainingRun documents of a (multi-document) YAML text; other kinds are skipped."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        raise RunFileError(f"{source}:{line} not valid YAML: {getattr(err, 'problem', err)}") from None
    if not all(isinstance(d, dict) for d in docs):
        raise RunFileError(f"{source}: every YAML document must be a mapping")
    runs = [d for d in docs if d.get("kind") == KIND]
    if not runs:
        raise RunFileError(f"{source}: no {KIND} in this file")
    return runs


def read_run_file(path: str | Path, default_image: str) -> list[RunSpec]:
    """The runs in a file, parsed and validated like the API server would (SpecError otherwise)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise RunFileError(f"{path}: {err.strerror}") from None
    out = []
    for doc in runs_from_text(text, str(path)):
        try:
            out.append(parse_run(doc, default_image=default_image))
        except SpecError as err:
            name = (doc.get("metadata") or {}).get("name", "?")
            raise SpecError(f"{path}: {KIND} {name}: {err}") from None
    return out
