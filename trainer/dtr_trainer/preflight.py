"""An s3:// dataset checked with a real request before the strategy exists (docs/object-storage.md#when-it-fails).

TensorFlow's s3:// (tensorflow-io's plugin) hides what matters here: wrong keys, a missing bucket and an endpoint
that does not answer all make `tf.io.gfile.glob` return [] without an error (bench/s3/results.md). So the trainer
lists the dataset's URI once with its own client (dtr_contract.objectstore, the same environment) and turns each
failure into a line naming its cause, never a key, with an exit code of its own (dtr_contract.exits): the keys,
the bucket, no data and any other refusal are permanent; an endpoint that does not answer after the client's
bounded tries (AWS_MAX_ATTEMPTS, with back-off) is retryable. The listing is also the list of files the data are
read from (data_s3.py), so it is made once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping

from dtr_contract import env
from dtr_contract import objectstore as s3
from dtr_contract.objectstore import ObjectInfo, ObjectStoreError

from dtr_trainer.errors import (
    BucketMissingError,
    NoDataError,
    ObjectStoreKeysError,
    ObjectStoreRefusedError,
    ObjectStoreUnreachableError,
    TrainerError,
)

KEYS_REFUSED = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied")
NO_BUCKET = ("NoSuchBucket",)
# No answer, or only the server's own trouble, after every try: a store that is down comes back.
UNREACHABLE = (s3.CONNECTION_FAILED, s3.INCOMPLETE_BODY, "InternalError", "SlowDown", "ServiceUnavailable",
               "RequestTimeout")  # fmt: skip
# curl's codes: 6 host not resolved, 7 no connection, 28 timed out, 52 empty reply, 55 send failed, 56 receive failed.
CURL_UNREACHABLE = (6, 7, 28, 52, 55, 56)
# Past this a file's reads hold noticeably more memory (bench/s3/results-read-product.md: 64 MB shards took 500 MB
# more than 8 MB ones, 8 files open at once).
LARGE_FILE = 32 * 2**20
SECRET_HINT = f"the keys {env.AWS_ACCESS_KEY_ID} and {env.AWS_SECRET_ACCESS_KEY} of spec.objectStore.credentialsSecret"


# ---------------------------------------------------------------- pure


def unreachable(err: ObjectStoreError) -> bool:
    """No answer, or only the server's own trouble, after the client's tries: a store that comes back."""
    return err.code in UNREACHABLE or (err.status >= 500 and err.code not in KEYS_REFUSED)


def large_files_warning(sizes: Iterable[int]) -> str | None:
    """A warning when files are larger than LARGE_FILE: tensorflow-io's s3:// holds memory for each open file in
    proportion to its size (docs/object-storage.md#memory)."""
    large = [size for size in sizes if size > LARGE_FILE]
    if not large:
        return None
    return (f"warning: {len(large)} file(s) over {LARGE_FILE // 2**20} MiB (the largest {max(large) / 2**20:.0f} MiB): "
            "TensorFlow's s3:// holds memory for each open file in proportion to its size; shards of about 8 MB "
            "stream in bounded memory (docs/object-storage.md#memory)")


def tf_unreachable(message: str) -> bool:
    """Whether a TensorFlow error is tensorflow-io's S3 file system finding no store (curl's codes for no host, no
    connection, a timeout, a connection cut): reading data or writing through s3:// while the store is away."""
    return any(int(code) in CURL_UNREACHABLE for code in re.findall(r"curlCode: (\d+)", message))


def failure(err: ObjectStoreError, uri: str, endpoint: str) -> TrainerError:
    """The trainer's error for a failed listing: its cause in words, with S3's code; never a key."""
    code = err.code
    if code in KEYS_REFUSED:
        return ObjectStoreKeysError(f"{uri}: the object store {endpoint} refused the keys ({code}): check "
                                    f"{SECRET_HINT}, and that they may list and read the bucket")  # fmt: skip
    if code in NO_BUCKET:
        return BucketMissingError(f"{uri}: the bucket {s3.parse_uri(uri).bucket} does not exist at {endpoint} "
                                  f"({code})")  # fmt: skip
    if unreachable(err):
        return ObjectStoreUnreachableError(f"{uri}: the object store {endpoint} does not answer ({code}: "
                                           f"{err.detail or 'no detail'}); the run tries again")  # fmt: skip
    hint = ": give the CA in spec.objectStore.caConfigMap" if code == s3.CERTIFICATE_REJECTED else ""
    return ObjectStoreRefusedError(f"{uri}: the object store {endpoint} refused the request ({code}"
                                   f"{': ' + err.detail if err.detail else ''}){hint}")  # fmt: skip


def _hidden(rest: str) -> bool:
    """A key under the dataset's that is bookkeeping, not data: a directory marker, or a segment starting with '.'
    or '_' (_SUCCESS, .dtr/)."""
    return rest.endswith("/") or any(part.startswith((".", "_")) for part in rest.split("/") if part)


def data_keys(objects: Iterable[ObjectInfo], key: str) -> list[str]:
    """The keys a dataset URI names, sorted: the object of that key, or every one under it as a prefix (a whole
    segment: s3://b/train is train and train/..., never train2/...); the bucket's every object for no key."""
    prefix = f"{key.rstrip('/')}/" if key else ""
    exact = None if key.endswith("/") else key  # s3://b/data/ names a prefix only
    return sorted(obj.key for obj in objects
                  if obj.key == exact or (obj.key.startswith(prefix) and not _hidden(obj.key[len(prefix):])))


# ---------------------------------------------------------------- I/O


def checked_files(dataset: str | None, log: Callable[[str], None]) -> list[str] | None:
    """An s3:// dataset's files, listed with a real request before anything else reads it; None for any other."""
    if dataset is None or not dataset.startswith(s3.SCHEME):
        return None
    objects = dataset_objects(dataset, os.environ)
    log(f"{dataset}: {len(objects)} file(s) in the object store {os.environ.get(env.S3_ENDPOINT)}")
    if warning := large_files_warning([obj.size for obj in objects]):
        log(warning)
    bucket = s3.parse_uri(dataset).bucket
    return [s3.Location(bucket, obj.key).uri for obj in objects]


def dataset_objects(uri: str, environ: Mapping[str, str]) -> list[ObjectInfo]:
    """The dataset's objects, sorted by key, from one listing; or the error naming why there are none."""
    location = s3.parse_uri(uri)
    endpoint = environ.get(env.S3_ENDPOINT, f"({env.S3_ENDPOINT} not set)")
    try:
        store = s3.connect(environ)
        # One listing of the key as a prefix: it finds both the object of that key and those under it.
        listed = list(store.list(location.bucket, location.key.rstrip("/")))
        keys = data_keys(listed, uri[len(s3.SCHEME):].partition("/")[2])
    except ObjectStoreError as err:
        raise failure(err, uri, endpoint) from None
    if not keys:
        raise NoDataError(f"{uri}: no object at this key or under this prefix at {endpoint}: put the data there "
                          "(docs/object-storage.md#the-data), or correct spec.training.dataset")  # fmt: skip
    by_key = {obj.key: obj for obj in listed}
    return [by_key[key] for key in keys]
