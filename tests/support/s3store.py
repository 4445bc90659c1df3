"""The product's own S3 client (dtr_contract.objectstore) and environment for a test server (devcluster/s3.py),
in either Python: no MinIO SDK here, which the trainer's environment does not have."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from dtr_contract import objectstore

from devcluster import s3
from support.repo import REPO


def require_weed() -> None:
    """Skip, saying why, when `weed` was not built; fail instead under DTR_S3_REQUIRED=1 (make test-s3-local, CI)."""
    try:
        s3.binary()
    except s3.S3Error as err:
        if os.environ.get("DTR_S3_REQUIRED"):
            pytest.fail(str(err), pytrace=False)
        pytest.skip(f"{err} (under DTR_S3_REQUIRED=1 this fails)")


def server_fixture(bucket: str) -> Any:
    """A module's `server` fixture: the built server as a local process with `bucket`, for the module's tests."""

    @pytest.fixture(scope="module")
    def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3.State]:
        require_weed()
        srv = s3.S3Server(tmp_path_factory.mktemp("s3"), bucket=bucket)
        try:
            yield srv.start()
        finally:
            srv.stop()

    return server


def s3_env(state: s3.State, **extra: str) -> dict[str, str]:
    """The environment the operator gives a trainer for this server (issue 40's interface), over os.environ
    without any AWS_ or S3_ setting of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    env.update({objectstore.ENV_ENDPOINT: state.endpoint, objectstore.ENV_ACCESS_KEY: state.access_key,
                objectstore.ENV_SECRET_KEY: state.secret_key, objectstore.ENV_REGION: s3.REGION,
                "AWS_RETRY_MODE": "standard", objectstore.ENV_MAX_ATTEMPTS: "2", "AWS_EC2_METADATA_DISABLED": "true"})
    if state.ca:
        env[objectstore.ENV_CA_FILE] = state.ca
    env.update(extra)
    return env


def store(state: s3.State, overrides: Mapping[str, str] | None = None, **kwargs) -> objectstore.ObjectStore:
    return objectstore.ObjectStore(objectstore.config_from_env(s3_env(state, **dict(overrides or {}))), **kwargs)


def put_digits(state: s3.State, uri: str, python: str = sys.executable, shards: int = 4) -> None:
    """The digits as the built-in schema's TFRecord shards under uri: `shards` training files and 1 evaluation file
    (records.py), written by the trainer's Python (TensorFlow's s3://)."""
    proc = subprocess.run([python, "-m", "dtr_trainer.records", "digits", uri, "--shards", str(shards)],
                          env=s3_env(state, TF_CPP_MIN_LOG_LEVEL="2"), cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
