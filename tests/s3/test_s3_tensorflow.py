"""TensorFlow's s3:// file system in the trainer's environment (tensorflow-io 0.31.0), against a real S3 server.

The S3 spike's findings (bench/s3/results.md), held by tests so that the implementation can rely on them and a
change of tensorflow-io or the server shows here:

- `import tensorflow` registers s3:// (Keras imports tensorflow_io when it is installed); S3_ENDPOINT with its
  scheme, the AWS keys and a region are all it needs for a non-AWS endpoint over HTTP (path-style always);
- TFRecords written and read through s3://, listed with tf.io.gfile.glob, shared out by file; a SavedModel and
  BackupAndRestore in the bucket, loaded and resumed from there;
- two real MWMS workers reading one s3:// prefix shared out by file get disjoint files covering it all: held through
  the trainer's own pipeline, tests/s3/test_s3_dataset.py (its spike copy here, three more TensorFlow processes for
  the same check, went 2026-12-07);
- HTTPS with a CA of one's own: S3_CA_FILE, and only it (AWS_CA_BUNDLE and SSL_CERT_FILE are not read);
- a wrong key is silent where it should not be: glob lists nothing and exists() says False, no error; reads
  and writes do fail (PermissionDenied). So the trainer must check keys, bucket and prefix with a client of its own.

Every check runs in a fresh process of the trainer's environment (this module runs in it: `make test-s3-local`, the
CI's s3 tier): the plugin reads its settings once per process. Skipped, saying why, when `weed` was not built
(`make s3-build`); DTR_S3_REQUIRED=1 fails instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest
from dtr_contract import env

from devcluster import controlplane as cp
from devcluster import s3
from support.repo import REPO
from support.s3store import s3_env as store_env
from support.s3store import server_fixture

BUCKET = "trainer"
# The trainer's Python runs these (TensorFlow 2.11 with tensorflow-io); the op environment has neither.
pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 9), reason="runs in the trainer's environment "
                                "(.venv/trainer: make test-s3-local)")


def s3_env(state: s3.State, **extra: str) -> dict[str, str]:
    """The trainer's environment for this server (support.s3store: what tensorflow-io's S3 plugin reads, and a retry
    mode that fails within seconds: its default, 'legacy', ignores AWS_MAX_ATTEMPTS, a refused connection took
    102 s), TensorFlow's C++ logs quiet; no CA unless `extra` names one (these tests ask which variable it reads)."""
    environ = store_env(state, TF_CPP_MIN_LOG_LEVEL="2")
    environ.pop(env.S3_CA_FILE, None)
    return {**environ, **extra}


def run_python(code: str, env: Mapping[str, str], timeout: float = 180) -> dict:
    """Run code in a fresh interpreter of this environment; the JSON object it prints last."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=dict(env), cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


server = server_fixture(BUCKET)


def test_tfrecords_through_s3_listed_and_shared_out_by_file(server: s3.State):
    got = run_python(f"""
        import json, sys
        import tensorflow as tf
        base = "s3://{BUCKET}/records"
        for i in range(4):
            with tf.io.TFRecordWriter(f"{{base}}/shard-{{i}}.tfrecord") as w:
                for j in range(25):
                    w.write(f"{{i}}-{{j}}".encode())
        files = sorted(tf.io.gfile.glob(f"{{base}}/shard-*.tfrecord"))
        shares = [files[w::2] for w in range(2)]
        read = [sorted(r.decode() for r in tf.data.TFRecordDataset(s).as_numpy_iterator()) for s in shares]
        print(json.dumps({{"registered": "tensorflow_io.python.ops" in sys.modules, "files": files,
                          "read": read, "isdir": tf.io.gfile.isdir(base),
                          "exists": tf.io.gfile.exists(files[0]), "size": tf.io.gfile.stat(files[0]).length}}))
    """, s3_env(server))
    assert got["registered"], "import tensorflow no longer imports tensorflow_io (Keras did)"
    assert got["files"] == [f"s3://{BUCKET}/records/shard-{i}.tfrecord" for i in range(4)]
    first, second = (set(r) for r in got["read"])
    assert not first & second and len(first | second) == 100
    assert {r.split("-")[0] for r in first} == {"0", "2"} and {r.split("-")[0] for r in second} == {"1", "3"}
    framing = 16  # per record: its length (8 bytes) and two CRCs (4 each)
    assert got["isdir"] and got["exists"] and got["size"] == sum(framing + len(f"0-{j}") for j in range(25))


def test_a_savedmodel_and_backups_in_the_bucket(server: s3.State):
    got = run_python(f"""
        import contextlib, json
        import numpy as np
        import tensorflow as tf
        from dtr_trainer import export
        from dtr_trainer.models import BUILT_IN
        from dtr_trainer.user import Context

        ctx = Context(worker_index=0, num_workers=1, is_chief=True, batch_size_per_worker=32, global_batch_size=32,
                      data_dir="/nonexistent", seed=1, epochs=3, learning_rate=0.001, dataset=None,
                      input_shape=(28, 28, 1), label_shape=(), num_classes=10)
        rng = np.random.RandomState(0)
        x = rng.uniform(0, 1, (256, 28, 28, 1)).astype(np.float32)
        y = rng.randint(0, 10, 256)

        def model():
            m = BUILT_IN["cnn"](ctx)
            m.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
            return m

        class Stop(tf.keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                if epoch == 1:
                    raise KeyboardInterrupt

        class First(tf.keras.callbacks.Callback):
            seen = []
            def on_epoch_begin(self, epoch, logs=None):
                self.seen.append(epoch)

        backup = "s3://{BUCKET}/backup/run1"
        with contextlib.suppress(KeyboardInterrupt):
            model().fit(x, y, epochs=3, verbose=0,
                        callbacks=[tf.keras.callbacks.BackupAndRestore(backup, delete_checkpoint=False), Stop()])
        first = First()
        trained = model()
        trained.fit(x, y, epochs=3, verbose=0,
                    callbacks=[tf.keras.callbacks.BackupAndRestore(backup, delete_checkpoint=False), first])
        path = "s3://{BUCKET}/models/cnn/1"
        export._save(trained, path, layer_traces=False)
        loaded = tf.saved_model.load(path).signatures["serving_default"](images=tf.constant(x[:8]))
        same = bool(np.allclose(loaded["probabilities"].numpy(), trained.predict(x[:8], verbose=0), atol=1e-6))
        print(json.dumps({{"resumed_at": first.seen[0], "same": same,
                          "saved": sorted(tf.io.gfile.listdir(path)),
                          "backup": sorted(tf.io.gfile.listdir(backup + "/chief"))}}))
    """, s3_env(server))
    assert got["resumed_at"] == 2, "BackupAndRestore in the bucket did not resume after epoch 2"
    assert got["same"]
    assert {"saved_model.pb", "variables", "fingerprint.pb", "keras_metadata.pb"} <= set(got["saved"])
    assert "checkpoint" in got["backup"] and any(f.endswith(".index") for f in got["backup"])


def test_https_takes_its_ca_from_S3_CA_FILE_only(tmp_path: Path, server: s3.State):
    pki = tmp_path / "pki"
    pki.mkdir()
    cp.make_ca(pki, "ca", "dtr-test-ca")
    srv = s3.S3Server(tmp_path / "tls", bucket=BUCKET, tls_ca_dir=pki)
    try:
        state = srv.start()
        code = f"""
            import json, time
            import tensorflow as tf
            t0 = time.monotonic()
            try:
                with tf.io.gfile.GFile("s3://{BUCKET}/hello.txt", "w") as f:
                    f.write("hello")  # uploaded at close (nothing written: no request at all)
                print(json.dumps({{"ok": True}}))
            except tf.errors.OpError as e:
                print(json.dumps({{"ok": False, "error": type(e).__name__, "text": e.message,
                                  "seconds": time.monotonic() - t0}}))
        """
        ca = str(pki / "ca.crt")
        refused = run_python(code, s3_env(state, AWS_CA_BUNDLE=ca, SSL_CERT_FILE=ca, CURL_CA_BUNDLE=ca))
        trusted = run_python(code, s3_env(state, S3_CA_FILE=ca))
    finally:
        srv.stop()
    assert not refused["ok"] and "curlCode: 60" in refused["text"], refused
    assert refused["seconds"] < 30, "the standard retry mode should give up within seconds"
    assert trusted["ok"], trusted


def test_a_wrong_key_is_silent_in_listings_and_loud_in_reads_and_writes(server: s3.State):
    run_python(f"""
        import tensorflow as tf
        with tf.io.TFRecordWriter("s3://{BUCKET}/keys/a.tfrecord") as w:
            w.write(b"x")
        print("{{}}")
    """, s3_env(server))
    got = run_python(f"""
        import json
        import tensorflow as tf

        def error(fn):
            try:
                fn()
                return None
            except tf.errors.OpError as e:
                return type(e).__name__

        def write():
            with tf.io.gfile.GFile("s3://{BUCKET}/keys/b.txt", "w") as f:
                f.write("b")

        print(json.dumps({{
            "glob": tf.io.gfile.glob("s3://{BUCKET}/keys/*"),
            "exists": tf.io.gfile.exists("s3://{BUCKET}/keys/a.tfrecord"),
            "read": error(lambda: list(tf.data.TFRecordDataset("s3://{BUCKET}/keys/a.tfrecord"))),
            "write": error(write),
        }}))
    """, s3_env(server, AWS_SECRET_ACCESS_KEY="not-the-secret-key-of-this-server-at-all"))
    assert got == {"glob": [], "exists": False, "read": "PermissionDeniedError", "write": "PermissionDeniedError"}
