"""Where `dtr model get` reads a run's model published in a bucket (dtr_client.bucket, pure), and the settings it
uses. The download itself is tested against a real server (tests/s3/test_published_server.py)."""

from __future__ import annotations

import pytest
from dtr_client import bucket
from dtr_client.transfer import TransferError
from dtr_contract.objectstore import Location


def run(path: str | None = None, storage_uri: str | None = None) -> dict:
    doc: dict = {"spec": {"workers": 2}}
    if path:
        doc["status"] = {"model": {"path": path, "version": int(path.rsplit("/", 1)[1]) if path[-1].isdigit() else 0}}
    if storage_uri:
        doc["spec"]["export"] = {"storageUri": storage_uri}
    return doc


def test_the_status_version_or_the_one_asked_for_in_its_base():
    assert bucket.bucket_source(run("s3://models/team/d/3"), None) == (Location("models", "team/d"), 3)
    assert bucket.bucket_source(run("s3://models/team/d/3"), 1) == (Location("models", "team/d"), 1)


def test_without_an_exported_version_the_specs_base_and_the_latest():
    assert bucket.bucket_source(run(storage_uri="s3://models/team/d"), None) == (Location("models", "team/d"), None)
    assert bucket.bucket_source(run(storage_uri="s3://models/team/d/"), 2) == (Location("models", "team/d"), 2)


def test_a_run_on_its_volume_is_not_the_buckets():
    assert bucket.bucket_source(run("/mnt/dtr/models/d/1"), None) is None
    assert bucket.bucket_source(run(), 1) is None


def test_a_bucket_uri_that_names_no_version_is_refused_with_its_field():
    with pytest.raises(TransferError, match=r"status\.model\.path"):
        bucket.bucket_source(run("s3://models/team/latest"), None)
    with pytest.raises(TransferError, match=r"spec\.export\.storageUri"):
        bucket.bucket_source(run(storage_uri="s3://X/team"), None)


def test_flags_take_the_place_of_the_environments_endpoint_and_ca():
    env = {"S3_ENDPOINT": "http://a:1", "S3_CA_FILE": "/a.pem", "AWS_ACCESS_KEY_ID": "k"}
    assert bucket.with_overrides(env) == env
    assert bucket.with_overrides(env, "https://b", "/b.pem") == {**env, "S3_ENDPOINT": "https://b",
                                                                 "S3_CA_FILE": "/b.pem"}  # fmt: skip
