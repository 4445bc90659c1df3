"""What makes `dtr submit FILE.py` a complete run on a shared cluster: each worker's resources (--cpu, --memory,
--gpus), its Kueue queue (--queue), its priority classes, and a base run file to start from (-f base.yaml), whose
fields the options override. Pure: the base file is read, nothing else; the whole run is then admitted as the API
server would (dtr_client.submit.checked_code_run), so a bad value is refused naming its field.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .runfile import RunFileError, runs_from_text

GPU = "nvidia.com/gpu"  # the NVIDIA device plugin's resource (docs/gpus.md)
_META_KEPT = ("name", "namespace", "labels", "annotations")  # of a base's metadata; never its uid or resourceVersion


class BaseError(ValueError):
    """A base run file that cannot be used: one line naming the file."""


def _both(kind: str) -> tuple[tuple[str, ...], ...]:
    return ("resources", "requests", kind), ("resources", "limits", kind)


# (dest, flag, spec paths it sets, help): every path of an option set to its value. The spec's own names in the
# help, so a reader finds them in docs/api.md.
OPTIONS: tuple[tuple[str, str, tuple[tuple[str, ...], ...], str], ...] = (
    ("cpu", "--cpu", _both("cpu"), "CPUs for each worker, e.g. 2 or 500m: requested and its limit "
                                   "(spec.resources.requests.cpu and limits.cpu)"),
    ("memory", "--memory", _both("memory"), "memory for each worker, e.g. 4Gi: requested and its limit "
                                            "(spec.resources.requests.memory and limits.memory)"),
    ("gpus", "--gpus", (("resources", "limits", GPU),),
     f"GPUs for each worker (spec.resources.limits {GPU}; an image with CUDA: docs/gpus.md)"),
    ("queue", "--queue", (("queueName",),), "the Kueue LocalQueue of the run's namespace (spec.queueName)"),
    ("priority_class", "--priority-class", (("priorityClassName",),),
     "the worker pods' PriorityClass (spec.priorityClassName)"),
    ("workload_priority_class", "--workload-priority-class", (("workloadPriorityClass",),),
     "Kueue's WorkloadPriorityClass, with --queue (spec.workloadPriorityClass)"),
)
NAMES = frozenset({dest for dest, *_ in OPTIONS} | {"base"})  # what the client's create(FILE.py) takes besides


def _one_run(path: str | Path) -> dict[str, Any]:
    """The one DistTrainingRun of the file at path; BaseError otherwise."""
    try:
        docs = runs_from_text(Path(path).read_text(), str(path))
    except OSError as err:
        raise BaseError(f"-f {path}: {err.strerror}") from None
    except RunFileError as err:
        raise BaseError(f"-f {err}") from None
    if len(docs) != 1:
        raise BaseError(f"-f {path}: a base is one DistTrainingRun; this file has {len(docs)}")
    return docs[0]


def read_base(path: str | Path | None) -> dict[str, Any]:
    """The one DistTrainingRun of a base file ({} for none), metadata cut to what a new run may take from it;
    BaseError otherwise. Its spec is checked with the whole run, after the options."""
    if path is None:
        return {}
    doc = _one_run(path)
    meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        raise BaseError(f"-f {path}: metadata and spec must be mappings")
    return {"metadata": {k: meta[k] for k in _META_KEPT if k in meta}, "spec": spec}


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """base with over's fields on top: mappings merged key by key, anything else (a list, a value) replaced."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        inner = out.get(key)
        out[key] = _merged(inner, value) if isinstance(inner, Mapping) and isinstance(value, Mapping) else value
    return out


def _option_spec(given: Mapping[str, Any]) -> dict[str, Any]:
    """The spec fields the options given set (None: not given)."""
    spec: dict[str, Any] = {}
    for dest, _flag, paths, _text in OPTIONS:
        value = given.get(dest)
        if value is None:
            continue
        for *parents, key in paths:
            place = spec
            for name in parents:
                place = place.setdefault(name, {})
            place[key] = str(value)
    return spec


def complete(doc: Mapping[str, Any], base: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """The run `dtr submit` makes (doc: its code and training options) on top of the base, then the options above
    on top of both. The code is always the file's: a base's spec.training.code is replaced, not merged."""
    spec = _merged(_merged(base.get("spec") or {}, doc["spec"]), _option_spec(given))
    spec["training"]["code"] = copy.deepcopy(doc["spec"]["training"]["code"])
    metadata = _merged(base.get("metadata") or {}, doc["metadata"])
    return {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": metadata, "spec": spec}
