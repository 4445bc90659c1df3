"""Epoch backups kept in a bucket (--backup-uri s3://bucket/prefix): a run with no volume resumes on any node.

The backup dir (--backup-dir) stays a local directory: BackupAndRestore and the trainer's records (export.py's
version and export records, divergence.py's) write files there. The bucket holds copies of it, as generations:

- push (the chief only): every file of the dir goes to <prefix>/g-<n>/<its path>, then <prefix>/current (the
  generation's number and files, one JSON object) is written last. One PUT is atomic in S3, so a reader sees the
  whole generation it names or, before that PUT, the previous one; a chief killed mid-upload leaves only objects
  nothing names. Then every generation but the last two goes: a worker pulling generation n while the chief
  pushes n+1 still finds n, and the chief pushes n+2 only at an epoch's end, which every worker has reached
  after its pull.
- pull (every worker, first thing): the dir is emptied and filled from the current generation (nothing when the
  bucket has none): a dir left on a pod's emptyDir by an earlier container may hold an epoch the bucket never
  got, and the workers must all resume from the same one.

Pushed after each epoch's backup (progress.AfterBackup, between BackupAndRestore and the epoch's end line: a line
means an epoch in the bucket), after the version claim, and after the export's record.
docs/object-storage.md#backups-in-a-bucket.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dtr_contract import env, flags
from dtr_contract import objectstore as s3
from dtr_contract.objectstore import ObjectStore, ObjectStoreError

from dtr_trainer import export, preflight
from dtr_trainer.errors import TrainerError, UsageError

CURRENT = "current"
KEPT_GENERATIONS = 2
# BackupAndRestore's non-chief workers save into <backup-dir>/workertemp_<i> and remove it: never the backup.
WORKER_TEMP = "workertemp_"


# ---------------------------------------------------------------- pure


@dataclass(frozen=True)
class Generation:
    number: int
    files: tuple[str, ...]  # paths relative to the backup dir, '/'-separated


def generation_prefix(number: int) -> str:
    return f"g-{number}"


def parse_current(body: bytes) -> Generation:
    doc = json.loads(body)
    return Generation(int(doc["generation"]), tuple(str(f) for f in doc["files"]))


def render_current(generation: Generation) -> bytes:
    return (json.dumps({"generation": generation.number, "files": list(generation.files)}) + "\n").encode()


def backed_up_files(root: Path) -> list[str]:
    """The files of the backup dir to keep, relative and sorted; a worker's temporary saves left out."""
    if not root.is_dir():
        return []
    return sorted(path.relative_to(root).as_posix() for path in root.rglob("*")
                  if path.is_file() and not path.relative_to(root).parts[0].startswith(WORKER_TEMP)
                  and not path.name.startswith("."))  # fmt: skip


def stale_keys(keys: Iterable[str], prefix: str, newest: int) -> list[str]:
    """The keys of generations older than the last KEPT_GENERATIONS, and of any newer than `newest` (a chief's
    push that never got its `current`). `prefix`: the backup's key, without a trailing '/'."""
    stale = []
    for key in keys:
        head = key[len(prefix):].lstrip("/").split("/", 1)[0]
        number = head.removeprefix("g-")
        if head.startswith("g-") and number.isdigit() and not newest - KEPT_GENERATIONS < int(number) <= newest:
            stale.append(key)
    return stale


# ---------------------------------------------------------------- I/O


class BucketBackup:
    """The backup dir's copies under one s3:// prefix; `generation` is the last one pulled or pushed."""

    def __init__(self, uri: str, backup_dir: str, store: ObjectStore, endpoint: str,
                 log: Callable[[str], None] = lambda line: None) -> None:  # fmt: skip
        self.uri, self.location, self.root = uri, s3.parse_uri(uri), Path(backup_dir)
        self.store, self.endpoint, self.log = store, endpoint, log
        self.generation = 0

    @classmethod
    def from_env(cls, uri: str, backup_dir: str, environ: Mapping[str, str],
                 log: Callable[[str], None] = lambda line: None) -> BucketBackup:  # fmt: skip
        endpoint = environ.get(env.S3_ENDPOINT, f"({env.S3_ENDPOINT} not set)")
        try:
            return cls(uri, backup_dir, s3.connect(environ), endpoint, log)
        except ObjectStoreError as err:
            raise preflight.failure(err, uri, endpoint) from None

    def _key(self, *parts: str) -> str:
        return self.location.join(*parts).key

    def _failure(self, err: ObjectStoreError) -> TrainerError:
        return preflight.failure(err, self.uri, self.endpoint)

    def pull(self) -> int:
        """Empty the dir and fill it from the current generation; the number of files."""
        try:
            try:
                current = parse_current(self.store.get_bytes(self.location.bucket, self._key(CURRENT)))
            except ObjectStoreError as err:
                if err.status != 404 or err.code == "NoSuchBucket":
                    raise
                current = Generation(0, ())
            self.root.mkdir(parents=True, exist_ok=True)
            export.empty_dir(self.root)
            base = generation_prefix(current.number)
            for name in current.files:
                self.store.get(self.location.bucket, self._key(base, name), self.root / name)
        except ObjectStoreError as err:
            raise self._failure(err) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise TrainerError(f"{self.uri}/{CURRENT} is not a backup record: {exc}") from None
        self.generation = current.number
        return len(current.files)

    def push(self) -> int:
        """Copy the dir into a new generation and make it current; its number. Logs what it took."""
        began = time.perf_counter()
        number = self.generation + 1
        files = backed_up_files(self.root)
        base = generation_prefix(number)
        try:
            for name in files:
                self.store.put(self.location.bucket, self._key(base, name), self.root / name)
            self.store.put(self.location.bucket, self._key(CURRENT), render_current(Generation(number, tuple(files))))
            self.generation = number
            prefix = self.location.key.rstrip("/")
            listed = [obj.key for obj in self.store.list(self.location.bucket, f"{prefix}/g-" if prefix else "g-")]
            for key in stale_keys(listed, prefix, number):
                self.store.delete(self.location.bucket, key)
        except ObjectStoreError as err:
            raise self._failure(err) from None
        size = sum((self.root / name).stat().st_size for name in files)
        self.log(f"backup: generation {number} to {self.uri}, {len(files)} file(s), {size / 2**20:.1f} MiB in "
                 f"{time.perf_counter() - began:.2f} s")
        return number


class NoCopy:
    """What push does without --backup-uri, and on every worker but the chief: nothing."""

    def push(self) -> int:
        return 0


def pulled(uri: str | None, backup_dir: str | None, is_chief: bool,
           log: Callable[[str], None]) -> BucketBackup | NoCopy:  # fmt: skip
    """Every worker, first thing: the backup dir filled from the bucket (with a URI). What the epochs' ends, the
    claim and the export then push to: the bucket on the chief, NoCopy elsewhere."""
    if uri is None:
        return NoCopy()
    if not backup_dir:
        raise UsageError(f"{flags.BACKUP_URI} needs {flags.BACKUP_DIR}: the local directory it is a copy of")
    bucket = BucketBackup.from_env(uri, backup_dir, os.environ, log)
    files = bucket.pull()
    log(f"backup: generation {bucket.generation} of {uri}, {files} file(s)" if files else f"backup: none in {uri} yet")
    return bucket if is_chief else NoCopy()
