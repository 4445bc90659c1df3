"""`dtr operator`: the operator (kopf, standalone; one replica), with the settings of its flags and environment
(dtr_operator.settings); what it runs is dtr_operator.main's."""

from __future__ import annotations

import argparse
import os


def _operator(args: argparse.Namespace) -> int:
    from dtr_operator import settings as cfg

    settings = cfg.from_args(args, os.environ)  # before kopf is imported: a bad setting is one line, at once
    from dtr_operator.main import run_operator

    return run_operator(settings)


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dtr_operator import settings as cfg

    p = sub.add_parser(
        "operator",
        help="run the operator (kopf, standalone; one replica)",
        description="Watch DistTrainingRuns and expand each into a TFJob and a PVC. Uses the in-cluster "
        "service account, else KUBECONFIG.",
    )
    cfg.add_arguments(p)
    p.set_defaults(func=_operator)
