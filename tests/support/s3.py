"""The S3 server's test helpers (devcluster/s3.py): whether it was built, and a real S3 client for it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import urllib3
from minio import Minio

from devcluster import s3


def require(path: Path | None = None) -> Path:
    """`weed` (or `path`, what `make s3-build` makes): skip, saying why and how to build it, when it is missing;
    fail instead under DTR_S3_REQUIRED=1, as `make test-s3` and CI set it."""
    try:
        found = s3.binary() if path is None else path
        if not found.exists():
            raise s3.S3Error(f"{found} is missing; run `make s3-build`")
        return found
    except s3.S3Error as err:
        if os.environ.get("DTR_S3_REQUIRED"):
            pytest.fail(str(err), pytrace=False)
        pytest.skip(f"{err} (under DTR_S3_REQUIRED=1, as `make test-s3` and CI set it, this fails)")


def client(endpoint: str, access_key: str, secret_key: str, ca: str | None = None) -> Minio:
    """MinIO's SDK for an endpoint URL; with ca, HTTPS trusting that CA only."""
    scheme, _, host = endpoint.partition("://")
    http = urllib3.PoolManager(ca_certs=ca) if ca else None
    return Minio(host, access_key=access_key, secret_key=secret_key, secure=scheme == "https", region=s3.REGION,
                 http_client=http)  # fmt: skip
