"""`dtr tensorboard RUN`: TensorBoard on a run's logs until Ctrl-C, through the client (dtr_client.tensorboard).

    dtr tensorboard mnist-cnn                  a pod reading the run's volume, port-forwarded to 127.0.0.1
    dtr tensorboard digits-cnn --local         a run of `dtr run` (its log dir under .dtr/volumes/)
"""

from __future__ import annotations

import argparse

from dtr_contract import layout

from dtr_operator.api import KIND

from .command import Failed, client_for, interrupts_asked, port, seconds, sigterm_interrupts

CHECK_SECONDS = 5.0  # how often a serving TensorBoard is checked (its process, its pod) while we wait for Ctrl-C


def _tensorboard(args: argparse.Namespace) -> None:
    with sigterm_interrupts():  # while it starts, the pod is deleted on the way out, as on Ctrl-C
        handle = client_for(args).backend.tensorboard(args.run, args.port, args.timeout, not args.no_wait)
        with interrupts_asked() as asked:  # while it serves, Ctrl-C ends the wait between two checks
            try:
                print(f"TensorBoard for {args.run}: {handle.url}", flush=True)
                while (why := handle.ended()) is None and not asked.wait(CHECK_SECONDS):
                    pass
            finally:
                handle.stop()
    if asked.stop:
        raise KeyboardInterrupt
    raise Failed(why)


def add_parser(sub: argparse._SubParsersAction) -> None:
    from dtr_client import transfer as tr
    from dtr_client.tensorboard import START_TIMEOUT

    p = sub.add_parser(
        "tensorboard", help="TensorBoard on a run's logs at http://127.0.0.1:PORT/ until Ctrl-C",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"""\
Serve RUN's TensorBoard logs ({layout.logs_dir("<run>")} on its volume, where the chief writes them)
and print the URL once TensorBoard answers; Ctrl-C stops it.

On a cluster (kubectl's credentials): a pod dtr-tensorboard-<run>-* (label {tr.TENSORBOARD_OF}=RUN) of
the run's trainer image mounts the run's claim read-only and runs TensorBoard on its own loopback; dtr
forwards a local port to it through the API server and the kubelet (no kubectl needed), so the run's
NetworkPolicy is unchanged. The pod passes Pod Security `restricted`, is owned by the run (deleted with
it), is deleted on Ctrl-C, and ends by itself after {tr.TENSORBOARD_DEADLINE // 3600} h. Permissions in the namespace:
get the run, its TFJob and its claim; create, get and delete pods; create pods/portforward; list pods
and events.

With --local: a run of `dtr run` or of the client's local backend; TensorBoard runs from the trainer's
Python (DTR_TRAINER_PYTHON, else .venv/trainer), on its log dir under DIR/volumes/<claim>/.""",
    )  # fmt: skip
    p.add_argument("run", metavar="RUN", help=f"the {KIND}")
    p.add_argument("--port", type=port, metavar="N", help="the local port (default: a free one)")
    p.add_argument("--no-wait", action="store_true",
                   help="print the URL as soon as TensorBoard is started, without waiting for it to answer")
    p.add_argument("--timeout", type=seconds, default=START_TIMEOUT, metavar="S",
                   help="seconds for TensorBoard (and its pod) to start and answer (default %(default)g)")
    p.add_argument("-n", "--namespace", help="the run's namespace (default: the kubeconfig context's)")
    p.add_argument("--local", dest="backend", action="store_const", const="local", default="cluster",
                   help="a local run (dtr run), not one on the cluster")
    p.add_argument("--dir", default=None, metavar="DIR",
                   help="with --local: dtr run's directory (default: $DTR_RUN_DIR or ./.dtr)")
    p.set_defaults(func=_tensorboard)
