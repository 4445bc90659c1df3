"""`--dataset s3://...` with real trainer processes against a real S3 server (SeaweedFS, devcluster/s3.py; no mock):
two MWMS workers train the built-in cnn on TFRecord shards in a bucket, each reading its own files; the harness's
pipeline shares the files out by file, which the labels each worker saw prove; wrong keys, an empty prefix, a
missing bucket and an endpoint that does not answer end the run before epoch 1 with their exit code and a line
naming the cause (docs/object-storage.md#when-it-fails).

Runs in the trainer's environment (make test-s3-local, the CI's s3 tier, after the server's build). Skipped, saying
why, when `weed` was not built; DTR_S3_REQUIRED=1 fails instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dtr_contract import exits

from devcluster import s3
from devcluster.controlplane import free_ports
from support.repo import REPO
from support.s3store import put_digits, require_weed, s3_env
from support.trainer import Volume, kill_all, start_workers, tf_config

BUCKET = "datasets"
pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 9), reason="runs in the trainer's environment "
                                "(.venv/trainer: make test-s3-local)")
ARGS = ["--model", "cnn", "--epochs", "3", "--batch-size-per-worker", "32", "--learning-rate", "0.002", "--seed", "7"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3.State]:
    require_weed()
    srv = s3.S3Server(tmp_path_factory.mktemp("s3"), bucket=BUCKET)
    try:
        state = srv.start()
        put_digits(state, f"s3://{BUCKET}/digits")
        yield state
    finally:
        srv.stop()


def _train(tmp_path: Path, state: s3.State, dataset: str, workers: int = 2, **env: str) -> tuple[list[int], list[str]]:
    volume = Volume(tmp_path / "mnt-dtr")
    started = start_workers(volume, free_ports(workers), [*ARGS, "--dataset", dataset, *volume.args()],
                            env_extra=s3_env(state, TF_CPP_MIN_LOG_LEVEL="2", **env))  # fmt: skip
    try:
        codes = [w.wait() for w in started]
    finally:
        kill_all(started)
    return codes, [w.log() for w in started]


def test_two_workers_train_on_tfrecords_in_a_bucket_each_reading_its_own_files(tmp_path: Path, server: s3.State):
    codes, logs = _train(tmp_path, server, f"s3://{BUCKET}/digits")
    assert codes == [0, 0], "\n".join(log[-2000:] for log in logs)
    assert "5 file(s) in the object store" in logs[0]
    assert "this worker reads 2 of 4: train-00000-of-00004.tfrecord, train-00002-of-00004.tfrecord" in logs[0]
    assert "this worker reads 2 of 4: train-00001-of-00004.tfrecord, train-00003-of-00004.tfrecord" in logs[1]
    summary = json.loads(next(line for line in logs[0].splitlines() if line.startswith("{")))
    assert summary["epochs"] == 3 and summary["accuracy"] >= 0.85, summary  # 0.958 here (the digits on disk: ~0.96)
    assert "1438 train / 359 eval examples" in logs[0]  # every shard counted: 1797 digits, 20% held out


# A worker of the harness's own pipeline (data.make_datasets over data_s3.tfrecords, as the trainer builds it) under
# MWMS: the labels it trains on, step by step. Shard i's records all have label i.
WORKER = """
    import json
    import tensorflow as tf
    from dtr_trainer import data, data_s3, userdata
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    files = [f"s3://{bucket}/labelled/train-{{i:05d}}-of-00004.tfrecord" for i in range(4)]
    train = userdata.dataset_split(data_s3.tfrecords(files, data_s3.shard_policy(4, 2)), "train")
    evaluation = userdata.dataset_split(data_s3.tfrecords(files[:1], None), "eval")
    train_ds, _ = data.make_datasets(userdata.combine(train, evaluation), global_batch=8, seed=1)
    seen, sizes = [], []
    iterator = iter(strategy.experimental_distribute_dataset(train_ds))
    for _ in range(40):  # 320 examples: more than the 4 x 25 written, so each worker's files repeat
        batch = next(iterator)
        labels = [int(v) for local in strategy.experimental_local_results(batch[1]) for v in local.numpy()]
        seen += labels
        sizes.append(len(labels))
    cached = b"CacheDataset" in train_ds._as_serialized_graph().numpy()
    print(json.dumps({{"seen": sorted(set(seen)), "sizes": sorted(set(sizes)), "count": len(seen),
                      "size": train.size, "cached": cached}}))
"""


def test_the_harness_shares_training_files_out_by_file_across_two_mwms_workers(server: s3.State):
    write = f"""
        import numpy as np
        import tensorflow as tf
        from dtr_trainer import records
        for i in range(4):  # shard i: 25 images, each labelled i
            with tf.io.TFRecordWriter(f"s3://{BUCKET}/labelled/{{records.shard_name('train', i, 4)}}") as w:
                for _ in range(25):
                    w.write(records.example(np.zeros(records.IMAGE_SHAPE, np.float32), i))
    """
    env = s3_env(server, TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run([sys.executable, "-c", textwrap.dedent(write)], env=env, cwd=REPO, check=True, timeout=180)
    ports = free_ports(2)
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(WORKER.format(bucket=BUCKET))], cwd=REPO,
                              env={**env, "TF_CONFIG": tf_config(ports, i)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for i in range(2)]  # fmt: skip
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(err[-2000:] for _, err in outs)
    got = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert [g["seen"] for g in got] == [[0, 2], [1, 3]], "not shared out by file: worker i reads files[i::2]"
    assert all(g["sizes"] == [4] and g["count"] == 160 for g in got), "each step: global batch 8 / 2 workers"
    assert all(g["size"] == 100 and not g["cached"] for g in got), "counted whole, streamed: never cached in memory"


def test_two_workers_train_their_own_code_on_the_shards(tmp_path: Path, server: s3.State):
    """The documented load_data (examples/own-model/s3/s3_digits_model.py): ctx.dataset is the URI as given."""
    model = REPO / "examples" / "own-model" / "s3" / "s3_digits_model.py"
    volume = Volume(tmp_path / "mnt-dtr")
    args = ["--code", str(model), "--dataset", f"s3://{BUCKET}/digits/", "--epochs", "2", "--batch-size-per-worker",
            "32", *volume.args()]  # fmt: skip
    started = start_workers(volume, free_ports(2), args, env_extra=s3_env(server, TF_CPP_MIN_LOG_LEVEL="2"))
    try:
        codes = [w.wait() for w in started]
    finally:
        kill_all(started)
    logs = [w.log() for w in started]
    assert codes == [0, 0], "\n".join(log[-2000:] for log in logs)
    summary = json.loads(next(line for line in logs[0].splitlines() if line.startswith("{")))
    assert summary["accuracy"] >= 0.7 and "1438 train / 359 eval examples" in logs[0], summary


def test_one_npz_object_trains_as_from_the_volume(tmp_path: Path, server: s3.State):
    write = f"""
        import io
        import numpy as np
        import tensorflow as tf
        from dtr_trainer import data
        d = data.load_arrays("digits", "", 1)
        buffer = io.BytesIO()
        np.savez(buffer, x_train=d.x_train, y_train=d.y_train, x_test=d.x_eval, y_test=d.y_eval)
        with tf.io.gfile.GFile("s3://{BUCKET}/npz/digits.npz", "wb") as f:
            f.write(buffer.getvalue())
    """
    env = s3_env(server, TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run([sys.executable, "-c", textwrap.dedent(write)], env=env, cwd=REPO, check=True, timeout=180)
    codes, logs = _train(tmp_path, server, f"s3://{BUCKET}/npz/digits.npz", workers=1)
    assert codes == [0], logs[0][-2000:]
    assert "1 file(s) in the object store" in logs[0] and "1438 train / 359 eval examples" in logs[0]


def test_https_needs_the_ca_and_a_certificate_not_trusted_is_refused_naming_the_ca(tmp_path: Path):
    from devcluster import controlplane as cp

    pki = tmp_path / "pki"
    pki.mkdir()
    cp.make_ca(pki, "ca", "dtr-test-ca")
    srv = s3.S3Server(tmp_path / "tls", bucket=BUCKET, tls_ca_dir=pki)
    try:
        state = srv.start()
        without = _refused(tmp_path / "a", state, f"s3://{BUCKET}/x", workers=1, S3_CA_FILE="")
        with_ca = _refused(tmp_path / "b", state, f"s3://{BUCKET}/x", workers=1)  # s3_env names state.ca
    finally:
        srv.stop()
    assert without[0] == [exits.OBJECT_STORE_REFUSED], without[1][0][-1500:]
    assert "refused the request (CertificateRejected" in without[1][0] and "caConfigMap" in without[1][0]
    # With the CA the listing succeeds, and finds nothing at that prefix: the check got past TLS.
    assert with_ca[0] == [exits.OBJECT_STORE_NO_DATA], with_ca[1][0][-1500:]


def _refused(tmp_path: Path, server: s3.State, dataset: str, **env: str) -> tuple[list[int], list[str], float]:
    start = time.monotonic()
    codes, logs = _train(tmp_path, server, dataset, **env)
    return codes, logs, time.monotonic() - start


@pytest.mark.parametrize(("what", "dataset", "env", "code", "words"), [
    ("wrong-secret", f"s3://{BUCKET}/digits", {"AWS_SECRET_ACCESS_KEY": "not-the-key"}, exits.OBJECT_STORE_KEYS,
     "refused the keys (SignatureDoesNotMatch)"),
    ("unknown-key-id", f"s3://{BUCKET}/digits", {"AWS_ACCESS_KEY_ID": "NOSUCHKEY"}, exits.OBJECT_STORE_KEYS,
     "refused the keys (InvalidAccessKeyId)"),
    ("empty-prefix", f"s3://{BUCKET}/nothing-here/", {}, exits.OBJECT_STORE_NO_DATA,
     "no object at this key or under this prefix"),
    ("no-bucket", "s3://no-such-bucket/digits", {}, exits.OBJECT_STORE_NO_BUCKET,
     "the bucket no-such-bucket does not exist"),
])  # fmt: skip
def test_a_store_that_refuses_ends_both_workers_before_epoch_1_naming_the_cause(
        tmp_path: Path, server: s3.State, what: str, dataset: str, env: dict, code: int, words: str):  # fmt: skip
    codes, logs, _ = _refused(tmp_path, server, dataset, **env)
    assert codes == [code, code], "\n".join(log[-1500:] for log in logs)
    for log in logs:
        assert f"error: {dataset}: " in log and words in log and "epoch 1/" not in log, log[-1500:]
        assert server.secret_key not in log and "not-the-key" not in log


def test_an_endpoint_that_does_not_answer_is_retryable_and_fails_within_seconds(tmp_path: Path, server: s3.State):
    [closed] = free_ports(1)
    codes, logs, seconds = _refused(tmp_path, server, f"s3://{BUCKET}/digits", workers=1,
                                    S3_ENDPOINT=f"http://127.0.0.1:{closed}")  # fmt: skip
    assert codes == [exits.OBJECT_STORE_UNREACHABLE] and exits.is_retryable(codes[0]), logs[0][-1500:]
    assert "does not answer (ConnectionFailed" in logs[0] and "epoch 1/" not in logs[0]
    assert seconds < 60, "bounded tries (AWS_MAX_ATTEMPTS) with back-off, not the plugin's 100 s"


STREAM_WRITE = """
    import json, os
    import numpy as np
    import tensorflow as tf
    from dtr_trainer import records
    record = records.example(np.random.RandomState(0).uniform(0, 1, records.IMAGE_SHAPE), 3)
    per_shard = {per_shard}
    for i in range({shards}):  # each shard staged whole in /tmp by the plugin, then uploaded at close
        with tf.io.TFRecordWriter(f"s3://{bucket}/big/{{records.shard_name('train', i, {shards})}}") as w:
            for _ in range(per_shard):
                w.write(record)
    print(json.dumps({{"record": len(record)}}))
"""
STREAM_READ = """
    import json, resource
    from dtr_trainer import data, data_s3, userdata
    files = [f"s3://{bucket}/big/train-{{i:05d}}-of-{shards:05d}.tfrecord" for i in range({shards})]
    stream = data_s3.tfrecords(files, data_s3.shard_policy(len(files), 1))
    for _ in stream.take(1):  # TensorFlow, the pipeline and the S3 client up: what reading more adds is the data's
        pass
    before = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:")) * 1024
    train = userdata.dataset_split(stream, "train")
    evaluation = userdata.dataset_split(data_s3.tfrecords(files[:1], None).take(10), "eval")
    train_ds, _ = data.make_datasets(userdata.combine(train, evaluation), global_batch=512, seed=1)
    steps = 0
    for _ in train_ds.take(train.size // 512):  # one whole epoch, after the counting pass: the data read twice
        steps += 1
    print(json.dumps({{"size": train.size, "steps": steps, "before": before,
                      "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""


# Small shards, as the spike's (8 MB): with 150 MB shards the same reads peaked at 1.85 GB for 1.2 GB of data (0.57 GB
# from local disk), whatever S3_DISABLE_MULTI_PART_DOWNLOAD, the chunk size, a tf.data RAM budget or glibc's arenas
# said: tensorflow-io's reads hold memory per open file in proportion to its size (docs/object-storage.md#memory).
def test_a_dataset_larger_than_the_workers_peak_memory_is_streamed(server: s3.State):
    """The honest bound without a memory limit: reading the data whole, twice (the counting pass and an epoch), adds
    less to the reading process's peak RSS than the data's size, so it never held them; a cache() in memory would
    have. Measured from the RSS once the pipeline gave its first record (TensorFlow, tf.data, the S3 client: about
    370 MB here); what reading adds is the pipeline's buffers, about 255 MiB whether the data are 243 MiB or 974
    (bench/s3/results-stream-rss.md), so the data are twice that, and no more (the test's cost is the data's: 1.0 GB
    took 110 CPU s)."""
    shards, per_shard = 64, 2_500  # 160,000 records of the built-in schema in 8 MB shards: about 490 MB
    env = s3_env(server, TF_CPP_MIN_LOG_LEVEL="2")
    fmt = {"bucket": BUCKET, "shards": shards, "per_shard": per_shard}
    wrote = subprocess.run([sys.executable, "-c", textwrap.dedent(STREAM_WRITE.format(**fmt))], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr[-2000:]
    read = subprocess.run([sys.executable, "-c", textwrap.dedent(STREAM_READ.format(**fmt))], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert read.returncode == 0, read.stderr[-2000:]
    got = json.loads(read.stdout.strip().splitlines()[-1])
    data_bytes = shards * per_shard * (json.loads(wrote.stdout.strip().splitlines()[-1])["record"] + 16)
    assert got["size"] == shards * per_shard and got["steps"] == got["size"] // 512
    added = got["max_rss"] - got["before"]
    assert added < data_bytes, f"reading added {added >> 20} MiB to the peak RSS, data {data_bytes >> 20} MiB"
    print(f"peak RSS {got['max_rss'] >> 20} MiB, {added >> 20} MiB over its {got['before'] >> 20} MiB before the "
          f"data, while streaming {data_bytes >> 20} MiB twice")
