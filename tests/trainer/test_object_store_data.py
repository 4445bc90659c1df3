"""An s3:// dataset's pure parts on the trainer's side (docs/object-storage.md): which keys a URI names, each failure of
the preflight's listing as its error and exit code, and how the built-in models' files are split and shared out.
Against a real server: tests/s3/test_s3_dataset.py."""

from __future__ import annotations

import pytest
from dtr_contract import exits
from dtr_contract.objectstore import CERTIFICATE_REJECTED, CONNECTION_FAILED, ObjectInfo, ObjectStoreError
from dtr_trainer import data_s3, preflight, records
from dtr_trainer.errors import DataError

URI, ENDPOINT = "s3://datasets/digits", "http://s3.example:8333"
KEYS = ["digits", "digits/_SUCCESS", "digits/.dtr/x", "digits/eval-0.tfrecord", "digits/sub/", "digits/sub/a.tfrecord",
        "digits/train-0.tfrecord", "digits2/train-0.tfrecord", "other/x"]  # fmt: skip


def _objects(keys=KEYS):
    return [ObjectInfo(k, 1, "e") for k in keys]


@pytest.mark.parametrize(("key", "want"), [
    ("digits", ["digits", "digits/eval-0.tfrecord", "digits/sub/a.tfrecord", "digits/train-0.tfrecord"]),
    ("digits/", ["digits/eval-0.tfrecord", "digits/sub/a.tfrecord", "digits/train-0.tfrecord"]),
    ("digits/train-0.tfrecord", ["digits/train-0.tfrecord"]),
    ("digi", []),  # a prefix is a whole segment
    ("", [k for k in KEYS if k != "digits/sub/" and "_" not in k and ".dtr" not in k]),
])  # fmt: skip
def test_the_keys_a_uri_names(key, want):
    assert preflight.data_keys(_objects(), key) == want


@pytest.mark.parametrize(("code", "status", "exit_code", "words"), [
    ("InvalidAccessKeyId", 403, exits.OBJECT_STORE_KEYS, "refused the keys (InvalidAccessKeyId)"),
    ("SignatureDoesNotMatch", 403, exits.OBJECT_STORE_KEYS, "refused the keys (SignatureDoesNotMatch)"),
    ("AccessDenied", 403, exits.OBJECT_STORE_KEYS, "may list and read the bucket"),
    ("NoSuchBucket", 404, exits.OBJECT_STORE_NO_BUCKET, "the bucket datasets does not exist"),
    (CONNECTION_FAILED, 0, exits.OBJECT_STORE_UNREACHABLE, "does not answer (ConnectionFailed"),
    ("InternalError", 500, exits.OBJECT_STORE_UNREACHABLE, "does not answer"),
    ("HTTP502", 502, exits.OBJECT_STORE_UNREACHABLE, "does not answer"),
    (CERTIFICATE_REJECTED, 0, exits.OBJECT_STORE_REFUSED, "spec.objectStore.caConfigMap"),
    ("AuthorizationHeaderMalformed", 400, exits.OBJECT_STORE_REFUSED, "refused the request"),
])  # fmt: skip
def test_each_listing_failure_is_an_error_naming_its_cause(code, status, exit_code, words):
    err = preflight.failure(ObjectStoreError(code, status, "list", URI, "detail"), URI, ENDPOINT)
    assert err.exit_code == exit_code and words in str(err) and str(err).startswith(f"{URI}: ")
    assert ENDPOINT in str(err)


def test_no_message_holds_a_key_s3_sent_back():
    # S3's own message may quote the access key id: the keys' line is the trainer's words and the code only.
    err = preflight.failure(ObjectStoreError("InvalidAccessKeyId", 403, "list", URI, "AKIAEXAMPLE unknown"), URI,
                            ENDPOINT)  # fmt: skip
    assert "AKIAEXAMPLE" not in str(err)


FILES = [f"{URI}/train-{i:05d}-of-00005.tfrecord" for i in range(5)] + [f"{URI}/eval-00000-of-00001.tfrecord"]


def test_training_and_evaluation_files_by_name():
    train, evaluation = data_s3.splits(list(reversed(FILES)), URI)
    assert train == FILES[:5] and evaluation == FILES[5:]


@pytest.mark.parametrize(("files", "words"), [
    (FILES[:5], "no evaluation shards"), (FILES[5:], "no training shards"),
    ([*FILES, f"{URI}/notes.txt"], "notes.txt is not a TFRecord shard"),
])  # fmt: skip
def test_files_the_built_in_models_cannot_read_are_a_data_error(files, words):
    with pytest.raises(DataError, match=words) as err:
        data_s3.splits(files, URI)
    assert err.value.exit_code == 4


def test_worker_i_reads_every_nth_file_from_its_own_index():
    train = FILES[:5]
    shares = [data_s3.worker_files(list(reversed(train)), i, 2) for i in range(2)]
    assert shares == [[train[0], train[2], train[4]], [train[1], train[3]]]
    assert data_s3.shard_policy(5, 2) == data_s3.FILE and data_s3.shard_policy(5, 5) == data_s3.FILE
    assert data_s3.shard_policy(1, 2) == data_s3.DATA
    assert "reads 2 of 5: train-00001-of-00005.tfrecord, train-00003" in data_s3.describe_share(train, 1, 2)
    assert "shared by data" in data_s3.describe_share(train[:1], 1, 2)


def test_a_record_round_trips_through_the_schema():
    import numpy as np
    import tensorflow as tf

    image = np.random.RandomState(0).uniform(0, 1, records.IMAGE_SHAPE).astype(np.float32)
    x, y = records.parse(tf.constant(records.example(image, 7)))
    assert x.shape == records.IMAGE_SHAPE and np.array_equal(x.numpy(), image) and int(y) == 7 and y.dtype == tf.int32
    assert records.is_eval("s3://b/d/eval-00000-of-00001.tfrecord") and not records.is_eval("s3://b/eval/train.tfr")
