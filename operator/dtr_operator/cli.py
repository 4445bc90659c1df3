"""The `dtr` command: one subcommand per job, each registered by a small `add_parser` function.

    dtr render FILE     print the PVC and TFJob the operator would create (no cluster needed)
    dtr run FILE        train with local worker processes, no cluster (local/; the embedded default)
    dtr operator        run the operator (kopf, standalone)
    dtr logs RUN        the workers' logs of a run, merged (logs.py)
    dtr namespaces      which namespaces the operators watch (namespaces.py)
    dtr data put        copy files into a run's volume; dtr model get: a model version out (transfer_cli.py)
    dtr submit FILE.py  your own model file to the cluster: a ConfigMap with the code, then the run (submit.py)
    dtr tensorboard RUN TensorBoard on a run's logs, a pod and a port-forward or a local process (tensorboard_cli.py)
    dtr plot RUN...     the runs' curves as a PNG; dtr compare RUN...: figures and spec differences (curves_cli.py)

To add a subcommand, write `add_parser(subparsers)` that adds a parser and sets `func` (a function
of the parsed args returning the exit code), and list its module in EXTENSIONS (or SUBCOMMANDS for
code in this file). Imports of heavy modules (kopf, kubernetes) stay inside the `func`s so that
`dtr render` starts fast and works without a cluster.

Exit codes, the same for every subcommand: 0 done; 1 the run failed or the cluster refused (`dtr run`,
`dtr logs`); 2 bad input (an unknown option, a file or spec that is not a valid run, a bad flag value);
130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

import yaml

from . import __version__
from .spec import DEFAULT_TRAINER_IMAGE, SpecError

AddParser = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

# Modules with an `add_parser(subparsers)`; skipped when the module does not exist (yet).
EXTENSIONS = ("dtr_client.logs", "dtr_client.namespaces", "dtr_client.local.cli", "dtr_client.volume",
              "dtr_client.submit", "dtr_operator.tensorboard_cli", "dtr_operator.curves_cli")


EXIT_BAD_INPUT = 2  # argparse's own code for a bad command line; a bad file or flag value is the same kind


def _bad_input(command: str, message: str) -> int:
    print(f"dtr {command}: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


# ---- dtr render -------------------------------------------------------------------------------


def render(path: str, default_image: str) -> str:
    """The YAML of every object the operator would create for the runs in a file."""
    from dtr_client.runfile import read_run_file

    from .builders import build_pvc, build_tfjob

    docs = []
    for run in read_run_file(path, default_image=default_image):
        pvc = build_pvc(run)
        if pvc is not None:
            docs.append(pvc)
        docs.append(build_tfjob(run))
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)


def _render(args: argparse.Namespace) -> int:
    from dtr_client.runfile import RunFileError

    try:
        sys.stdout.write(render(args.file, args.trainer_image))
    except SpecError as err:
        return _bad_input("render", err.listed())
    except RunFileError as err:
        return _bad_input("render", str(err))
    return _render_check(args) if args.cluster else 0


def _render_check(args: argparse.Namespace) -> int:
    """--cluster: what the cluster's operator would say to each run (cluster_check.py), on stderr."""
    from pathlib import Path

    from dtr_client.cluster_check import verdicts
    from dtr_client.namespaces import operator_deployments
    from dtr_client.runfile import parse_run_doc, runs_from_text

    from .kube import ApiError, Kube, NoCredentials, current_namespace

    try:
        kube = Kube.for_cli()
        default_namespace = args.namespace or current_namespace()
        runs = []
        for doc in runs_from_text(Path(args.file).read_text(), args.file):
            meta = doc.setdefault("metadata", {})
            meta["namespace"] = meta.get("namespace") or default_namespace
            runs.append(parse_run_doc(doc, args.file, args.trainer_image))
        code, lines = verdicts(runs, operator_deployments(kube))
    except NoCredentials as err:
        print(f"dtr render --cluster: {err}", file=sys.stderr)
        return 1
    except ApiError as err:
        print(f"dtr render --cluster: the operator's settings could not be read: the API server said {err.status} "
              f"{err.reason}: {err.message}", file=sys.stderr)  # fmt: skip
        return 1
    print("\n".join(lines), file=sys.stderr)
    return code


def _add_render(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "render",
        help="print the PVC and TFJob the operator would create for a run file (no cluster)",
        description="Print, as YAML, the PVC and TFJob the operator would create for each DistTrainingRun "
        "in FILE. Owner references are added by the operator (they need the run's uid).",
    )
    p.add_argument("file", metavar="FILE", help="a YAML file with one or more DistTrainingRuns")
    p.add_argument("--cluster", action="store_true",
                   help="also ask the cluster (kubectl's credentials): would its operator accept each run, under "
                   "its allowed images, user-code and policy settings? One line per run on stderr; exit 1 if "
                   "not")  # fmt: skip
    p.add_argument("-n", "--namespace", metavar="NS",
                   help="with --cluster: the namespace of runs that name none (default: the kubeconfig's)")  # fmt: skip
    p.add_argument(
        "--trainer-image",
        default=os.environ.get("DTR_TRAINER_IMAGE") or DEFAULT_TRAINER_IMAGE,
        metavar="IMG",
        help="image for runs without spec.image, as the operator's --trainer-image (env DTR_TRAINER_IMAGE)",
    )
    p.set_defaults(func=_render)


# ---- dtr operator -----------------------------------------------------------------------------


def _operator(args: argparse.Namespace) -> int:
    from . import settings as cfg

    try:
        settings = cfg.from_args(args, os.environ)
    except cfg.SettingsError as err:
        return _bad_input("operator", str(err))
    from .main import run_operator

    return run_operator(settings)


def _add_operator(sub: argparse._SubParsersAction) -> None:
    from . import settings as cfg

    p = sub.add_parser(
        "operator",
        help="run the operator (kopf, standalone; one replica)",
        description="Watch DistTrainingRuns and expand each into a TFJob and a PVC. Uses the in-cluster "
        "service account, else KUBECONFIG.",
    )
    cfg.add_arguments(p)
    p.set_defaults(func=_operator)


SUBCOMMANDS: list[AddParser] = [_add_render, _add_operator]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dtr", description="DistTrainingRun: distributed TensorFlow training runs.")
    parser.add_argument("--version", action="version", version=f"dtr {__version__}")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="the kubeconfig to use, before KUBECONFIG, ~/.kube/config and a pod's service account "
                        "(in that order, as kubectl)")  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    for module in EXTENSIONS:
        try:
            ext = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise
            continue
        ext.add_parser(sub)
    for subparser in sub.choices.values():
        subparser.set_defaults(parser=subparser)  # main() reports an unknown option with its subcommand's usage
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")  # exits 2
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig  # what every command reads (kube.py), and kopf for the operator
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
