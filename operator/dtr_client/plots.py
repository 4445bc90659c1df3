"""Training curves as a matplotlib Figure (docs/client.md#curves): loss and each metric per epoch, one subplot
per metric, train solid and validation (val_*) dashed, one colour per run, the runs' names in the legend.

matplotlib is imported here only, when a figure is drawn (the operator's image does not have it). The Figure is
made without pyplot: no backend is chosen or changed (savefig renders with Agg, no display needed), pyplot keeps
no reference to it, and a notebook shows it once, as the cell's value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .results import Progress

VAL = "val_"
COLUMNS = 2  # subplots per row
SIZE = (5.0, 3.4)  # inches per subplot


def metric_names(histories: Mapping[str, Sequence[Progress]], wanted: Iterable[str] | None = None) -> list[str]:
    """The subplots: loss first, then the other metrics by name; a val_X goes with X (its own subplot only when
    the runs have no X). `wanted` keeps those named (X or val_X)."""
    found = {name for history in histories.values() for p in history for name in p.metrics}
    bases = {_base(n, found) for n in found}
    if wanted is not None:
        bases &= {_base(w, bases) for w in wanted}
    return sorted(bases, key=lambda n: (n != "loss", n))


def _base(name: str, names: set[str]) -> str:
    """X for val_X when X is among names; else name itself."""
    base = name[len(VAL):] if name.startswith(VAL) else ""
    return base if base in names else name


def series(history: Sequence[Progress], name: str) -> tuple[list[int], list[float]]:
    """(epochs, values) of one metric in one run's history: the epochs that have it."""
    points = [(p.epoch, p.metrics[name]) for p in history if name in p.metrics]
    return [e for e, _ in points], [v for _, v in points]


def plot_histories(histories: Mapping[str, Sequence[Progress]], metrics: Iterable[str] | None = None) -> Any:
    """A Figure of the runs' curves (histories: run name -> its epochs, as TrainingClient.history returns them).
    ValueError when there is nothing to draw."""
    names = metric_names(histories, metrics)
    if not names:
        raise ValueError("no metric to plot: " + ("the runs have no finished epoch" if metrics is None
                                                  else f"none of {', '.join(metrics)} in the runs"))
    import matplotlib
    from matplotlib.figure import Figure

    rows = -(-len(names) // COLUMNS)
    columns = min(COLUMNS, len(names))
    figure = Figure(figsize=(SIZE[0] * columns, SIZE[1] * rows))
    axes = figure.subplots(rows, columns, squeeze=False)
    colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, name in zip(axes.flat, names, strict=False):  # the grid may have a cell more than the metrics
        _draw(ax, histories, name, colours)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    figure.tight_layout()
    return figure


def _draw(ax: Any, histories: Mapping[str, Sequence[Progress]], name: str, colours: Sequence[str]) -> None:
    for i, (run, history) in enumerate(histories.items()):
        colour = colours[i % len(colours)]
        for metric, style, label in ((name, "-", run), (VAL + name, "--", f"{run} ({VAL}{name})")):
            epochs, values = series(history, metric)
            if epochs:
                ax.plot(epochs, values, style, color=colour, marker=".", label=label)
    ax.set_title(name)
    ax.set_xlabel("epoch")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
