"""A minimal S3 client, standard library only (Python 3.9 and 3.11): AWS Signature Version 4, path-style addressing.

What the spike needs beside TensorFlow's own S3 file system (tensorflow-io's, which has no conditional write and
no listing with sizes): PutObject with `If-None-Match: *` (claims), CopyObject, ListObjectsV2, HEAD, GET and DELETE.
It also shows that the trainer, which has no S3 client of its own, could do these with the standard library.

    client = Client("http://127.0.0.1:8333", access_key, secret_key, ca_file=None)
    client.put("bucket", "key", b"body", {"If-None-Match": "*"}).status   # 200, or 412 when the key exists
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import ssl
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

REGION = "us-east-1"
S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def code(self) -> str:
        """S3's error code (NoSuchKey, PreconditionFailed, ...) for an error; '' for a success."""
        if self.status < 300 or not self.body:
            return ""
        try:
            return ET.fromstring(self.body).findtext("Code") or ""
        except ET.ParseError:
            return ""


@dataclass(frozen=True)
class Listed:
    key: str
    size: int
    etag: str


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="-_.~")


def signing_headers(method: str, host: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
                    body: bytes, access_key: str, secret_key: str, now: datetime.datetime,
                    region: str = REGION) -> dict[str, str]:  # fmt: skip
    """`headers` plus host, x-amz-date, x-amz-content-sha256 and Authorization (SigV4, every header signed)."""
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    signed = {k.lower(): str(v).strip() for k, v in headers.items()}
    signed.update({"host": host, "x-amz-date": stamp, "x-amz-content-sha256": payload})
    names = sorted(signed)
    canonical = "\n".join([
        method,
        urllib.parse.quote(path, safe="/-_.~"),
        "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items())),
        "".join(f"{n}:{signed[n]}\n" for n in names),
        ";".join(names),
        payload,
    ])  # fmt: skip
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret_key}".encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    auth = f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"
    return {**{k: v for k, v in signed.items() if k != "host"}, "Authorization": auth}


class Client:
    def __init__(self, endpoint: str, access_key: str, secret_key: str, ca_file: str | None = None,
                 timeout: float = 30.0) -> None:  # fmt: skip
        url = urllib.parse.urlsplit(endpoint)
        self.https = url.scheme == "https"
        self.host = url.netloc
        self.access_key, self.secret_key = access_key, secret_key
        self.context = ssl.create_default_context(cafile=ca_file) if self.https else None
        self.timeout = timeout

    def request(self, method: str, bucket: str, key: str = "", body: bytes = b"",
                headers: Mapping[str, str] | None = None,
                query: Mapping[str, str] | None = None) -> Response:  # fmt: skip
        path = f"/{bucket}/{key}" if key else f"/{bucket}"
        query = dict(query or {})
        signed = signing_headers(method, self.host, path, query, dict(headers or {}), body, self.access_key,
                                 self.secret_key, datetime.datetime.now(datetime.timezone.utc))  # fmt: skip
        target = urllib.parse.quote(path, safe="/-_.~")
        if query:
            target += "?" + "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items()))
        if self.https:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(self.host, timeout=self.timeout,
                                                                           context=self.context)
        else:
            conn = http.client.HTTPConnection(self.host, timeout=self.timeout)
        try:
            conn.request(method, target, body=body or None, headers={**signed, "Content-Length": str(len(body))})
            reply = conn.getresponse()
            return Response(reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read())
        finally:
            conn.close()

    def put(self, bucket: str, key: str, body: bytes, headers: Mapping[str, str] | None = None) -> Response:
        return self.request("PUT", bucket, key, body, headers)

    def put_if_absent(self, bucket: str, key: str, body: bytes) -> bool:
        """True if this call created the key; False if it existed (412). Anything else raises."""
        reply = self.put(bucket, key, body, {"If-None-Match": "*"})
        if reply.status == 200:
            return True
        if reply.status == 412:
            return False
        raise OSError(f"PUT {bucket}/{key}: HTTP {reply.status} {reply.code}")

    def copy(self, bucket: str, source_key: str, key: str, headers: Mapping[str, str] | None = None) -> Response:
        source = urllib.parse.quote(f"/{bucket}/{source_key}", safe="/-_.~")
        return self.put(bucket, key, b"", {"x-amz-copy-source": source, **(headers or {})})

    def get(self, bucket: str, key: str) -> Response:
        return self.request("GET", bucket, key)

    def head(self, bucket: str, key: str = "") -> Response:
        return self.request("HEAD", bucket, key)

    def delete(self, bucket: str, key: str) -> Response:
        return self.request("DELETE", bucket, key)

    def list(self, bucket: str, prefix: str = "") -> Iterator[Listed]:
        """Every object under prefix (ListObjectsV2, all pages)."""
        token = None
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            reply = self.request("GET", bucket, query=query)
            if reply.status != 200:
                raise OSError(f"list {bucket}/{prefix}: HTTP {reply.status} {reply.code}")
            root = ET.fromstring(reply.body)
            for item in root.iter(f"{S3_NS}Contents"):
                yield Listed(item.findtext(f"{S3_NS}Key") or "", int(item.findtext(f"{S3_NS}Size") or 0),
                             (item.findtext(f"{S3_NS}ETag") or "").strip('"'))  # fmt: skip
            token = root.findtext(f"{S3_NS}NextContinuationToken")
            if root.findtext(f"{S3_NS}IsTruncated") != "true" or not token:
                return
