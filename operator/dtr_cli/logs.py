"""`dtr logs RUN`: the workers' logs of a run, merged and prefixed, from the API (kubectl's credentials).

    dtr logs mnist-cnn                 every worker's log, merged in time order, "[worker-1] ..." prefixes
    dtr logs mnist-cnn -f              follow them while they train
    dtr logs mnist-cnn --worker 1      one worker
    dtr logs mnist-cnn --previous      the log of each worker's previous container (before a restart)

Through the client (dtr_client.logs merges them).
"""

from __future__ import annotations

import argparse

from dtr_client.logs import VOLUME_LOGS

from .command import BadInput, client_for, non_negative


def _logs(args: argparse.Namespace) -> None:
    if args.follow and args.previous:
        raise BadInput("--previous shows a container that has ended; it cannot be followed (-f)")
    for line in client_for(args).logs(args.run, follow=args.follow, worker=args.worker, tail=args.tail,
                                      previous=args.previous):  # fmt: skip
        print(line, flush=args.follow)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "logs",
        help="the workers' logs of a run, merged and prefixed (kubectl's credentials)",
        description=__doc__.split("\n\n")[0] + " Pods go with the TFJob; each worker's log is also in "
        f"{VOLUME_LOGS}.",
    )
    p.add_argument("run", metavar="RUN", help="the DistTrainingRun's name")
    p.add_argument("-n", "--namespace", help="its namespace (default: the kubeconfig context's)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing lines as the workers write them")
    p.add_argument("--worker", type=non_negative, metavar="N", help="only worker N (0 is the chief)")
    p.add_argument("--previous", action="store_true", help="each worker's previous container (before a restart)")
    p.add_argument("--tail", type=non_negative, metavar="N", help="only the last N lines of each worker")
    p.set_defaults(func=_logs)
