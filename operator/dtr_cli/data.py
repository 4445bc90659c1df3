"""`dtr data put` and `dtr model get`: files into a run's volume, an exported model out of it.

    dtr data put --claim my-claim ./wine.csv      into the trainer's data directory of claim my-claim
    dtr data put --run mnist-cnn ./sets sets/2026 a directory, into the volume of run mnist-cnn
    dtr data put my-claim ./wine.csv              a bare name: the run or the claim of that name, not both
    dtr data put --create 1Gi my-data ./wine.npz  a claim of your own made first, labelled for runs
    dtr model get mnist-cnn ./model               the run's exported version, into ./model
    dtr model get mnist-cnn ./v1 --version 1      another version of its model

The command lines and what is checked before the cluster is asked; the copy is dtr_client.volume's.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from dtr_contract import layout, objectstore

from dtr_client import bucket, volume
from dtr_client import transfer as tr
from dtr_client.copier import CopyError
from dtr_operator.api import KIND
from dtr_operator.builders import RUN_AS

from .command import BadInput, positive_int, seconds, sigterm_interrupts

T = TypeVar("T")


def _checked(check: Callable[[], T]) -> T:
    """check()'s value; what it finds wrong is in the command line (a path), so bad input, before any pod."""
    try:
        return check()
    except (tr.TransferError, CopyError) as err:
        raise BadInput(str(err)) from None


def _kube_and_namespace(args: argparse.Namespace) -> tuple[Any, str]:
    from dtr_operator.kube import Kube, current_namespace

    return Kube.for_cli(), args.namespace or current_namespace()


def _data_put(args: argparse.Namespace) -> None:
    dest = _checked(lambda: tr.volume_path(args.dest))
    entries = _checked(lambda: volume.local_tree(args.local))
    reporter = volume.Reporter(f"put {args.local}", args.quiet)
    with sigterm_interrupts():  # the pod is deleted on the way out, as on Ctrl-C
        kube, namespace = _kube_and_namespace(args)
        _create_claim(args, kube, namespace)
        image = _image(args, kube, namespace, None if args.kind == tr.CLAIM else args.target)
        summary = volume.put(kube, namespace, args.target, entries, dest, image, args.timeout, reporter, args.kind)
    print(summary)


def _add_create_option(p: argparse.ArgumentParser) -> None:
    from dtr_operator.policy import CLAIM_LABEL, CLAIM_LABEL_VALUE

    p.add_argument("--create", metavar="SIZE", type=_size,
                   help="make the claim CLAIM-or-RUN first if there is none (e.g. 1Gi; the cluster's default "
                   f"StorageClass), labelled {CLAIM_LABEL}={CLAIM_LABEL_VALUE} so that runs may name it "
                   "(dtr submit --claim); an existing claim is used as it is")  # fmt: skip


def _size(text: str) -> str:
    from dtr_operator.grammar import positive_quantity

    if not positive_quantity(text):
        raise argparse.ArgumentTypeError(f"must be a size such as 512Mi or 2Gi, got {text!r}")
    return text


def _create_claim(args: argparse.Namespace, kube: Any, namespace: str) -> None:
    """--create: the claim made (or found), said on stderr with the progress lines; the target is then a claim."""
    from dtr_client import claims

    if args.create is None:
        return
    if args.kind == tr.RUN:
        raise BadInput("--create makes a claim: it goes with --claim or a bare CLAIM, not --run")
    print(claims.ensure(kube, namespace, args.target, args.create), file=sys.stderr, flush=True)
    args.kind = tr.CLAIM


def _model_get(args: argparse.Namespace) -> None:
    dest = Path(args.dest)
    _checked(lambda: volume.check_dest(dest))
    reporter = volume.Reporter(f"get {args.run}", args.quiet)
    with sigterm_interrupts():  # the pod is deleted on the way out, as on Ctrl-C
        kube, namespace = _kube_and_namespace(args)
        environ = bucket.with_overrides(os.environ, args.s3_endpoint, args.s3_ca_file)
        image = _image(args, kube, namespace, args.run)
        summary = volume.get(kube, namespace, args.run, dest, args.version, image, args.timeout, reporter, environ)
    print(summary)


def _image(args: argparse.Namespace, kube: Any, namespace: str, run: str | None) -> volume.Image:
    """The transfer pod's image, chosen when the pod is made (dtr_client.images), said on stderr."""
    from dtr_client import images

    def say(line: str) -> None:
        if not args.quiet:
            print(f"dtr: {line}", file=sys.stderr, flush=True)

    return images.chooser(kube, namespace, args.image, run, say)


def _common(p: argparse.ArgumentParser) -> None:
    from dtr_client.images import ENV

    p.add_argument("-n", "--namespace", help="the namespace of the run or claim (default: the kubeconfig context's)")
    p.add_argument("--image", metavar="IMG",
                   help=f"the transfer pod's image, which needs python (default: {ENV}, else the default trainer "
                        "image of the operator watching the namespace, from its Deployment, else the run's own: an "
                        "image the cluster's nodes have; refused when none of these can be read)")  # fmt: skip
    p.add_argument("--timeout", type=seconds, default=tr.START_TIMEOUT, metavar="S",
                   help="seconds to wait for the transfer pod to start (default %(default)g); then the error names "
                        "what it waits for and its events")  # fmt: skip
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def _pod_paragraph() -> str:
    return f"""\
The copy goes through a short-lived pod in the namespace, dtr-put-* or dtr-get-* (label
app.kubernetes.io/name={tr.COMPONENT}), that mounts the claim ({layout.MOUNT_PATH}, read-only for model get):
uid and gid {RUN_AS} as the trainer, no ServiceAccount token, a read-only root filesystem, no capabilities,
seccomp RuntimeDefault, resource limits (it passes Pod Security `restricted`). It runs where pods
already using a ReadWriteOnce claim run, and is deleted afterwards, also on Ctrl-C (left behind, it
ends by itself after {tr.IDLE_SECONDS} s without a copy). dtr uses kubectl's credentials and sends the
copy over the API server's exec WebSocket (no kubectl needed). Every file's SHA-256 is computed at
both ends and compared; progress goes to stderr. Permissions in the namespace: get the run and the
claim; create, get and delete pods; create pods/exec; list events (and pods, to find a ReadWriteOnce
claim's node)."""


def _add_data(sub: argparse._SubParsersAction) -> None:
    default = tr.default_dest()
    data = sub.add_parser("data", help="copy files into a run's volume (dtr data put)",
                          description="Files on a run's volume, its PersistentVolumeClaim: dtr data put [--claim "
                                      "| --run] CLAIM-or-RUN LOCAL_PATH [DEST] copies them in (see its "
                                      "--help).")  # fmt: skip
    verbs = data.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = verbs.add_parser(
        "put", help="copy a local file or directory into a claim (default: the trainer's data directory)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"""\
Copy LOCAL_PATH, a file or a directory with its files and subdirectories, into the directory DEST on
a volume, as DEST/<the name of LOCAL_PATH>:

  dtr data put --claim my-claim ./wine.npz   ->  {posixpath.join(default, "wine.npz")} on claim my-claim
  dtr data put --run my-run ./tables extra   ->  extra/tables/... on run my-run's claim
  dtr data put my-claim ./wine.npz           ->  the same as --claim, when no run is named my-claim

A bare CLAIM-or-RUN is the run or the claim of that name, whichever exists; when both do (and the
claim is not the run's own), nothing is copied: say which with --claim or --run.

DEST is relative to the volume's root and is created if missing; the default, {default}, is the
trainer's data directory ({layout.data_dir()} in its pods). A file of the same name is replaced;
each file appears only once complete and checked. Symlinks and special files are refused.

{_pod_paragraph()}""",
    )  # fmt: skip
    which = p.add_mutually_exclusive_group()
    which.add_argument("--claim", dest="kind", action="store_const", const=tr.CLAIM,
                       help="CLAIM-or-RUN is a PersistentVolumeClaim (never a run's)")
    which.add_argument("--run", dest="kind", action="store_const", const=tr.RUN,
                       help=f"CLAIM-or-RUN is a {KIND}: its spec.storage.claimName, or the claim the operator "
                            "creates for it")  # fmt: skip
    p.add_argument("target", metavar="CLAIM-or-RUN",
                   help=f"a PersistentVolumeClaim (--claim) or a {KIND}'s claim (--run); without either, the one of "
                        "the two that exists: refused when both do")  # fmt: skip
    p.add_argument("local", metavar="LOCAL_PATH", help="a local file or directory")
    p.add_argument("dest", metavar="DEST", nargs="?", default=default,
                   help=f"a directory on the volume, relative to its root (default: {default})")  # fmt: skip
    _add_create_option(p)
    _common(p)
    p.set_defaults(func=_data_put, parser=p)


def _add_model(sub: argparse._SubParsersAction) -> None:
    versions = posixpath.join(layout.in_volume(layout.export_dir("<modelName>")) or "", "<version>")
    model = sub.add_parser("model", help="copy an exported model version out of a run's volume (dtr model get)",
                           description="A run's exported models, on its volume: dtr model get RUN DEST copies a "
                                       "version out (see its --help).")  # fmt: skip
    verbs = model.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = verbs.add_parser(
        "get", help="copy an exported model version to a local directory",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"""\
Copy a version of RUN's model, {versions} on its claim (a TF SavedModel and its
lineage.json), into the local directory DEST:

  dtr model get mnist-cnn ./model               the version the run exported (status.model)
  dtr model get mnist-cnn ./v1 --version 1      another version of its model name

Without --version and without an exported version in its status, the latest version on the volume.
DEST must not exist, or be empty; it appears only once complete and checked.

A run that exports to a bucket (spec.export.storageUri s3://...): the version is downloaded from there
with no pod, and only if published (its dtr-manifest.json there and matching; every file's SHA-256
checked). The store's endpoint and keys come from your environment: {objectstore.ENV_ENDPOINT} (with its
scheme), {objectstore.ENV_ACCESS_KEY}, {objectstore.ENV_SECRET_KEY}, {objectstore.ENV_REGION},
{objectstore.ENV_CA_FILE}; or --s3-endpoint and --s3-ca-file.

{_pod_paragraph()}""",
    )  # fmt: skip
    p.add_argument("run", metavar="RUN", help=f"the {KIND}")
    p.add_argument("dest", metavar="DEST", help="a local directory to create (or an empty one)")
    p.add_argument("--version", type=positive_int, metavar="N",
                   help="this version of the run's model (runs that share a model name number its versions)")
    p.add_argument("--s3-endpoint", metavar="URL", help="a model in a bucket: the S3 endpoint, with its scheme "
                                                        f"(default: ${objectstore.ENV_ENDPOINT})")  # fmt: skip
    p.add_argument("--s3-ca-file", metavar="PEM",
                   help="a model in a bucket: the CA that signed the endpoint's certificate "
                        f"(default: ${objectstore.ENV_CA_FILE}, else the system's)")  # fmt: skip
    _common(p)
    p.set_defaults(func=_model_get, parser=p)


def add_parser(sub: argparse._SubParsersAction) -> None:
    _add_data(sub)
    _add_model(sub)
