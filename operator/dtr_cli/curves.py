"""`dtr plot RUN...` and `dtr compare RUN...`: the runs' curves as a PNG, and their final figures and spec
differences side by side (docs/client.md#curves). Both go through the Python client, on a cluster or locally.

    dtr plot mnist-a mnist-b -o ab.png      loss and each metric per epoch, one colour per run
    dtr compare mnist-a mnist-b             phase, epochs, duration, metrics; then the spec fields that differ
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .command import BadInput, Failed, client_for


def default_output(runs: list[str]) -> str:
    """<run>.png for one run, curves.png for several."""
    return f"{runs[0]}.png" if len(runs) == 1 else "curves.png"


def _plot(args: argparse.Namespace) -> None:
    client = client_for(args)
    histories = {run: client.history(run) for run in args.runs}
    empty = [run for run, history in histories.items() if not history]
    if empty:
        raise Failed(f"{', '.join(empty)}: no finished epoch to plot (yet)")
    from dtr_client.plots import plot_histories

    try:
        figure = plot_histories(histories, args.only)
    except ValueError as err:  # an --only metric none of the runs has
        raise BadInput(str(err)) from None
    path = Path(args.output or default_output(args.runs))
    figure.savefig(path, format="png", dpi=100)
    print(path)


def _compare(args: argparse.Namespace) -> None:
    from dtr_client.curves import compare_lines

    client = client_for(args)
    statuses = [client.get(run) for run in args.runs]
    print("\n".join(compare_lines(statuses, {run: client.spec(run) for run in args.runs})))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", metavar="RUN", nargs="+", help="DistTrainingRun names")
    p.add_argument("-n", "--namespace", help="their namespace on a cluster (default: the kubeconfig context's)")
    p.add_argument("--backend", choices=("auto", "cluster", "local"), default="auto",
                   help="where the runs are: a cluster, runs of `dtr run` on this machine, or auto (the cluster "
                        "when there are credentials, as the Python client decides) [auto]")  # fmt: skip
    p.add_argument("--dir", type=Path, default=None, help="the local runs' directory [./.dtr, env DTR_RUN_DIR]")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="draw runs' loss and metrics per epoch into a PNG",
                       description="Draw the runs' loss and each metric per epoch (every finished epoch, from the "
                                   "history file the chief writes on the run's volume) into a PNG: one subplot per "
                                   "metric, train solid and val_* dashed, one colour per run, the runs' names in the "
                                   "legend. Prints the file's path.")  # fmt: skip
    _common(p)
    p.add_argument("-o", "--output", metavar="FILE.png", help="where to write it [RUN.png; curves.png for several]")
    p.add_argument("--only", action="append", metavar="METRIC", help="only this metric (and its val_); repeatable")
    p.set_defaults(func=_plot)
    p = sub.add_parser("compare", help="runs' final phase, metrics, epochs and duration, and their spec differences",
                       description="Print the runs' final phase, epochs, duration and metrics side by side, then "
                                   "every spec field (a dotted path, the API's defaults filled in) whose value "
                                   "differs between them; fields they share are left out.")  # fmt: skip
    _common(p)
    p.set_defaults(func=_compare)
