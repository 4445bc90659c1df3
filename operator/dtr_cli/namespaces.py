"""`dtr namespaces [-n NS]`: which namespaces the operators on this cluster watch.

A run in a namespace no operator watches gets no status and no event: nothing reads it. What each operator
watches is read from its Deployment (dtr_client.namespaces).
"""

from __future__ import annotations

import argparse


def _namespaces(args: argparse.Namespace) -> int:
    from dtr_client.namespaces import operator_deployments, report, watchers
    from dtr_operator.kube import Kube

    code, lines = report(watchers(operator_deployments(Kube.for_cli())), args.namespace)
    print("\n".join(lines))
    return code


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "namespaces",
        help="which namespaces the cluster's operators watch (runs elsewhere get no status)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("-n", "--namespace", help="also say whether this namespace is watched (exit 1 if not)")
    p.set_defaults(func=_namespaces)
