"""Model export to a bucket, --export-dir s3://bucket/<base>: the volume's protocol (export.py) with a bucket's
primitives. docs/models.md#versions-in-a-bucket tells a user; bench/s3/results-publish.md measured it.

- claim: the chief claims version N by creating <base>/.dtr-export/claim-N with If-None-Match: * (exactly one
  of several racing creators succeeds); the claim names a random token (kept in --backup-dir, so a restarted
  chief of the same run reuses its claim) and the run. A loser lists again rather than counting up by one.
- save: every worker saves the SavedModel to a local temporary dir (saving runs collective ops); the chief's
  copy, with the lineage, is then published:
- publish: upload to <base>/.dtr-export/staging-N-<token>-<attempt>/, server-side copies into <base>/<N>/ with
  saved_model.pb last (a TF Serving poller loads nothing before it), then <base>/<N>/dtr-manifest.json, written
  last of all; readers take a version only when its manifest is there and matches (dtr_contract.published).
- cleanup: this claim's staging objects and partial version (a chief killed mid-upload), any staging dir untouched
  for export.STALE_STAGING_SECONDS and any claimed version without a manifest untouched for
  STALE_PARTIAL_VERSION_SECONDS (a chief that died and never came back).

The store is configured from the environment the operator gives the trainer (dtr_contract.objectstore).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from dtr_contract import flags, layout, published
from dtr_contract.objectstore import Location, ObjectInfo, ObjectStore, ObjectStoreError, connect, parse_uri

from dtr_trainer import export, preflight
from dtr_trainer.errors import ExportError, ObjectStoreUnreachableError, TrainerError
from dtr_trainer.lineage import RunIdentity, utc_now

MAX_CLAIM_ATTEMPTS = 1000
# A version dir without a manifest, of another run, is removed once untouched for this long: its copies are
# server-side and take seconds, so by then its chief died; meanwhile a model server pointed at the base sees a
# numbered dir it cannot load (staging, which a server never sees, waits export.STALE_STAGING_SECONDS).
STALE_PARTIAL_VERSION_SECONDS = 3600


# ---------------------------------------------------------------- decisions (pure)


def claim_body(claim: export.Claim, run: RunIdentity, now: str) -> bytes:
    return (json.dumps({"version": claim.version, "token": claim.token, "run": run.as_json(), "claimedAt": now,
                        "host": socket.gethostname(), "pid": os.getpid()}) + "\n").encode()  # fmt: skip


def token_of(body: bytes) -> str | None:
    """The token in a claim's body; None when unreadable (then it is nobody's we know)."""
    try:
        return str(json.loads(body)["token"])
    except (ValueError, KeyError, TypeError):
        return None


def staging_dir_key(base_key: str, claim: export.Claim, attempt: str) -> str:
    return f"{layout.bucket_bookkeeping_key(base_key)}/{claim.staging_prefix}{attempt}"


def _group(base_key: str, obj: ObjectInfo) -> str | None:
    """The directory an object is judged by for cleanup: its staging dir, or its version dir; None for the rest
    (claims, anything unknown)."""
    bookkeeping = layout.bucket_bookkeeping_key(base_key) + "/"
    if obj.key.startswith(bookkeeping):
        name = obj.key[len(bookkeeping):].split("/", 1)[0]
        return bookkeeping + name if name.startswith(export.STAGING_PREFIX) and "/" in obj.key[len(bookkeeping):] \
            else None
    relative = (published.under_base(base_key, obj.key) or "").split("/", 1)
    return published.version_key(base_key, int(relative[0])) if relative[0].isdigit() and len(relative) == 2 \
        else None


def _groups(base_key: str, objects: Iterable[ObjectInfo]) -> dict[str, list[ObjectInfo]]:
    groups: dict[str, list[ObjectInfo]] = {}
    for obj in objects:
        group = _group(base_key, obj)
        if group is not None:
            groups.setdefault(group, []).append(obj)
    return groups


def to_remove(base_key: str, objects: Iterable[ObjectInfo], claim: export.Claim, now: float,
              max_age: float = export.STALE_STAGING_SECONDS,
              partial_max_age: float = STALE_PARTIAL_VERSION_SECONDS) -> list[str]:  # fmt: skip
    """The keys a chief removes before its export: its own claim's staging objects, every object of a staging dir
    whose newest object is older than max_age and of a version without a manifest older than partial_max_age,
    and its own version's objects when it has no manifest (a restarted chief's partial copy). A published version
    is never touched, nor a version dir dtr did not claim (put there by hand or by another tool)."""
    objects = list(objects)
    claimed = {published.version_key(base_key, n)
               for n in published.claimed_numbers(base_key, (o.key for o in objects))}
    own = (staging_dir_key(base_key, claim, ""), published.version_key(base_key, claim.version))
    dtrs = (layout.bucket_bookkeeping_key(base_key) + "/", claimed)
    groups = _groups(base_key, objects)
    before = (now - max_age, now - partial_max_age)
    doomed = [g for g, members in groups.items() if _removable(g, members, own, dtrs, before)]
    return sorted(m.key for g in doomed for m in groups[g])


def _removable(group: str, members: list[ObjectInfo], own: tuple[str, str], dtrs: tuple[str, set[str]],
               before: tuple[float, float]) -> bool:  # fmt: skip
    """Not published, dtr's own (under the bookkeeping prefix, or a version dtr claimed), and this claim's or
    untouched since before[0] (staging) or before[1] (a version)."""
    if any(m.key.endswith("/" + published.MANIFEST_NAME) for m in members):
        return False
    staging = group.startswith(dtrs[0])
    if not (staging or group in dtrs[1]):
        return False
    newest = max(m.modified for m in members)
    return group.startswith(own[0]) or group == own[1] or newest < before[0 if staging else 1]


# ---------------------------------------------------------------- the --backup-dir record (the volume's)


def _read_record(backup_dir: str | None) -> tuple[export.Claim | None, str | None]:
    if not backup_dir:
        return None, None
    try:
        return export.parse_record((Path(backup_dir) / export.VERSION_RECORD).read_text())
    except OSError:
        return None, None


def _write_record(backup_dir: str, claim: export.Claim, run: RunIdentity) -> None:
    Path(backup_dir).mkdir(parents=True, exist_ok=True)
    record = Path(backup_dir) / export.VERSION_RECORD
    partial = record.with_name(f".{record.name}.{secrets.token_hex(8)}")
    partial.write_text(json.dumps({"version": claim.version, "token": claim.token, "runUid": run.uid}) + "\n")
    os.replace(partial, record)


# ---------------------------------------------------------------- claims (the bucket)


def _claim_token(store: ObjectStore, base: Location, version: int) -> str | None:
    try:
        return token_of(store.get_bytes(base.bucket, layout.bucket_claim_key(base.key, version)))
    except ObjectStoreError as err:
        if err.code == "NoSuchKey":
            return None
        raise


def _try_claim(store: ObjectStore, base: Location, claim: export.Claim, run: RunIdentity) -> bool:
    key = layout.bucket_claim_key(base.key, claim.version)
    if store.create(base.bucket, key, claim_body(claim, run, utc_now())):
        return True
    # A create retried after a lost answer finds its own first try: the claim is still ours.
    return _claim_token(store, base, claim.version) == claim.token


def _keys(store: ObjectStore, base: Location) -> list[str]:
    return [o.key for o in store.list(base.bucket, base.prefix())]


def _claim_next(store: ObjectStore, base: Location, token: str, run: RunIdentity) -> export.Claim:
    keys = _keys(store, base)
    version = published.next_version(base.key, keys)
    for _ in range(MAX_CLAIM_ATTEMPTS):
        claim = export.Claim(version, token)
        # A number with objects but no claim (published by hand, or by another tool) is skipped.
        if _try_claim(store, base, claim, run) and version not in published.version_numbers(base.key, keys):
            return claim
        keys = _keys(store, base)
        version = max(version + 1, published.next_version(base.key, keys))
    raise ExportError(f"cannot claim a version for {flags.EXPORT_DIR} {base.uri}: {MAX_CLAIM_ATTEMPTS} tries")


def _reclaim(store: ObjectStore, base: Location, recorded: export.Claim, run: RunIdentity) -> export.Claim | None:
    owner = _claim_token(store, base, recorded.version)
    if owner is not None:
        return recorded if owner == recorded.token else None
    claim = export.Claim(recorded.version, recorded.token or secrets.token_hex(8))
    return claim if _try_claim(store, base, claim, run) else None


def _claim(store: ObjectStore, base: Location, backup_dir: str | None, run: RunIdentity) -> export.Claim:
    recorded, recorded_uid = _read_record(backup_dir)
    claim = None
    if recorded is not None and (recorded_uid is None or run.uid is None or recorded_uid == run.uid):
        claim = _reclaim(store, base, recorded, run)
    if claim is None:
        claim = _claim_next(store, base, secrets.token_hex(8), run)
    if backup_dir and claim != recorded:
        _write_record(backup_dir, claim, run)
    return claim


def failed(err: ObjectStoreError, what: str) -> TrainerError:
    """A store that does not answer is retryable (exit 144: the run exports when it is back, nothing published
    meanwhile); any other refusal fails the export (exit 6)."""
    kind = ObjectStoreUnreachableError if preflight.unreachable(err) else ExportError
    return kind(f"{what}: {err}" + ("; the run tries again" if kind is ObjectStoreUnreachableError else ""))


def claim_version(export_dir: str, backup_dir: str | None, run: RunIdentity,
                  store: ObjectStore | None = None) -> export.Claim:  # fmt: skip
    """Chief only, before training: as export.claim_version, in the bucket. Its first requests to the store, so
    wrong keys, a missing bucket or an endpoint that does not answer fail the run here, before any training."""
    try:
        return _claim(store or connect(os.environ), parse_uri(export_dir), backup_dir, run)
    except ObjectStoreError as err:
        raise failed(err, f"cannot claim a model version in {flags.EXPORT_DIR} {export_dir}") from None
    except OSError as exc:
        raise ExportError(f"cannot record the claimed version in {backup_dir}: {exc.strerror or exc}") from None


def remove_stale_staging(export_dir: str, claim: export.Claim, now: float | None = None,
                         store: ObjectStore | None = None) -> list[str]:  # fmt: skip
    """export.remove_stale_staging in the bucket (to_remove); the keys removed."""
    base = parse_uri(export_dir)
    try:
        store = store or connect(os.environ)
        keys = to_remove(base.key, store.list(base.bucket, base.prefix()), claim, time.time() if now is None else now)
        for key in keys:
            store.delete(base.bucket, key)
    except ObjectStoreError as err:
        raise failed(err, f"cannot clean up {flags.EXPORT_DIR} {export_dir}") from None
    return keys


# ---------------------------------------------------------------- publishing


def publish(store: ObjectStore, base: Location, claim: export.Claim, local: Path, run: RunIdentity) -> str:
    """The complete version in local (a SavedModel and its extra files) into <base>/<N>/, the manifest last; the
    version's URI. Only the claim's holder writes <base>/<N>/: anything there is this run's own earlier try."""
    files = published.local_files(local)
    staging = staging_dir_key(base.key, claim, secrets.token_hex(4))
    version = published.version_key(base.key, claim.version)
    for entry in files:
        store.put(base.bucket, f"{staging}/{entry.path}", local / entry.path)
    # A manifest of an earlier try goes first: no reader takes the version while its objects change.
    store.delete(base.bucket, published.manifest_key(base.key, claim.version))
    for entry in files:  # in publish order: saved_model.pb last
        store.copy(base.bucket, f"{staging}/{entry.path}", f"{version}/{entry.path}")
    wanted = {f"{version}/{e.path}" for e in files}
    for obj in store.list(base.bucket, f"{version}/"):
        if obj.key not in wanted:
            store.delete(base.bucket, obj.key)
    manifest = published.Manifest(claim.version, tuple(files), claim.token, run.as_json(), utc_now())
    store.put(base.bucket, published.manifest_key(base.key, claim.version), manifest.to_json().encode())
    for entry in files:
        store.delete(base.bucket, f"{staging}/{entry.path}")
    return base.join(str(claim.version)).uri


def save_everywhere(model, export_dir: str, claim: export.Claim | None, is_chief: bool,
                    extra_files: Mapping[str, str] | None = None, layer_traces: bool = True,
                    before_publish: Callable[[], object] | None = None,
                    run: RunIdentity | None = None, store: ObjectStore | None = None) -> str | None:  # fmt: skip
    """Every worker calls this, alike (export.save_everywhere: saving runs collective ops). Each saves to a local
    temporary dir; the chief then calls before_publish (ownership.admit), publishes its copy and returns the
    version's s3:// URI."""
    if not is_chief:
        export.save_everywhere(model, export_dir, None, False, layer_traces=layer_traces)
        return None
    assert claim is not None
    scratch = Path(tempfile.mkdtemp(prefix="dtr-export-"))
    try:
        local_base = scratch / "model"  # the volume's export, into a local base: the version is renamed there
        local_base.mkdir()
        Path(layout.bookkeeping_dir(str(local_base))).mkdir(parents=True)
        saved = export.save_everywhere(model, str(local_base), claim, True, extra_files, layer_traces)
        assert saved is not None
        if before_publish is not None:
            before_publish()
        return publish(store or connect(os.environ), parse_uri(export_dir), claim, saved,
                       run or RunIdentity.from_env(os.environ))
    except ObjectStoreError as err:
        raise failed(err, f"cannot publish version {claim.version} to {export_dir}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
