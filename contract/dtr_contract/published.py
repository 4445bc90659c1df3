"""Model versions published in a bucket: the manifest a version is complete with, and what a reader checks.

    s3://bucket/<base>/<N>/saved_model.pb, variables/..., lineage.json, ...   a SavedModel (TF Serving's layout)
    s3://bucket/<base>/<N>/dtr-manifest.json                                   every other object, size, SHA-256

The trainer's chief (trainer/dtr_trainer/export_s3.py) writes the manifest after every other object of the version,
so a version is published exactly when its manifest is there and every object it lists is there with its size
and nothing else is: readers (`dtr model get`, the Python client, published_versions) take no other version. A
chief killed in the middle of its upload leaves a version without a manifest, which no reader takes
(docs/models.md#versions-in-a-bucket).

Pure functions first; the reader's I/O, through dtr_contract.objectstore, last.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtr_contract import layout
from dtr_contract.objectstore import Location, ObjectInfo, ObjectStore, parse_uri

MANIFEST_NAME = "dtr-manifest.json"
FORMAT = 1
# TF Serving (and KServe's TensorFlow runtime) load a version once its saved_model.pb is there: it comes last of
# the model's files, so a poller never loads a version whose variables are still being written.
SERVING_LAST = "saved_model.pb"


class UnpublishedVersion(Exception):
    """A version a reader must not take: no manifest, or the bucket's objects do not match it."""


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the version's prefix, slash-separated
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    version: int
    files: tuple[FileEntry, ...]
    token: str = ""  # the claim's: which chief published it
    run: Mapping[str, Any] | None = None  # the run's name, uid, namespace (as lineage.json has them)
    published_at: str = ""

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": self.version, "token": self.token, "run": self.run,
                           "publishedAt": self.published_at,
                           "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files]},
                          indent=1) + "\n"  # fmt: skip


def parse_manifest(text: str | bytes) -> Manifest | None:
    """A manifest as the trainer writes it; None for anything else (a reader then takes no version)."""
    try:
        raw = json.loads(text)
        files = tuple(FileEntry(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in raw["files"])
        if raw.get("format") != FORMAT or not files:
            return None
        return Manifest(int(raw["version"]), files, str(raw.get("token") or ""), raw.get("run"),
                        str(raw.get("publishedAt") or ""))  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return None


# ---------------------------------------------------------------- names (pure)


def version_key(base_key: str, version: int) -> str:
    return posixpath.join(base_key, str(version)) if base_key else str(version)


def manifest_key(base_key: str, version: int) -> str:
    return posixpath.join(version_key(base_key, version), MANIFEST_NAME)


def split_version_uri(uri: str) -> tuple[Location, int]:
    """s3://bucket/<base>/<N> -> (the base, N). ValueError when the URI names no numbered version."""
    loc = parse_uri(uri)
    base, _, number = loc.key.rpartition("/")
    if not number.isdigit() or int(number) < 1:
        raise ValueError(f"{uri!r} names no model version: s3://bucket/<base>/<N> with N a number")
    return Location(loc.bucket, base), int(number)


def under_base(base_key: str, key: str) -> str | None:
    """key relative to the base; None when it is not under it."""
    prefix = f"{base_key}/" if base_key else ""
    return key[len(prefix):] if key.startswith(prefix) else None


def version_numbers(base_key: str, keys: Iterable[str]) -> set[int]:
    """Every N with an object under <base>/<N>/, complete or not."""
    found = set()
    for key in keys:
        first = (under_base(base_key, key) or "").split("/", 1)
        if len(first) == 2 and first[0].isdigit():
            found.add(int(first[0]))
    return found


def claimed_numbers(base_key: str, keys: Iterable[str]) -> set[int]:
    prefix = layout.bucket_bookkeeping_key(base_key) + "/"
    numbers = (layout.claimed_version(k[len(prefix):]) for k in keys if k.startswith(prefix))
    return {n for n in numbers if n is not None}


def next_version(base_key: str, keys: Iterable[str]) -> int:
    """1 + the largest version there (any object under <base>/<N>/) or claimed; 1 when there is none."""
    keys = list(keys)
    return max(version_numbers(base_key, keys) | claimed_numbers(base_key, keys), default=0) + 1


def publish_order(paths: Iterable[str]) -> list[str]:
    """The order files are copied into <base>/<N>/: saved_model.pb last (SERVING_LAST), the rest by name."""
    return sorted(paths, key=lambda p: (p == SERVING_LAST, p))


def mismatches(manifest: Manifest, version: int, listed: Mapping[str, int]) -> list[str]:
    """What keeps the version from being published: listed maps each object under <base>/<N>/ (relative, the
    manifest excluded) to its size. Empty when the objects are exactly the manifest's, with its sizes."""
    problems = [] if manifest.version == version else [f"its manifest is version {manifest.version}'s"]
    wanted = {f.path: f.size for f in manifest.files}
    for path, size in sorted(wanted.items()):
        if path not in listed:
            problems.append(f"{path} is missing")
        elif listed[path] != size:
            problems.append(f"{path} has {listed[path]} bytes, the manifest says {size}")
    problems += [f"{path} is not in the manifest" for path in sorted(set(listed) - set(wanted))]
    return problems


def file_entry(root: Path, path: Path) -> FileEntry:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return FileEntry(path.relative_to(root).as_posix(), path.stat().st_size, digest.hexdigest())


def local_files(root: Path) -> list[FileEntry]:
    """Every file under root (a saved version) as the manifest lists it, in publish order."""
    entries = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
    return [file_entry(root, entries[rel]) for rel in publish_order(entries)]


# ---------------------------------------------------------------- readers (I/O)


def _objects(store: ObjectStore, base: Location, version: int) -> dict[str, ObjectInfo]:
    prefix = version_key(base.key, version) + "/"
    return {o.key[len(prefix):]: o for o in store.list(base.bucket, prefix) if not o.key.endswith("/")}


def verified_manifest(store: ObjectStore, base: Location, version: int) -> Manifest:
    """The version's manifest when the version is published; UnpublishedVersion saying why not. Errors of the
    store (keys, bucket, endpoint) pass as ObjectStoreError."""
    where = base.join(str(version)).uri
    objects = _objects(store, base, version)
    if MANIFEST_NAME not in objects:
        state = "has no objects" if not objects else f"has {len(objects)} object(s) but no {MANIFEST_NAME}"
        raise UnpublishedVersion(f"{where} is not a published model version: it {state} (an export that did not "
                                 f"finish, or one still under way; docs/models.md#versions-in-a-bucket)")  # fmt: skip
    manifest = parse_manifest(store.get_bytes(base.bucket, manifest_key(base.key, version)))
    if manifest is None:
        raise UnpublishedVersion(f"{where}: {MANIFEST_NAME} is not a manifest this version of dtr reads")
    problems = mismatches(manifest, version, {p: o.size for p, o in objects.items() if p != MANIFEST_NAME})
    if problems:
        raise UnpublishedVersion(f"{where} does not match its manifest: {'; '.join(problems[:5])}")
    return manifest


def published_versions(store: ObjectStore, base: Location) -> list[int]:
    """The versions under base a reader takes (a model server's view, with the manifest checked), ascending."""
    keys = [o.key for o in store.list(base.bucket, base.prefix())]
    found = []
    for version in sorted(version_numbers(base.key, keys)):
        try:
            verified_manifest(store, base, version)
            found.append(version)
        except UnpublishedVersion:
            continue
    return found


def download_version(store: ObjectStore, uri: str, dest: Path) -> Manifest:
    """Copy the published version s3://bucket/<base>/<N> into dest (which must not exist or be empty): every file
    of its manifest, each checked against its SHA-256, then the manifest. UnpublishedVersion for a version a
    reader must not take; ObjectStoreError for the store's own failures."""
    base, version = split_version_uri(uri)
    manifest = verified_manifest(store, base, version)
    for entry in manifest.files:
        target = dest.joinpath(*entry.path.split("/"))
        if dest.resolve() not in target.resolve().parents:
            raise UnpublishedVersion(f"{uri}: {MANIFEST_NAME} names {entry.path!r}, outside the version")
        store.get(base.bucket, posixpath.join(version_key(base.key, version), entry.path), target)
        got = file_entry(dest, target)
        if got.sha256 != entry.sha256:
            raise UnpublishedVersion(f"{uri}: {entry.path} changed while it was copied (SHA-256 {got.sha256[:12]}, "
                                     f"the manifest says {entry.sha256[:12]})")  # fmt: skip
    (dest / MANIFEST_NAME).write_text(manifest.to_json())
    return manifest
