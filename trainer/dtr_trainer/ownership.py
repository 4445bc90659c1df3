"""Who may publish versions of a model name: the run that owns it, and the runs its owner lists (docs/models.md).

The first run to claim a version where a model is exported (models/<modelName> on a volume, s3://bucket/<base> in a
bucket) owns that model name: its chief records the run, by namespace and name, beside the claims
(dtr_contract.layout.owner_file, bucket_owner_key), with the run names its spec.export.allowedPublishers lists
(--allowed-publishers). From then on only runs of the owner's namespace and name (a run deleted and created again to
train again is the same owner) and the runs it lists may publish versions there. Any other is refused,
ModelNameOwnedError (exit dtr_contract.exits.MODEL_NAME_OWNED), before it trains: every worker reads the record when
it starts, the chief again when it claims its version (taking the name when nobody owns it), and once more just
before its version appears. A run of the owner's name that claims a version writes its own list over the record's.

A model name exported before owners were recorded has no record: the first run to claim a version after that owns it.
A trainer that does not know its run (started by hand, without DTR_RUN_NAME) neither owns nor is listed: it publishes
only under a name nobody owns, and takes none.

This holds against run authors without code of their own, and against mistakes (a modelName copied from a teammate's
run). A run's own code can write any file on the volume it mounts, or in the bucket its keys open, this record
included: nothing here stops that.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import os
import posixpath
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from dtr_contract import env, flags, layout, objectstore
from dtr_contract.objectstore import ObjectStore, ObjectStoreError

from dtr_trainer.errors import ExportError, ModelNameOwnedError
from dtr_trainer.lineage import RunIdentity, utc_now

# The trainer's own bound on --allowed-publishers (the API's on spec.export.allowedPublishers is lower: fields.py).
MAX_PUBLISHERS = 64
RUN_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS-1035 label, as a DistTrainingRun's name is
MAX_RECORD = 64 * 1024  # bytes read of a record (a real one is a few hundred)
NO_HARD_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)


# ---------------------------------------------------------------- pure


@dataclass(frozen=True)
class Owner:
    """The run that owns a model name, and the other runs of its namespace it lets publish there."""

    namespace: str | None
    name: str
    publishers: tuple[str, ...] = ()
    since: str = ""

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def is_run(self, run: RunIdentity) -> bool:
        return (run.namespace, run.name) == (self.namespace, self.name)

    def admits(self, run: RunIdentity) -> bool:
        listed = run.name in self.publishers and run.namespace == self.namespace
        return self.is_run(run) or listed


def run_names(text: str) -> tuple[str, ...]:
    """argparse type of --allowed-publishers: run names, comma-separated, at most MAX_PUBLISHERS."""
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    bad = [name for name in names if not RUN_NAME.fullmatch(name)]
    if bad:
        raise argparse.ArgumentTypeError(
            f"not a run name: {', '.join(map(repr, bad))} (lower-case letters, digits and '-', starting with a letter)"
        )
    if len(names) > MAX_PUBLISHERS:
        raise argparse.ArgumentTypeError(f"at most {MAX_PUBLISHERS} run names, got {len(names)}")
    return names


def render(owner: Owner, now: str) -> bytes:
    return (json.dumps({"owner": {"namespace": owner.namespace, "name": owner.name},
                        "allowedPublishers": list(owner.publishers), "since": owner.since or now,
                        "updatedAt": now}, indent=1) + "\n").encode()  # fmt: skip


def parse(body: bytes) -> Owner:
    """A record's body as render wrote it; ValueError for anything else."""
    try:
        doc = json.loads(body.decode())
        who, publishers = doc["owner"], doc.get("allowedPublishers") or []
        name, namespace = who["name"], who.get("namespace")
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        raise ValueError("not JSON with owner.name") from None
    texts = isinstance(name, str) and isinstance(namespace, (str, type(None))) and isinstance(publishers, list)
    if not (texts and all(isinstance(p, str) for p in publishers)):
        raise ValueError("owner.name, owner.namespace or allowedPublishers of the wrong type")
    return Owner(namespace, name, tuple(publishers), str(doc.get("since") or ""))


def model_label(export_dir: str) -> str:
    """How a message names the model: its model name on the volume, its base URI in a bucket."""
    return export_dir if objectstore.is_s3_uri(export_dir) else posixpath.basename(posixpath.normpath(export_dir))


def refusal(model: str, owner: Owner, run: RunIdentity) -> str:
    """One line, whole within a status message (400 characters) for names of up to 32 characters: whose the name is,
    that this run is not listed, the ways on."""
    owned_by = owner.name if run.namespace == owner.namespace else owner.describe()  # a bucket may be shared
    head = f"model {model}: its versions belong to run {owned_by}"
    if not run.name:
        return f"{head}, and a trainer started without {env.RUN_NAME} publishes only under a name nobody owns"
    me = run.name if run.namespace == owner.namespace else f"{run.namespace}/{run.name}"
    return (
        f"{head}, whose spec.export.allowedPublishers does not list this run: choose another "
        f"spec.export.modelName, or have a run named {owner.name} list {me} there"
    )


# ---------------------------------------------------------------- where the record is


class VolumeRecord:
    """<bookkeeping>/owner on the volume: created whole and exclusively (a hard link), replaced by a rename."""

    def __init__(self, export_dir: str) -> None:
        self.path = Path(layout.owner_file(export_dir))
        self.where = str(self.path)

    def read(self) -> bytes | None:
        try:
            with open(self.path, "rb") as f:
                return f.read(MAX_RECORD)
        except FileNotFoundError:
            return None

    def create(self, body: bytes) -> bool:
        """Write the record only if there is none: True if this call made it. Through a hard link of a complete
        file, so a reader never sees a part of it; O_EXCL where the volume has no hard links."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self._partial(body)
        try:
            os.link(partial, self.path)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in NO_HARD_LINKS:
                raise
            return self._create_exclusive(body)
        finally:
            partial.unlink(missing_ok=True)
        return True

    def replace(self, body: bytes) -> None:
        os.replace(self._partial(body), self.path)

    def _partial(self, body: bytes) -> Path:
        partial = self.path.with_name(f".{self.path.name}.{secrets.token_hex(8)}")
        partial.write_bytes(body)
        return partial

    def _create_exclusive(self, body: bytes) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        return True


class BucketRecord:
    """<base>/.dtr-export/owner in the bucket: created with If-None-Match: *, replaced by a PUT."""

    def __init__(self, export_dir: str, store: ObjectStore | None = None) -> None:
        self.base = objectstore.parse_uri(export_dir)
        self.key = layout.bucket_owner_key(self.base.key)
        self.where = f"s3://{self.base.bucket}/{self.key}"
        self.store = store or objectstore.connect(os.environ)

    def read(self) -> bytes | None:
        try:
            return self.store.get_bytes(self.base.bucket, self.key)[:MAX_RECORD]
        except ObjectStoreError as err:
            if err.code == "NoSuchKey":
                return None
            raise

    def create(self, body: bytes) -> bool:
        return self.store.create(self.base.bucket, self.key, body)

    def replace(self, body: bytes) -> None:
        self.store.put(self.base.bucket, self.key, body)


Record = Union[VolumeRecord, BucketRecord]


def record_of(export_dir: str, store: ObjectStore | None = None) -> Record:
    return BucketRecord(export_dir, store) if objectstore.is_s3_uri(export_dir) else VolumeRecord(export_dir)


# ---------------------------------------------------------------- the check


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(flags.ALLOWED_PUBLISHERS, type=run_names, default=(), metavar="RUN[,RUN...]",
                        help=f"when this run owns the model name of {flags.EXPORT_DIR}: the other runs (of its "
                             "namespace) that may publish versions of it too (docs/models.md)")  # fmt: skip


def admit(export_dir: str, run: RunIdentity, publishers: Sequence[str] = (), take: bool = False,
          store: ObjectStore | None = None) -> None:  # fmt: skip
    """ModelNameOwnedError unless `run` may publish versions under export_dir. take (the chief, as it claims its
    version): a name nobody owns becomes the run's, with `publishers`; a name the run owns gets `publishers` as its
    list. Without take, nothing is written."""
    record = record_of(export_dir, store)
    try:
        _admit(record, model_label(export_dir), run, tuple(publishers), take)
    except OSError as exc:
        raise ExportError(
            f"cannot read or write who owns model {model_label(export_dir)} ({record.where}): {exc.strerror or exc}"
        ) from None
    except ObjectStoreError as err:
        from dtr_trainer import export_s3

        raise export_s3.failed(err, f"cannot read or write who owns {export_dir}") from None


def _admit(record: Record, model: str, run: RunIdentity, publishers: tuple[str, ...], take: bool) -> None:
    owner = _read(record, model)
    if owner is None:
        if not (take and run.name):
            return
        if record.create(render(Owner(run.namespace, run.name, publishers), utc_now())):
            return
        owner = _read(record, model)  # another run's chief took it first
        if owner is None:
            return
    if not owner.admits(run):
        raise ModelNameOwnedError(refusal(model, owner, run))
    if take and owner.is_run(run) and owner.publishers != publishers:
        record.replace(render(dataclasses.replace(owner, publishers=publishers), utc_now()))


def _read(record: Record, model: str) -> Owner | None:
    body = record.read()
    if body is None:
        return None
    try:
        return parse(body)
    except ValueError as exc:
        raise ModelNameOwnedError(
            f"model {model}: cannot tell which run owns it: {record.where} is not an owner "
            f"record ({exc}); whoever may write there removes it, and the next run to "
            "export the model owns it"
        ) from None
