"""The `dtr` command: one subcommand per job, each registered by its module's `add_parser` (COMMANDS).

    dtr render FILE      print the PVC and TFJob the operator would create (no cluster needed) (render.py)
    dtr run FILE         train with local worker processes, no cluster (the embedded default) (run.py)
    dtr operator         run the operator (kopf, standalone) (operator.py)
    dtr logs RUN         the workers' logs of a run, merged (logs.py)
    dtr namespaces       which namespaces the operators watch (namespaces.py)
    dtr data put         copy files into a run's volume (data.py)
    dtr model get        copy a model version out of a run's volume (data.py)
    dtr submit FILE.py   your own model file to the cluster: a ConfigMap with the code, then the run (submit.py)
    dtr tensorboard RUN  TensorBoard on a run's logs, a pod and a port-forward or a local process (tensorboard.py)
    dtr plot RUN...      the runs' curves as a PNG (curves.py)
    dtr compare RUN...   the runs' figures and spec differences side by side (curves.py)
    dtr sweep start      start, watch and compare a DistTrainingSweep's trials (sweep.py)

To add a subcommand, write a module whose `add_parser(subparsers)` adds a parser and sets `func`, a function
of the parsed args that returns the exit code (None: 0) or raises (command.py: BadInput, Failed, or the
library's errors); list the module in COMMANDS and the subcommand above, which `./dtr --help` prints without
an environment (tests/unit/cli/test_dtr_shim.py keeps the two lists the same). Imports of heavy modules (kopf,
kubernetes) stay inside the `func`s so that `dtr render` starts fast and works without a cluster.

Exit codes, the same for every subcommand (command.py): 0 done; 1 the run failed or the cluster refused; 2 bad
input (an unknown option, a file or spec that is not a valid run, a bad flag value); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from dtr_operator import __version__

from . import curves, data, logs, namespaces, operator, render, run, submit, sweep, tensorboard
from .command import run_command

PROG = "dtr"
# In the order of `dtr --help`.
COMMANDS = (render, run, operator, logs, namespaces, data, submit, tensorboard, curves, sweep)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="DistTrainingRun: distributed TensorFlow training runs.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="the kubeconfig to use, before KUBECONFIG, ~/.kube/config and a pod's service account "
                        "(in that order, as kubectl)")  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.add_parser(sub)
    for subparser in sub.choices.values():
        subparser.set_defaults(parser=subparser)  # main() reports an unknown option with its subcommand's usage
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")  # exits 2
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig  # what every command reads (kube.py), and kopf for the operator
    # The subcommand as its usage names it ("data put"): errors read as argparse's own do.
    return run_command(args.parser.prog.removeprefix(f"{PROG} "), args.func, args)
