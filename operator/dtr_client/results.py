"""The client's pure parts: a run document from what a user gives, and the typed views of a run's status.

No I/O here but reading the file a user names; the backends (cluster.py, local.py) do the rest.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtr_contract.summary import EXAMPLES_PER_SECOND

from dtr_operator.api import API_VERSION, KIND
from dtr_operator.reasons import FAILED, TERMINAL
from dtr_operator.spec import SpecError, parse_run

from . import complete_run, submit
from .runfile import RunFileError, runs_from_text

# What create(FILE.py) takes: dtr submit's options (complete_run's too) and params.
CODE_OPTIONS = frozenset({dest for dest, *_ in submit.OPTIONS} | {"claim", "image", submit.PARAMS}
                         | complete_run.NAMES)


class InvalidRun(ValueError):
    """What create() was given is not a run the API server would admit: one line saying why."""


class RunNotFound(LookupError):
    """No run of that name (in the client's namespace, or the local backend's directory)."""


class NoModel(LookupError):
    """The run has exported no model (yet): fetch_model() has nothing to copy."""


class RunFailed(Exception):
    """The run ended Failed: its reason and message, as its status says them (status: the whole RunStatus)."""

    def __init__(self, status: RunStatus):
        super().__init__(f"{KIND} {status.name} failed: {status.reason}: {status.message}")
        self.status = status
        self.reason = status.reason
        self.message = status.message


@dataclass(frozen=True)
class Progress:
    """One finished epoch, as status.progress says it (docs/api.md#progress), or the run's history file
    (history(): then with the epoch's seconds and the UTC time it ended, and without the time left)."""

    epoch: int
    epochs: int
    metrics: dict[str, float] = field(default_factory=dict)
    examples_per_second: float | None = None
    remaining_seconds: int | None = None
    seconds: float | None = None
    time: str | None = None

    @classmethod
    def from_status(cls, progress: Mapping[str, Any]) -> Progress:
        metrics = {str(m["name"]): float(m["value"]) for m in progress.get("metrics") or []}
        return cls(int(progress["epoch"]), int(progress["epochs"]), metrics, progress.get(EXAMPLES_PER_SECOND),
                   progress.get("estimatedRemainingSeconds"))  # fmt: skip


@dataclass(frozen=True)
class RunStatus:
    """A run's status, the fields a notebook needs typed; `status` is all of it, as the API server has it."""

    name: str
    phase: str
    reason: str = ""
    message: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    headline: str | None = None
    model_path: str | None = None  # status.model.path: where the model is inside the run's volume
    model_uri: str | None = None  # status.model.storageUri: pvc://<claim>/<models dir>, for KServe
    local_model_path: str | None = None  # the local backend: the model's directory on this machine
    progress: Progress | None = None
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.phase in TERMINAL

    @classmethod
    def from_status(cls, name: str, status: Mapping[str, Any], local_model_path: str | None = None) -> RunStatus:
        model = status.get("model") or {}
        progress = status.get("progress")
        return cls(
            name=name,
            phase=str(status.get("phase") or "Pending"),
            reason=str(status.get("reason") or ""),
            message=str(status.get("message") or ""),
            metrics=dict(status.get("metrics") or {}),
            headline=status.get("headline"),
            model_path=model.get("path"),
            model_uri=model.get("storageUri"),
            local_model_path=local_model_path,
            progress=Progress.from_status(progress) if progress and progress.get("epoch") else None,
            status=dict(status),
        )


def outcome(status: RunStatus) -> RunStatus | None:
    """The run's final status when it has ended well, None while it goes on; RunFailed when it ended Failed."""
    if status.phase == FAILED:
        raise RunFailed(status)
    return status if status.done else None


def new_epochs(seen: int, found: Iterable[Progress]) -> Iterator[Progress]:
    """The epochs after `seen`, in order, each once: a resumed or restarted chief repeats none of them."""
    for progress in found:
        if progress.epoch > seen:
            seen = progress.epoch
            yield progress


# ---- a run document from a file, a dict or a model file ----------------------------------------


def run_document(run: str | Path | Mapping[str, Any], name: str | None,
                 options: Mapping[str, Any]) -> tuple[dict[str, Any], submit.CodeFile | None]:  # fmt: skip
    """(the DistTrainingRun, the model file when `run` is one): from a dict, a YAML file with one run, or a
    Python model file sent as `dtr submit FILE.py` sends it (options: its training options). InvalidRun
    otherwise. The namespace is the backend's, unless the document names one."""
    if isinstance(run, Mapping):  # apiVersion and kind may be left out: a dict can only mean a run
        doc, code = {"apiVersion": API_VERSION, "kind": KIND, **copy.deepcopy(dict(run))}, None
    elif str(run).endswith(".py"):
        return _code_run(str(run), name, options)
    else:
        doc, code = _run_file(str(run)), None
    if options:
        raise InvalidRun(f"{', '.join(sorted(options))}: training options go with a model file (FILE.py); a run "
                         "document says them in its spec")  # fmt: skip
    if name is not None:
        doc.setdefault("metadata", {})["name"] = name
    _admit(doc)
    return doc, code


def _code_run(path: str, name: str | None, options: Mapping[str, Any]) -> tuple[dict[str, Any], submit.CodeFile]:
    unknown = sorted(set(options) - CODE_OPTIONS)
    if unknown:
        known = ", ".join(sorted(CODE_OPTIONS))
        raise InvalidRun(f"{', '.join(unknown)}: not an option of a model file (it takes: {known})")
    try:
        code, doc = submit.checked_code_run(path, {**options, "name": name}, None)
    except submit.SubmitError as err:
        raise InvalidRun(str(err)) from None
    return doc, code


def _run_file(path: str) -> dict[str, Any]:
    try:
        docs = runs_from_text(Path(path).read_text(), path)
    except OSError as err:
        raise InvalidRun(f"{path}: {err.strerror}") from None
    except RunFileError as err:
        raise InvalidRun(str(err)) from None
    if len(docs) != 1:
        raise InvalidRun(f"{path}: create() takes one {KIND}; this file has {len(docs)}")
    return docs[0]


def _admit(doc: dict[str, Any]) -> None:
    try:
        parse_run(doc)
    except SpecError as err:
        name = (doc.get("metadata") or {}).get("name", "?")
        raise InvalidRun(f"{KIND} {name}: {err}") from None
    except (KeyError, TypeError, AttributeError) as err:
        raise InvalidRun(f"not a {KIND} document: {err}") from None
