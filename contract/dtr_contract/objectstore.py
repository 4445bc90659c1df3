"""A small S3 client, standard library only (Python 3.9 for the trainer, 3.11 for the operator and the CLI):
AWS Signature Version 4, path-style addressing (`<endpoint>/<bucket>/<key>`, what SeaweedFS, MinIO and
tensorflow-io's plugin use).

Why not boto3: the op environment's kubernetes client conflicts with it and the trainer's image is at its size
limit. What it is for, beside TensorFlow's own s3:// (which has no conditional write, no listing with sizes and
hides a wrong key behind empty listings, bench/s3/results.md): checks before training, the publish protocol of
model versions (If-None-Match: * claims, server-side copies), and `dtr model get`.

    config = config_from_env(os.environ)     # S3_ENDPOINT (with its scheme), AWS_ACCESS_KEY_ID, ...
    store = ObjectStore(config)
    store.create("bucket", "models/.dtr-export/claim-3", b"{...}")   # True: this call made it; False: it existed
    for obj in store.list("bucket", "models/digits/"): ...

Every failure is an ObjectStoreError carrying S3's error code (NoSuchBucket, AccessDenied, ...) and the HTTP
status; no message ever holds the secret key.
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import hashlib
import hmac
import http.client
import os
import random
import ssl
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Union

from dtr_contract import env

# The environment the trainer's container gets (dtr_contract.env, the names' one home): the same names as
# tensorflow-io's S3 plugin reads, so the trainer's data (TensorFlow) and its publishing (this client) see one
# configuration.
ENV_ENDPOINT = env.S3_ENDPOINT
ENV_ACCESS_KEY = env.AWS_ACCESS_KEY_ID
ENV_SECRET_KEY = env.AWS_SECRET_ACCESS_KEY
ENV_REGION = env.AWS_REGION
ENV_DEFAULT_REGION = "AWS_DEFAULT_REGION"  # read as a fallback (the AWS SDKs' name); the operator never sets it
ENV_CA_FILE = env.S3_CA_FILE
ENV_MAX_ATTEMPTS = env.AWS_MAX_ATTEMPTS

SCHEME = "s3://"
DEFAULT_REGION = "us-east-1"
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_TIMEOUT = 30.0
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_CHUNK = 1024 * 1024
# Answers worth another try: the server's own trouble or throttling, never a refusal of the request.
_RETRY_STATUSES = frozenset({500, 502, 503, 504})
_RETRY_CODES = frozenset({"InternalError", "SlowDown", "RequestTimeout", "ServiceUnavailable"})
# Codes this client gives failures that have no S3 answer.
CONNECTION_FAILED = "ConnectionFailed"
CERTIFICATE_REJECTED = "CertificateRejected"
INVALID_CONFIG = "InvalidConfig"
INCOMPLETE_BODY = "IncompleteBody"

Body = Union[bytes, Path]


class ObjectStoreError(Exception):
    """One failure of a request: S3's error code (or one of this client's for no answer), the HTTP status (0
    without an answer), what was asked. The message never holds the secret key."""

    def __init__(self, code: str, status: int, operation: str, target: str, detail: str = "") -> None:
        self.code, self.status, self.operation, self.target, self.detail = code, status, operation, target, detail
        http_part = f" (HTTP {status})" if status else ""
        super().__init__(f"{operation} {target}: {code}{http_part}" + (f": {detail}" if detail else ""))


@dataclass(frozen=True)
class Config:
    endpoint: str  # with its scheme: http://host:port or https://host
    access_key: str
    secret_key: str = field(repr=False)
    region: str = DEFAULT_REGION
    ca_file: str | None = None  # a CA of one's own for HTTPS; None: the system's
    max_attempts: int = DEFAULT_MAX_ATTEMPTS  # tries per request, the first included
    timeout: float = DEFAULT_TIMEOUT  # seconds per connect and per read


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str  # without quotes
    modified: float = 0.0  # last modified, seconds since the epoch (0.0 when the server did not say)


@dataclass(frozen=True)
class Location:
    """An s3://bucket/key URI, split. key has no leading slash; '' for the bucket's root."""

    bucket: str
    key: str = ""

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}" if self.key else f"{SCHEME}{self.bucket}"

    def join(self, *parts: str) -> Location:
        """The key extended by parts, one slash between each."""
        pieces = [p.strip("/") for p in (self.key, *parts) if p.strip("/")]
        return Location(self.bucket, "/".join(pieces))

    def prefix(self) -> str:
        """The key as a listing prefix: everything under it, `key/`; '' for the root."""
        return f"{self.key.rstrip('/')}/" if self.key else ""


# ---------------------------------------------------------------- pure: configuration and names


def is_s3_uri(text: str) -> bool:
    return text.startswith(SCHEME)


def parse_uri(uri: str) -> Location:
    """s3://bucket/some/key -> Location('bucket', 'some/key'). ValueError for anything else."""
    if not is_s3_uri(uri):
        raise ValueError(f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri[len(SCHEME):].partition("/")
    if not valid_bucket(bucket):
        raise ValueError(f"{uri!r}: {bucket!r} is not a bucket name (3-63 of a-z 0-9 . -, a letter or digit at "
                         f"each end)")  # fmt: skip
    return Location(bucket, key.strip("/"))


def valid_bucket(name: str) -> bool:
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789.-")
    return 3 <= len(name) <= 63 and set(name) <= allowed and name[0].isalnum() and name[-1].isalnum()


def config_from_env(environ: Mapping[str, str]) -> Config:
    """The client's configuration from an environment (the trainer's, or a user's shell). ObjectStoreError
    (InvalidConfig) naming what is missing or wrong; never the secret."""
    missing = [n for n in (ENV_ENDPOINT, ENV_ACCESS_KEY, ENV_SECRET_KEY) if not environ.get(n)]
    if missing:
        raise ObjectStoreError(INVALID_CONFIG, 0, "configure", "S3", f"{', '.join(missing)} not set")
    return Config(endpoint=_endpoint(environ[ENV_ENDPOINT]), access_key=environ[ENV_ACCESS_KEY],
                  secret_key=environ[ENV_SECRET_KEY],
                  region=environ.get(ENV_REGION) or environ.get(ENV_DEFAULT_REGION) or DEFAULT_REGION,
                  ca_file=environ.get(ENV_CA_FILE) or None,
                  max_attempts=_attempts(environ.get(ENV_MAX_ATTEMPTS, "")))  # fmt: skip


def _endpoint(text: str) -> str:
    """An endpoint without a scheme means HTTPS, as tensorflow-io's plugin reads S3_ENDPOINT."""
    endpoint = text if "://" in text else f"https://{text}"
    if urllib.parse.urlsplit(endpoint).scheme not in ("http", "https"):
        raise ObjectStoreError(INVALID_CONFIG, 0, "configure", "S3", f"{ENV_ENDPOINT}={endpoint!r}: not http(s)")
    return endpoint.rstrip("/")


def _attempts(text: str) -> int:
    if not text:
        return DEFAULT_MAX_ATTEMPTS
    if not (text.isdigit() and int(text) >= 1):
        raise ObjectStoreError(INVALID_CONFIG, 0, "configure", "S3", f"{ENV_MAX_ATTEMPTS}={text!r}: not >= 1")
    return int(text)


def object_path(bucket: str, key: str = "") -> str:
    """The request's path, path-style: /bucket or /bucket/key (unencoded)."""
    return f"/{bucket}/{key}" if key else f"/{bucket}"


def _quote(text: str, safe: str = "-_.~") -> str:
    return urllib.parse.quote(text, safe=safe)


def encoded_path(path: str) -> str:
    """A path as S3 signs and receives it: every byte but unreserved characters and slashes percent-encoded."""
    return _quote(path, safe="/-_.~")


def encoded_query(query: Mapping[str, str]) -> str:
    """Sorted by name, names and values percent-encoded: the canonical query string, and the one sent."""
    return "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items()))


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signing_key(secret_key: str, day: str, region: str) -> bytes:
    return _hmac(_hmac(_hmac(_hmac(f"AWS4{secret_key}".encode(), day), region), "s3"), "aws4_request")


def sign(method: str, host: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
         payload_sha256: str, access_key: str, secret_key: str, now: datetime.datetime,
         region: str = DEFAULT_REGION) -> dict[str, str]:  # fmt: skip
    """`headers` plus x-amz-date, x-amz-content-sha256 and Authorization (SigV4, every given header and host
    signed). Host itself is left out of the result: http.client sends it."""
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    signed = {k.lower(): " ".join(str(v).split()) for k, v in headers.items()}
    signed.update({"host": host, "x-amz-date": stamp, "x-amz-content-sha256": payload_sha256})
    names = sorted(signed)
    canonical = "\n".join([method, encoded_path(path), encoded_query(query),
                           "".join(f"{n}:{signed[n]}\n" for n in names), ";".join(names), payload_sha256])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    signature = hmac.new(signing_key(secret_key, day, region), to_sign.encode(), hashlib.sha256).hexdigest()
    auth = f"AWS4-HMAC-SHA256 Credential={access_key}/{scope},SignedHeaders={';'.join(names)},Signature={signature}"
    return {**{k: v for k, v in signed.items() if k != "host"}, "authorization": auth}


def error_code(body: bytes) -> tuple[str, str]:
    """(Code, Message) of S3's error document; ('', '') when the body is none."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return "", ""
    return root.findtext("Code") or "", root.findtext("Message") or ""


def status_code(status: int) -> str:
    """A code for an answer without a body (HEAD): what S3 would have said most often."""
    return {301: "PermanentRedirect", 400: "BadRequest", 403: "AccessDenied", 404: "NotFound",
            412: "PreconditionFailed"}.get(status, f"HTTP{status}")  # fmt: skip


def should_retry(status: int, code: str) -> bool:
    return status in _RETRY_STATUSES or code in _RETRY_CODES


def backoff_seconds(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Before try attempt+1 (attempt counts from 1): full jitter on 0.1 s doubling, at most 5 s."""
    return rand() * min(5.0, 0.1 * 2 ** attempt)


def parse_listing(body: bytes) -> tuple[list[ObjectInfo], str | None]:
    """A ListObjectsV2 page: its objects and the token of the next page (None on the last)."""
    root = ET.fromstring(body)
    items = [ObjectInfo(item.findtext(f"{_NS}Key") or "", int(item.findtext(f"{_NS}Size") or 0),
                        (item.findtext(f"{_NS}ETag") or "").strip('"'),
                        iso_seconds(item.findtext(f"{_NS}LastModified") or ""))
             for item in root.iter(f"{_NS}Contents")]  # fmt: skip
    token = root.findtext(f"{_NS}NextContinuationToken")
    return items, (token if root.findtext(f"{_NS}IsTruncated") == "true" and token else None)


def iso_seconds(text: str) -> float:
    """A listing's LastModified (2026-12-04T18:00:00.000Z) as seconds since the epoch; 0.0 when unreadable."""
    try:
        return datetime.datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
    except ValueError:
        try:
            return datetime.datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except ValueError:
            return 0.0


def http_date_seconds(text: str) -> float:
    """A Last-Modified header (Fri, 04 Dec 2026 18:00:00 GMT) as seconds since the epoch; 0.0 when unreadable."""
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return 0.0


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------- I/O: requests


@dataclass(frozen=True)
class _Request:
    method: str
    bucket: str
    key: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    body: Body = b""

    @property
    def target(self) -> str:
        return Location(self.bucket, self.key).uri


class ObjectStore:
    """Requests to one endpoint with one identity. A connection per request (simple, and enough for a few
    objects a version); up to config.max_attempts tries for a connection failure or a server's 5xx."""

    def __init__(self, config: Config, sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        url = urllib.parse.urlsplit(config.endpoint)
        self._https, self._host = url.scheme == "https", url.netloc
        self._context = ssl.create_default_context(cafile=config.ca_file) if self._https else None
        self._sleep = sleep

    # -- the operations

    def list(self, bucket: str, prefix: str = "", page_size: int = 1000) -> Iterator[ObjectInfo]:
        """Every object whose key starts with prefix, in key order, page by page (ListObjectsV2)."""
        token: str | None = None
        while True:
            query = {"list-type": "2", "prefix": prefix, "max-keys": str(page_size)}
            if token:
                query["continuation-token"] = token
            body = self._read(_Request("GET", bucket, query=query), f"list {prefix!r} in")
            items, token = parse_listing(body)
            yield from items
            if token is None:
                return

    def head(self, bucket: str, key: str) -> ObjectInfo | None:
        """The object's size and etag; None when there is no such key."""
        request = _Request("HEAD", bucket, key)
        reply, conn = self._send(request, "head")
        try:
            reply.read()
            if reply.status == 404:
                return None
            if reply.status >= 300:
                # A HEAD answer has no body: ask once more with a GET of one byte for S3's own code.
                self._read(_Request("GET", bucket, key, {"range": "bytes=0-0"}), "head")
                raise ObjectStoreError(status_code(reply.status), reply.status, "head", request.target)
            return ObjectInfo(key, int(reply.getheader("content-length") or 0),
                              (reply.getheader("etag") or "").strip('"'),
                              http_date_seconds(reply.getheader("last-modified") or ""))  # fmt: skip
        finally:
            conn.close()

    def get_bytes(self, bucket: str, key: str) -> bytes:
        return self._read(_Request("GET", bucket, key), "get")

    def get(self, bucket: str, key: str, dest: Path) -> ObjectInfo:
        """Stream the object into dest, through a partial file renamed into place when every byte is there."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(f".{dest.name}.partial")
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                info = self._get_once(_Request("GET", bucket, key), partial)
                os.replace(partial, dest)
                return info
            except ObjectStoreError as err:
                partial.unlink(missing_ok=True)
                if not (should_retry(err.status, err.code) or err.code in (CONNECTION_FAILED, INCOMPLETE_BODY)):
                    raise
                if attempt == self.config.max_attempts:
                    raise
                self._sleep(backoff_seconds(attempt))
        raise AssertionError("unreachable")

    def put(self, bucket: str, key: str, body: Body, headers: Mapping[str, str] | None = None) -> str:
        """Write the object (bytes, or a file's content, streamed); its etag."""
        reply = self._call(_Request("PUT", bucket, key, dict(headers or {}), body=body), "put")
        return (reply.get("etag") or "").strip('"')

    def create(self, bucket: str, key: str, body: Body) -> bool:
        """Write the object only if the key is free (If-None-Match: *): True if this call created it, False if it
        existed. Exactly one of several racing callers gets True (a version claim)."""
        try:
            self.put(bucket, key, body, {"if-none-match": "*"})
        except ObjectStoreError as err:
            if err.status == 412:
                return False
            raise
        return True

    def copy(self, bucket: str, source_key: str, key: str) -> None:
        """A server-side copy in one bucket: no bytes through this process."""
        source = encoded_path(object_path(bucket, source_key))
        request = _Request("PUT", bucket, key, {"x-amz-copy-source": source})
        body = self._read(request, "copy")
        # S3 may fail a copy after its 200 has gone out: the error is then the body's.
        code, message = error_code(body) if b"<Error>" in body[:200] else ("", "")
        if code:
            raise ObjectStoreError(code, 200, "copy", request.target, self._redact(message))

    def delete(self, bucket: str, key: str) -> None:
        """Remove the object; removing a key that is not there succeeds (S3's own rule)."""
        self._call(_Request("DELETE", bucket, key), "delete")

    # -- the transport

    def _read(self, request: _Request, operation: str) -> bytes:
        """The body of a successful answer."""
        return self._call(request, operation, want_body=True)["body"]

    def _call(self, request: _Request, operation: str, want_body: bool = False) -> dict:
        """The headers of a successful answer (and its body as "body"), after up to max_attempts tries."""
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                reply, conn = self._send(request, operation)
                try:
                    return self._checked(reply, request, operation, want_body)
                finally:
                    conn.close()
            except ObjectStoreError as err:
                retry = should_retry(err.status, err.code) or err.code == CONNECTION_FAILED
                if not retry or attempt == self.config.max_attempts:
                    raise
                self._sleep(backoff_seconds(attempt))
        raise AssertionError("unreachable")

    def _checked(self, reply: http.client.HTTPResponse, request: _Request, operation: str,
                 want_body: bool) -> dict:  # fmt: skip
        try:
            body = reply.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ObjectStoreError(CONNECTION_FAILED, reply.status, operation, request.target, str(exc)) from None
        if reply.status >= 300:
            code, message = error_code(body)
            raise ObjectStoreError(code or status_code(reply.status), reply.status, operation, request.target,
                                   self._redact(message))  # fmt: skip
        headers = {k.lower(): v for k, v in reply.getheaders()}
        return {**headers, "body": body} if want_body else headers

    def _get_once(self, request: _Request, partial: Path) -> ObjectInfo:
        reply, conn = self._send(request, "get")
        try:
            if reply.status >= 300:
                self._checked(reply, request, "get", False)
            expected, written = int(reply.getheader("content-length") or -1), 0
            with open(partial, "wb") as f:
                for chunk in iter(lambda: reply.read(_CHUNK), b""):
                    f.write(chunk)
                    written += len(chunk)
            if expected >= 0 and written != expected:
                raise ObjectStoreError(INCOMPLETE_BODY, reply.status, "get", request.target,
                                       f"{written} of {expected} bytes")  # fmt: skip
            return ObjectInfo(request.key, written, (reply.getheader("etag") or "").strip('"'))
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, ObjectStoreError):
                raise
            raise ObjectStoreError(CONNECTION_FAILED, 0, "get", request.target, str(exc)) from None
        finally:
            conn.close()

    def _send(self, request: _Request, operation: str) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
        """One try: sign, connect, send; the answer unread (the caller reads and closes)."""
        path = object_path(request.bucket, request.key)
        payload, length = self._payload(request.body)
        headers = sign(request.method, self._host, path, request.query, request.headers, payload,
                       self.config.access_key, self.config.secret_key,
                       datetime.datetime.now(datetime.timezone.utc), self.config.region)  # fmt: skip
        target = encoded_path(path) + (f"?{encoded_query(request.query)}" if request.query else "")
        conn = self._connection()
        try:
            with _opened(request.body) as stream:
                conn.request(request.method, target, body=stream, headers={**headers, "content-length": str(length)})
            return conn.getresponse(), conn
        except ssl.SSLCertVerificationError as exc:
            conn.close()
            raise ObjectStoreError(CERTIFICATE_REJECTED, 0, operation, request.target,
                                   f"{self.config.endpoint}: {exc.verify_message or exc}") from None  # fmt: skip
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ObjectStoreError(CONNECTION_FAILED, 0, operation, request.target,
                                   f"{self.config.endpoint}: {exc}") from None  # fmt: skip

    def _connection(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, timeout=self.config.timeout, context=self._context)
        return http.client.HTTPConnection(self._host, timeout=self.config.timeout)

    @staticmethod
    def _payload(body: Body) -> tuple[str, int]:
        if isinstance(body, Path):
            return file_sha256(body), body.stat().st_size
        return (hashlib.sha256(body).hexdigest() if body else _EMPTY_SHA256), len(body)

    def _redact(self, text: str) -> str:
        return text.replace(self.config.secret_key, "***") if self.config.secret_key else text


@contextlib.contextmanager
def _opened(body: Body) -> Iterator[bytes | BinaryIO | None]:
    """The body as http.client sends it: bytes as they are (None when empty), a file opened for this try."""
    if not isinstance(body, Path):
        yield body or None
        return
    with open(body, "rb") as f:
        yield f


def connect(environ: Mapping[str, str], sleep: Callable[[float], None] = time.sleep) -> ObjectStore:
    """An ObjectStore configured from environ (config_from_env)."""
    return ObjectStore(config_from_env(environ), sleep)
