"""`dtr model get` and fetch_model() for a model published in a bucket (--export-dir s3://bucket/<base>): the
version's objects downloaded with the store's own client (dtr_contract.objectstore), taken only when the version
is published, its manifest there and matching, every file's SHA-256 checked (dtr_contract.published;
docs/models.md#versions-in-a-bucket).

The store's endpoint and keys come from the user's environment, the names the trainer reads (S3_ENDPOINT with its
scheme, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, S3_CA_FILE), or `dtr model get --s3-endpoint`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from dtr_contract import objectstore, published
from dtr_contract.objectstore import Location, ObjectStoreError

from dtr_client.models import fill_atomically
from dtr_client.transfer import TransferError

T = TypeVar("T")


def bucket_source(run: Mapping[str, Any], version: int | None) -> tuple[Location, int | None] | None:
    """(the versions' base, the version wanted; None: the latest published) for a run whose model is in a bucket:
    the version its status names (or VERSION beside it), else the base of its spec.export.storageUri. None for a
    run that exports to its volume."""
    path = str(((run.get("status") or {}).get("model") or {}).get("path") or "")
    if objectstore.is_s3_uri(path):
        base, exported = _parsed(lambda: published.split_version_uri(path), "status.model.path")
        return base, exported if version is None else version
    uri = str(((run.get("spec") or {}).get("export") or {}).get("storageUri") or "")
    if objectstore.is_s3_uri(uri):
        return _parsed(lambda: objectstore.parse_uri(uri), "spec.export.storageUri"), version
    return None


def _parsed(parse: Callable[[], T], field: str) -> T:
    try:
        return parse()
    except ValueError as err:
        raise TransferError(f"{field}: {err}") from None


def with_overrides(environ: Mapping[str, str], endpoint: str | None = None, ca_file: str | None = None) -> dict:
    """environ with --s3-endpoint and --s3-ca-file in place of S3_ENDPOINT and S3_CA_FILE."""
    env = dict(environ)
    if endpoint:
        env[objectstore.ENV_ENDPOINT] = endpoint
    if ca_file:
        env[objectstore.ENV_CA_FILE] = ca_file
    return env


def _latest(store: objectstore.ObjectStore, base: Location) -> int:
    versions = published.published_versions(store, base)
    if not versions:
        raise TransferError(f"no published model version in {base.uri} yet (a version counts once its "
                            f"{published.MANIFEST_NAME} is there; docs/models.md#versions-in-a-bucket)")  # fmt: skip
    return versions[-1]


def _download(store: objectstore.ObjectStore, uri: str, dest: Path) -> published.Manifest:
    """DEST complete or not at all (models.fill_atomically)."""

    def fill(temporary: Path) -> published.Manifest:
        manifest = published.download_version(store, uri, temporary)
        os.chmod(temporary, 0o755)  # mkdtemp's 0700, as a copied directory would not be
        return manifest

    return fill_atomically(dest, fill)


def get(base: Location, version: int | None, dest: Path, environ: Mapping[str, str]) -> str:
    """Copy the version (None: the latest published) into DEST; the one-line summary. TransferError saying what
    is wrong: the store's settings, keys or bucket (S3's own code), or a version that is not published."""
    try:
        store = objectstore.connect(environ)
        chosen = _latest(store, base) if version is None else version
        uri = base.join(str(chosen)).uri
        manifest = _download(store, uri, dest)
    except published.UnpublishedVersion as err:
        raise TransferError(f"{err}; not copied") from None
    except ObjectStoreError as err:
        raise TransferError(f"cannot read the model from {base.uri}: {err}") from None
    size = sum(f.size for f in manifest.files)
    return (f"got version {chosen} ({len(manifest.files)} file(s), {size} bytes) from {uri} into {dest} "
            f"(manifest and SHA-256 checked)")
