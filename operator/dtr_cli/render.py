"""`dtr render FILE`: the PVC and TFJob the operator would create for each run of a file, as YAML, with no
cluster; with --cluster, also what the cluster's operator would say to each run (dtr_client.cluster_check)."""

from __future__ import annotations

import argparse
import os
import sys

import yaml

from dtr_operator.spec import DEFAULT_TRAINER_IMAGE

from .command import Failed


def render(path: str, default_image: str) -> str:
    """The YAML of every object the operator would create for the runs in a file."""
    from dtr_client.runfile import read_run_file
    from dtr_operator.builders import build_pvc, build_tfjob

    docs = []
    for run in read_run_file(path, default_image=default_image):
        pvc = build_pvc(run)
        if pvc is not None:
            docs.append(pvc)
        docs.append(build_tfjob(run))
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)


def _render(args: argparse.Namespace) -> int:
    sys.stdout.write(render(args.file, args.trainer_image))
    return _check(args) if args.cluster else 0


def _check(args: argparse.Namespace) -> int:
    """--cluster: what the cluster's operator would say to each run, on stderr; 1 when it would not take one."""
    from pathlib import Path

    from dtr_client.cluster_check import verdicts
    from dtr_client.namespaces import operator_deployments
    from dtr_client.runfile import parse_run_doc, runs_from_text
    from dtr_operator.kube import ApiError, Kube, current_namespace

    kube = Kube.for_cli()
    default_namespace = args.namespace or current_namespace()
    runs = []
    for doc in runs_from_text(Path(args.file).read_text(), args.file):
        meta = doc.setdefault("metadata", {})
        meta["namespace"] = meta.get("namespace") or default_namespace
        runs.append(parse_run_doc(doc, args.file, args.trainer_image))
    try:
        deployments = operator_deployments(kube)
    except ApiError as err:
        raise Failed(f"the operator's settings could not be read: the API server said {err}") from None
    code, lines = verdicts(runs, deployments)
    print("\n".join(lines), file=sys.stderr)
    return code


def add_parser(sub: argparse._SubParsersAction) -> None:
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
