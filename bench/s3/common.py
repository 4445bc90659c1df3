"""What the S3 spike's benches share: the server, TensorFlow's S3 settings, the records, the cnn, process figures.

The benches run in a Python 3.9 environment with TensorFlow 2.11 and tensorflow-io 0.31.0 (the trainer's pinned
list). Each starts its own S3 server (devcluster/s3.py, `weed` from `make s3-build`) unless --env-file names a
running one's DIR/s3.env. TensorFlow's S3 file system (tensorflow-io's plugin) reads its settings from the
environment once, at its first s3:// call: `s3_env` sets them before TensorFlow is imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.s3.sigv4 import Client

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
IMAGE_SHAPE = (28, 28, 1)
CLASSES = 10


@dataclass(frozen=True)
class Server:
    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    ca: str | None
    pid: int | None  # weed's, when this process started it (its CPU time is read from /proc)

    def client(self) -> Client:
        return Client(self.endpoint, self.access_key, self.secret_key, self.ca)

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"


def read_env_file(path: str) -> dict[str, str]:
    lines = Path(path).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


@contextlib.contextmanager
def server(env_file: str | None, bucket: str = "bench") -> Iterator[Server]:
    """A running server: env_file's (DIR/s3.env of `python -m devcluster.s3 up`), or one started here."""
    if env_file:
        env = read_env_file(env_file)
        yield Server(env["S3_ENDPOINT"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env["S3_BUCKET"],
                     env.get("AWS_CA_BUNDLE"), None)  # fmt: skip
        return
    from devcluster import s3

    with tempfile.TemporaryDirectory(prefix="dtr-s3-bench-") as work:
        srv = s3.S3Server(work, bucket=bucket)
        state = srv.start()
        try:
            yield Server(state.endpoint, state.access_key, state.secret_key, bucket, state.ca, state.pid)
        finally:
            srv.stop()


def s3_env(srv: Server) -> dict[str, str]:
    """What tensorflow-io 0.31's S3 plugin reads (strings of libtensorflow_io_plugins.so, and tried): the endpoint
    with its scheme (http:// or https://; path-style addressing always), the AWS SDK's keys and region, the CA
    for HTTPS (S3_CA_FILE; AWS_CA_BUNDLE, SSL_CERT_FILE and CURL_CA_BUNDLE are not read), and the SDK's
    'standard' retry mode with a bounded number of attempts (its default 'legacy' mode ignores AWS_MAX_ATTEMPTS:
    a refused connection or certificate took 102 s to fail)."""
    env = {
        "S3_ENDPOINT": srv.endpoint,
        "AWS_ACCESS_KEY_ID": srv.access_key,
        "AWS_SECRET_ACCESS_KEY": srv.secret_key,
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_RETRY_MODE": "standard",
        "AWS_MAX_ATTEMPTS": "3",
    }
    if srv.ca:
        env["S3_CA_FILE"] = srv.ca
    return env


def use_s3(srv: Server) -> None:
    """Set the S3 settings in this process (before TensorFlow's first s3:// call) and quieten TensorFlow."""
    os.environ.update(s3_env(srv))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# ---------------------------------------------------------------- records


def serialized_examples(n: int, seed: int) -> list[bytes]:
    """n MNIST-sized tf.train.Examples: `image` 784 raw bytes (28x28 uint8), `label` an int64 0..9."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.RandomState(seed)
    labels = rng.randint(0, CLASSES, size=n)
    prototypes = rng.randint(0, 256, size=(CLASSES, 28 * 28)).astype(np.int16)
    noise = rng.randint(-40, 41, size=(n, 28 * 28)).astype(np.int16)
    images = np.clip(prototypes[labels] + noise, 0, 255).astype(np.uint8)
    out = []
    for image, label in zip(images, labels):
        feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
                   "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}  # fmt: skip
        out.append(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return out


def tfrecord_bytes(records: list[bytes]) -> bytes:
    """The TFRecord framing of records (length, masked CRC32C of the length, data, masked CRC32C of the data),
    written by TensorFlow itself into a temporary file."""
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for record in records:
                writer.write(record)
        return Path(path).read_bytes()


def parse_batch(serialized):
    """A batch of serialized examples -> (images float32 [B,28,28,1] in [0,1], labels int32 [B])."""
    import tensorflow as tf

    features = tf.io.parse_example(serialized, {"image": tf.io.FixedLenFeature([], tf.string),
                                                "label": tf.io.FixedLenFeature([], tf.int64)})  # fmt: skip
    images = tf.io.decode_raw(features["image"], tf.uint8)
    images = tf.cast(tf.reshape(images, (-1, *IMAGE_SHAPE)), tf.float32) / 255.0
    return images, tf.cast(features["label"], tf.int32)


def cnn():
    """The trainer's built-in cnn (dtr_trainer.models) for 28x28x1 images of 10 classes, compiled by its rule."""
    import tensorflow as tf
    from dtr_trainer.models import BUILT_IN
    from dtr_trainer.user import Context

    ctx = Context(worker_index=0, num_workers=1, is_chief=True, batch_size_per_worker=64, global_batch_size=64,
                  data_dir="/nonexistent", seed=42, epochs=1, learning_rate=0.001, dataset=None,
                  input_shape=IMAGE_SHAPE, label_shape=(), num_classes=CLASSES)  # fmt: skip
    tf.random.set_seed(42)
    model = BUILT_IN["cnn"](ctx)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.001), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])  # fmt: skip
    return model


# ---------------------------------------------------------------- process figures


def cpu_seconds(pid: int | None = None) -> float:
    """This process's CPU seconds (all threads), or another's from /proc (0.0 if unknown)."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb() -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of this process, in MB."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {k: int(status[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}


def machine() -> dict:
    import tensorflow as tf

    try:
        import tensorflow_io as tfio

        tfio_version = tfio.__version__
    except ImportError:
        tfio_version = None
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    return {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "python": platform.python_version(),
            "tensorflow": tf.__version__, "tensorflow_io": tfio_version}  # fmt: skip


def write_results(name: str, results: dict, markdown: str) -> None:
    (HERE / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    (HERE / f"{name}.md").write_text(markdown)
