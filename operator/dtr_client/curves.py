"""The pure parts of a run's curves (docs/client.md#curves): its history as Progress items, and `dtr compare`'s
table of final figures and spec differences."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from dtr_contract.history import read_history

from dtr_operator.fields import SPEC
from dtr_operator.spec import SpecError, admit

from .results import Progress, RunStatus

MISSING = "-"  # a field or a figure a run does not have


def history_of(text: str) -> list[Progress]:
    """Every finished epoch of a history file (dtr_contract.history), in order, each once."""
    return [Progress(e.epoch, e.epochs, e.metrics, e.examples_per_second, None, e.seconds, e.time)
            for e in read_history(text)]


# ---- dtr compare --------------------------------------------------------------------------------


def defaulted(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec with the API's defaults filled in, so that a default left out and the same value written out
    compare equal; as given when it is not a valid spec (the difference still shows)."""
    try:
        return admit(SPEC, dict(spec), "spec")
    except (SpecError, TypeError, ValueError):
        return dict(spec)


def flatten(value: Any, path: str = "spec") -> dict[str, Any]:
    """{dotted path: leaf value}; a list is one leaf (compared whole)."""
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(flatten(value[key], f"{path}.{key}"))
        return out
    return {path: value}


def spec_differences(specs: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
    """(dotted path, each run's value in the order given) for every field whose values differ between the runs;
    MISSING where a run does not have the field. Identical fields are left out."""
    flat = [flatten(defaulted(spec)) for spec in specs.values()]
    paths = sorted(set().union(*flat)) if flat else []
    rows = [(p, [f.get(p, MISSING) for f in flat]) for p in paths]
    return [(p, values) for p, values in rows if any(v != values[0] for v in values[1:])]


def _seconds_between(start: Any, end: Any) -> float | None:
    try:
        return (datetime.fromisoformat(str(end).replace("Z", "+00:00"))
                - datetime.fromisoformat(str(start).replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return None


def duration(status: RunStatus) -> str:
    """startTime to completionTime (the TFJob's, in the status once the run has ended)."""
    both = status.status.get("startTime"), status.status.get("completionTime")
    seconds = _seconds_between(*both) if all(both) else None
    return MISSING if seconds is None else f"{seconds:.0f}s"


def _figure(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _epochs(status: RunStatus) -> str:
    return MISSING if status.progress is None else f"{status.progress.epoch}/{status.progress.epochs}"


def final_rows(statuses: Sequence[RunStatus]) -> list[list[str]]:
    """phase, epochs finished, duration, then every final metric any of the runs has (by name), a column per run."""
    names = sorted({k for s in statuses for k, v in s.metrics.items() if isinstance(v, (int, float))})
    rows = [["phase", *(s.phase for s in statuses)], ["epochs", *map(_epochs, statuses)],
            ["duration", *map(duration, statuses)]]
    rows += [[f"metrics.{n}", *(_figure(s.metrics.get(n, MISSING)) for s in statuses)] for n in names]
    return rows


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """Left-aligned columns, as kubectl prints them."""
    cells = [list(map(str, header))] + [[c if isinstance(c, str) else _figure(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def compare_lines(statuses: Sequence[RunStatus], specs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """`dtr compare`'s output: the final figures side by side, then the spec fields that differ (specs: by run
    name, in the statuses' order)."""
    header = ["", *(s.name for s in statuses)]
    lines = table(header, final_rows(statuses))
    differences = spec_differences(specs)
    rows = [[path, *values] for path, values in differences]
    lines += ["", *table(["spec differences", *header[1:]], rows)] if rows else ["", "no spec differences"]
    return lines
