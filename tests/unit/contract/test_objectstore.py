"""dtr_contract.objectstore's pure parts: SigV4 against AWS's published examples, names and URIs, the
configuration from an environment, error documents, listings, retries. Its requests are tested against a real
S3 server in tests/s3/test_objectstore_server.py."""

from __future__ import annotations

import datetime
import hashlib

import pytest
from dtr_contract import objectstore as o

# The example of AWS's "Signature Calculations for the Authorization Header" (sig-v4-header-based-auth).
AWS_KEY, AWS_SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_HOST = "examplebucket.s3.amazonaws.com"
AWS_NOW = datetime.datetime(2013, 5, 24, tzinfo=datetime.UTC)


def signature(headers: dict) -> str:
    return headers["authorization"].rpartition("Signature=")[2]


def test_sigv4_get_object_matches_the_aws_example():
    signed = o.sign("GET", AWS_HOST, "/test.txt", {}, {"Range": "bytes=0-9"}, hashlib.sha256(b"").hexdigest(),
                    AWS_KEY, AWS_SECRET, AWS_NOW)  # fmt: skip
    assert signed["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    assert signed["x-amz-date"] == "20130524T000000Z" and "host" not in signed


def test_sigv4_put_object_with_a_reserved_character_matches_the_aws_example():
    body = b"Welcome to Amazon S3."
    signed = o.sign("PUT", AWS_HOST, "/test$file.text", {},
                    {"Date": "Fri, 24 May 2013 00:00:00 GMT", "x-amz-storage-class": "REDUCED_REDUNDANCY"},
                    hashlib.sha256(body).hexdigest(), AWS_KEY, AWS_SECRET, AWS_NOW)  # fmt: skip
    assert signature(signed) == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"


def test_sigv4_list_objects_with_a_query_matches_the_aws_example():
    signed = o.sign("GET", AWS_HOST, "/", {"prefix": "J", "max-keys": "2"}, {}, hashlib.sha256(b"").hexdigest(),
                    AWS_KEY, AWS_SECRET, AWS_NOW)  # fmt: skip
    assert signature(signed) == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"


def test_a_different_secret_or_region_signs_differently():
    args = ("GET", "h", "/b/k", {}, {}, hashlib.sha256(b"").hexdigest(), AWS_KEY)
    base = signature(o.sign(*args, AWS_SECRET, AWS_NOW))
    assert signature(o.sign(*args, AWS_SECRET + "x", AWS_NOW)) != base
    assert signature(o.sign(*args, AWS_SECRET, AWS_NOW, region="eu-west-1")) != base


def test_paths_and_queries_are_encoded_as_s3_signs_them():
    assert o.object_path("b") == "/b" and o.object_path("b", "m/1/saved_model.pb") == "/b/m/1/saved_model.pb"
    assert o.encoded_path("/b/a b/ü+$=.pb") == "/b/a%20b/%C3%BC%2B%24%3D.pb"
    assert o.encoded_query({"prefix": "m/1 x", "list-type": "2"}) == "list-type=2&prefix=m%2F1%20x"


def test_s3_uris_split_into_bucket_and_key():
    assert o.parse_uri("s3://models/team/digits/") == o.Location("models", "team/digits")
    assert o.parse_uri("s3://models") == o.Location("models", "")
    loc = o.Location("models", "team/digits")
    assert loc.join("3", "saved_model.pb").uri == "s3://models/team/digits/3/saved_model.pb"
    assert loc.prefix() == "team/digits/" and o.Location("models").prefix() == ""
    assert o.Location("models").join("/a/", "b").key == "a/b"
    for bad in ("/mnt/dtr/models", "s3://", "s3://Bad_Bucket/x", "s3://ab/x", "s3://-ab/x"):
        with pytest.raises(ValueError):
            o.parse_uri(bad)
    assert o.is_s3_uri("s3://b/k") and not o.is_s3_uri("/mnt/dtr/models/m")


ENV = {"S3_ENDPOINT": "http://127.0.0.1:8333/", "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value"}


def test_the_configuration_comes_from_the_environment_with_defaults():
    config = o.config_from_env(ENV)
    assert (config.endpoint, config.access_key, config.secret_key) == ("http://127.0.0.1:8333", "AK", "s3cr3t-value")
    assert (config.region, config.ca_file, config.max_attempts) == ("us-east-1", None, 3)
    full = o.config_from_env({**ENV, "AWS_REGION": "eu-west-1", "S3_CA_FILE": "/ca.crt", "AWS_MAX_ATTEMPTS": "5"})
    assert (full.region, full.ca_file, full.max_attempts) == ("eu-west-1", "/ca.crt", 5)
    assert o.config_from_env({**ENV, "AWS_DEFAULT_REGION": "ap-south-1"}).region == "ap-south-1"
    # Without a scheme, HTTPS: as tensorflow-io's plugin reads S3_ENDPOINT.
    assert o.config_from_env({**ENV, "S3_ENDPOINT": "s3.example.com"}).endpoint == "https://s3.example.com"
    assert "s3cr3t-value" not in repr(config)


@pytest.mark.parametrize("change, says", [
    ({"AWS_SECRET_ACCESS_KEY": ""}, "AWS_SECRET_ACCESS_KEY not set"),
    ({"S3_ENDPOINT": "", "AWS_ACCESS_KEY_ID": ""}, "S3_ENDPOINT, AWS_ACCESS_KEY_ID not set"),
    ({"S3_ENDPOINT": "ftp://h"}, "not http(s)"),
    ({"AWS_MAX_ATTEMPTS": "0"}, "AWS_MAX_ATTEMPTS='0'"),
])  # fmt: skip
def test_a_missing_or_wrong_setting_is_named(change: dict, says: str):
    with pytest.raises(o.ObjectStoreError) as err:
        o.config_from_env({**ENV, **change})
    assert err.value.code == o.INVALID_CONFIG and says in str(err.value) and "s3cr3t" not in str(err.value)


def test_error_documents_give_their_code_and_message():
    body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchBucket</Code>'
            b"<Message>The specified bucket does not exist</Message><BucketName>x</BucketName></Error>")
    assert o.error_code(body) == ("NoSuchBucket", "The specified bucket does not exist")
    assert o.error_code(b"") == ("", "") and o.error_code(b"<html>oops") == ("", "")
    assert o.status_code(403) == "AccessDenied" and o.status_code(418) == "HTTP418"
    err = o.ObjectStoreError("NoSuchBucket", 404, "list 'm/' in", "s3://x")
    assert (err.code, err.status, str(err)) == ("NoSuchBucket", 404, "list 'm/' in s3://x: NoSuchBucket (HTTP 404)")


def test_a_listing_page_gives_its_objects_and_the_next_token():
    ns = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
    page = (f'<ListBucketResult {ns}><IsTruncated>true</IsTruncated><NextContinuationToken>t2'
            f'</NextContinuationToken><Contents><Key>m/1/a</Key><Size>12</Size><ETag>"e1"</ETag>'
            f"<LastModified>2026-12-04T18:00:01.500Z</LastModified></Contents>"
            f"<Contents><Key>m/1/b</Key><Size>0</Size><ETag>e2</ETag></Contents></ListBucketResult>").encode()
    assert o.parse_listing(page) == ([o.ObjectInfo("m/1/a", 12, "e1", 1796407201.5), o.ObjectInfo("m/1/b", 0, "e2")],
                                     "t2")
    assert o.iso_seconds("2026-12-04T18:00:01Z") == 1796407201.0 and o.iso_seconds("soon") == 0.0
    assert o.http_date_seconds("Fri, 04 Dec 2026 18:00:01 GMT") == 1796407201.0 and o.http_date_seconds("") == 0.0
    last = f"<ListBucketResult {ns}><IsTruncated>false</IsTruncated></ListBucketResult>".encode()
    assert o.parse_listing(last) == ([], None)


def test_only_a_servers_trouble_is_retried_with_a_bounded_growing_wait():
    assert o.should_retry(503, "SlowDown") and o.should_retry(500, "") and o.should_retry(400, "RequestTimeout")
    assert not any(o.should_retry(s, c) for s, c in [(403, "AccessDenied"), (404, "NoSuchBucket"),
                                                     (412, "PreconditionFailed"), (400, "BadRequest")])
    waits = [o.backoff_seconds(a, rand=lambda: 1.0) for a in (1, 2, 3, 10)]
    assert waits == [0.2, 0.4, 0.8, 5.0]
    assert o.backoff_seconds(3, rand=lambda: 0.0) == 0.0
