"""`dtr sweep`: DistTrainingSweeps on a cluster (docs/experiments.md#sweeps), through dtr_client.sweeps.

    dtr sweep start examples/sweep-wine.yaml --wait   start it; with --wait, a line per change until it ends
    dtr sweep status wine-width                       its phase, then each trial: point, last epoch, final value
    dtr sweep watch wine-width                        status again at each change, until it ends (1: it failed)
    dtr sweep compare wine-width                      `dtr compare` over its trials' runs
    dtr sweep plot wine-width -o trials.png           each trial's curves (a stopped one's: the objective it reached)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .command import BadInput, Failed


def _client(args: argparse.Namespace) -> Any:
    from dtr_client.sweeps import SweepClient

    return SweepClient(namespace=args.namespace)


def _print(status: dict[str, Any]) -> None:
    from dtr_client.sweeps import trial_lines

    print("\n".join(trial_lines(status)), flush=True)


def _watch(client: Any, name: str) -> None:
    from dtr_client.sweeps import SweepFailed

    try:
        client.wait(name, on_change=_print)
    except SweepFailed as err:
        raise Failed(f"sweep {name} failed: {err}") from None


def _start(args: argparse.Namespace) -> None:
    client = _client(args)
    name = client.create(args.file)
    print(f"DistTrainingSweep {name} created in {client.namespace}", flush=True)
    if args.wait:
        _watch(client, name)


def _status(args: argparse.Namespace) -> None:
    _print(_client(args).get(args.sweep))


def _watch_command(args: argparse.Namespace) -> None:
    _watch(_client(args), args.sweep)


def _compare(args: argparse.Namespace) -> None:
    from dtr_client import TrainingClient
    from dtr_client.curves import compare_lines

    runs = _client(args).trials(args.sweep)
    if not runs:
        raise Failed(f"sweep {args.sweep} has no trial run to compare (yet)")
    client = TrainingClient("cluster", namespace=args.namespace)
    print("\n".join(compare_lines([client.get(r) for r in runs], {r: client.spec(r) for r in runs})))


def _plot(args: argparse.Namespace) -> None:
    from dtr_client import TrainingClient
    from dtr_client.plots import plot_histories

    histories = _client(args).histories(args.sweep, TrainingClient("cluster", namespace=args.namespace).history)
    if not histories:
        raise Failed(f"sweep {args.sweep}: no trial has finished an epoch (yet)")
    try:
        figure = plot_histories(histories, args.only)
    except ValueError as err:  # an --only metric no trial has
        raise BadInput(str(err)) from None
    path = Path(args.output or f"{args.sweep}.png")
    figure.savefig(path, format="png", dpi=100)
    print(path)


def add_parser(sub: argparse._SubParsersAction) -> None:
    sweep = sub.add_parser("sweep", help="start, watch and compare DistTrainingSweeps (trials of a run template)",
                           description=__doc__.split("\n\n")[0])  # fmt: skip
    verbs = sweep.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = verbs.add_parser("start", help="create a sweep from a YAML file")
    p.add_argument("file", type=Path, metavar="FILE.yaml", help="a DistTrainingSweep")
    p.add_argument("--wait", action="store_true", help="print its trials at each change until it ends")
    p.set_defaults(func=_start, parser=p)
    for verb, func, said in (("status", _status, "the sweep's phase and each trial"),
                             ("watch", _watch_command, "the trials at each change, until the sweep ends"),
                             ("compare", _compare, "dtr compare over the trials' runs")):  # fmt: skip
        p = verbs.add_parser(verb, help=said)
        p.add_argument("sweep", metavar="SWEEP", help="the DistTrainingSweep's name")
        p.set_defaults(func=func, parser=p)
    p = verbs.add_parser("plot", help="each trial's curves in a PNG (a stopped trial's: the objective it reached)")
    p.add_argument("sweep", metavar="SWEEP", help="the DistTrainingSweep's name")
    p.add_argument("-o", "--output", metavar="FILE.png", help="where to write it [SWEEP.png]")
    p.add_argument("--only", action="append", metavar="METRIC", help="only this metric (and its val_); repeatable")
    p.set_defaults(func=_plot, parser=p)
    for p in verbs.choices.values():
        p.add_argument("-n", "--namespace", help="its namespace (default: the kubeconfig context's)")
