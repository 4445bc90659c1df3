"""`dtr submit FILE.py`: send your own model file to the cluster with a run, no image to build (docs/own-model.md).

    dtr submit wine.py --workers 2 --epochs 10 --dataset wine --metric auc
    dtr submit wine.py -f team-base.yaml --cpu 2 --memory 4Gi --queue team-a

creates the ConfigMap `<name>-code` with the file, then the run naming it, through the client (what it checks
and sends: dtr_client.submit). `--dry-run` prints both objects.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

import yaml
from dtr_contract import params as run_params

from dtr_client import complete_run
from dtr_client.submit import GUIDE, OPTIONS, PARAMS, SubmitError, manifests

from .command import BadInput, Failed, client_for, positive_int


def _assignment(text: str) -> tuple[str, run_params.Value]:
    try:
        return run_params.parse_assignment(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_training_options(parser: argparse.ArgumentParser) -> None:
    """The training options of `dtr submit FILE.py` and `dtr run FILE.py` (dtr_client.submit.OPTIONS), and --param."""
    for dest, flag, kind, _path, text in OPTIONS:
        parser.add_argument(flag, dest=dest, type=kind, metavar=dest.split("_")[0].upper(), help=text)
    parser.add_argument("--param", dest="param", type=_assignment, action="append", metavar="NAME=VALUE",
                        help="a hyperparameter of your own, ctx.params[NAME] (spec.training.params); repeatable. 64 is "
                             "an integer, 0.2 a number, true/false a boolean, else a string (docs/experiments.md)")


def given_params(args: argparse.Namespace) -> dict[str, run_params.Value] | None:
    """--param NAME=VALUE..., the last of a name winning; None when there is none."""
    return dict(args.param) if getattr(args, "param", None) else None


class _Dumper(yaml.SafeDumper):
    """The file's text as a block, the way a person reads it."""


_Dumper.add_representer(str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v,
                                                             style="|" if "\n" in v else None))  # fmt: skip


def _watch_lines(doc: Mapping[str, Any], config_map: Mapping[str, Any]) -> list[str]:
    """What was created, the file's SHA-256 (status.code will say the same), and how to follow the run."""
    from dtr_operator.status.code import code_status, configmap_content

    name, namespace = doc["metadata"]["name"], config_map["metadata"]["namespace"]
    key = doc["spec"]["training"]["code"]["key"]
    code = code_status(config_map["metadata"]["name"], key, configmap_content(config_map, key) or b"")
    params = doc["spec"]["training"].get("params")
    return [
        f"disttrainingrun {name} created in namespace {namespace}: code {key} in ConfigMap {code['configMap']} "
        f"(sha256 {code['sha256']})" + (f"; params {run_params.shown(params)}" if params else ""),
        f"watch it:  kubectl get distrainingruns {name} -n {namespace} -w",
        f"logs:      dtr logs {name} -n {namespace} -f",
    ]


def add_complete_run_options(parser: argparse.ArgumentParser) -> None:
    """-f base.yaml, resources, queue and priority classes (dtr_client.complete_run): a complete run for a shared
    cluster, checked with the rest before anything is sent."""
    parser.add_argument("-f", "--base", metavar="BASE.yaml",
                        help="a DistTrainingRun to start from (its spec, name, namespace, labels): the options "
                        "override its fields, and the run's code is always FILE.py")  # fmt: skip
    kinds = {"cpu": _quantity, "memory": _quantity, "gpus": positive_int}
    metavars = {"cpu": "CPUS", "memory": "SIZE", "gpus": "N", "queue": "QUEUE"}
    for dest, flag, _paths, text in complete_run.OPTIONS:
        parser.add_argument(flag, dest=dest, metavar=metavars.get(dest, "CLASS"), type=kinds.get(dest, str),
                            help=text)  # fmt: skip


def _quantity(text: str) -> str:
    """A resource of --cpu or --memory: the run's schema takes any quantity, a pod none below zero."""
    from dtr_operator.grammar import positive_quantity

    if not positive_quantity(text):
        raise argparse.ArgumentTypeError(f"must be a quantity above zero such as 500m, 2 or 4Gi, got {text!r}")
    return text


def _complete_run_given(args: argparse.Namespace) -> dict[str, Any]:
    return {dest: getattr(args, dest) for dest in complete_run.NAMES}


def _submit(args: argparse.Namespace) -> None:
    from dtr_operator.kube import current_namespace

    try:
        base = complete_run.read_base(args.base)
    except complete_run.BaseError as err:
        raise BadInput(str(err)) from None
    args.namespace = args.namespace or base.get("metadata", {}).get("namespace") or current_namespace()
    config_map, doc = manifests(args.file, vars(args) | {PARAMS: given_params(args)}, args.namespace)
    if args.dry_run:
        sys.stdout.write(yaml.dump_all([config_map, doc], Dumper=_Dumper, sort_keys=False))
        return
    given = {dest: getattr(args, dest) for dest, *_ in OPTIONS} | {"claim": args.claim, "image": args.image,
                                                                   PARAMS: given_params(args)}
    given |= _complete_run_given(args)
    client = client_for(args)
    try:
        client.create(args.file, name=args.name, **{k: v for k, v in given.items() if v is not None})
    except SubmitError as err:  # not bad input, the file passed manifests(): the cluster has its ConfigMap already
        raise Failed(str(err)) from None
    print("\n".join(_watch_lines(doc, config_map)), flush=True)
    if args.wait:
        _wait(client, doc["metadata"]["name"])


def _wait(client: Any, name: str) -> None:
    """--wait: a line per finished epoch as status.progress says it, then the end; Failed (exit 1) when the run
    failed. Ctrl-C stops the watching, not the run."""
    from dtr_client import RunFailed

    for epoch in client.progress(name):
        figures = " ".join(f"{k}={v:.4g}" for k, v in sorted(epoch.metrics.items()))
        left = f", about {epoch.remaining_seconds} s left" if epoch.remaining_seconds is not None else ""
        print(f"{name}: epoch {epoch.epoch}/{epoch.epochs} {figures}{left}", flush=True)
    try:
        done = client.wait(name)
    except RunFailed as err:
        raise Failed(str(err)) from None
    print(f"{name}: {done.phase}: {done.message}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "submit",
        help="train your own model file on the cluster: its code in a ConfigMap, then the run (no image build)",
        description=__doc__.split("\n\n")[0] + f" The file: build_model(ctx) and load_data(ctx), {GUIDE}.",
    )
    p.add_argument("file", metavar="FILE.py", help="your model: a Python file defining build_model and load_data")
    p.add_argument("--name", help="the run's name (default: the file's name, wine_v2.py -> wine-v2)")
    p.add_argument("-n", "--namespace", help="its namespace (default: the kubeconfig context's)")
    add_training_options(p)
    p.add_argument("--claim", metavar="CLAIM",
                   help="an existing PVC to mount (spec.storage.claimName), e.g. one with your data")  # fmt: skip
    p.add_argument("--image", metavar="IMG", help="the trainer image (spec.image; default: the operator's)")
    add_complete_run_options(p)
    p.add_argument("--dry-run", action="store_true", help="print the ConfigMap and the run as YAML, create nothing")
    p.add_argument("--wait", action="store_true",
                   help="then watch it: a line per finished epoch, and the end (exit 0 Succeeded, 1 Failed; Ctrl-C "
                   "stops the watching, not the run)")  # fmt: skip
    p.set_defaults(func=_submit)
