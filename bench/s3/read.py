"""Reading training data from S3 through TensorFlow (tensorflow-io 0.31's s3:// file system) against local disk.

    .venv/trainer/bin/python -m bench.s3.read [--env-file DIR/s3.env] [--shards 32] [--per-shard 10000] [--rounds 3]

The same TFRecord shards (MNIST-sized tf.train.Examples) are written to a local directory and put into the bucket.
Then, in one process and alternating so that the machine's drifting load hits every variant alike:

- input only: the trainer-style pipeline (the files listed with tf.io.gfile.glob, this worker's share of them by
  file, interleaved, batched, parsed, prefetched) drained once per round from disk, from S3 with TFRecordDataset's
  default 256 KiB buffer, and from S3 with an 8 MiB buffer: examples/s, this process's CPU and the server's;
- training: the trainer's cnn fitting the same number of steps on the pipeline from disk and from S3.

In fresh processes (memory is a process's peak RSS, VmHWM): streaming 1x and 3x the shards from S3 (the 3x are
server-side copies), and an .npz and a CSV read through tf.io.gfile.GFile from S3 and from disk.
Results: bench/s3/results-read.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.s3 import common

PREFIX = "read/tfrecords/"
COPIES_PREFIX = "read/copies/"
BUFFER_DEFAULT, BUFFER_LARGE = 256 << 10, 8 << 20
BATCH = 256
TRAIN_BATCH = 64


def shard_name(i: int, n: int) -> str:
    return f"shard-{i:05d}-of-{n:05d}.tfrecord"


def make_data(srv: common.Server, local: Path, shards: int, per_shard: int) -> dict:
    """The shards on disk and in the bucket; their total size."""
    client = srv.client()
    local.mkdir(parents=True, exist_ok=True)
    total = 0
    t0 = time.monotonic()
    for i in range(shards):
        body = common.tfrecord_bytes(common.serialized_examples(per_shard, seed=i))
        (local / shard_name(i, shards)).write_bytes(body)
        reply = client.put(srv.bucket, PREFIX + shard_name(i, shards), body)
        if reply.status != 200:
            raise SystemExit(f"put failed: HTTP {reply.status} {reply.code}")
        total += len(body)
    return {"shards": shards, "examples": shards * per_shard, "bytes": total, "make_seconds": time.monotonic() - t0}


def pipeline(files: list[str], worker: int, workers: int, buffer_size: int, batch: int = BATCH):
    """This worker's share of the files (by file: every workers-th), read interleaved, batched and parsed."""
    import tensorflow as tf

    mine = files[worker::workers]
    ds = tf.data.Dataset.from_tensor_slices(mine)
    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, buffer_size=buffer_size),
                       cycle_length=min(8, len(mine)), num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return ds.batch(batch).map(common.parse_batch, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def list_files(pattern: str) -> tuple[list[str], float]:
    import tensorflow as tf

    t0 = time.monotonic()
    files = sorted(tf.io.gfile.glob(pattern))
    return files, time.monotonic() - t0


def drain(ds) -> int:
    n = 0
    for _, labels in ds:
        n += int(labels.shape[0])
    return n


def one_pass(source: str, pattern: str, buffer_size: int, pid: int | None) -> dict:
    files, glob_s = list_files(pattern)
    c0, s0, t0 = common.cpu_seconds(), common.cpu_seconds(pid), time.monotonic()
    n = drain(pipeline(files, 0, 1, buffer_size))
    wall = time.monotonic() - t0
    return {"source": source, "files": len(files), "examples": n, "glob_seconds": round(glob_s, 3),
            "wall_seconds": round(wall, 3), "examples_per_second": round(n / wall, 1),
            "cpu_seconds": round(common.cpu_seconds() - c0, 2),
            "server_cpu_seconds": round(common.cpu_seconds(pid) - s0, 2) if pid else None}  # fmt: skip


def train_dataset(pattern: str, buffer_size: int):
    import tensorflow as tf

    files, _ = list_files(pattern)
    ds = tf.data.Dataset.from_tensor_slices(files).repeat()
    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, buffer_size=buffer_size), cycle_length=8,
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)  # fmt: skip
    ds = ds.shuffle(10_000, seed=1).batch(TRAIN_BATCH, drop_remainder=True)
    return ds.map(common.parse_batch, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def training(srv: common.Server, local: Path, rounds: int, steps: int) -> list[dict]:
    """The cnn fitting `steps` steps per round on each source, alternating; a first fit per source warms up."""
    model = common.cnn()
    sources = {"disk": str(local / "shard-*"), "s3": srv.url(PREFIX + "shard-*")}
    datasets = {name: iter(train_dataset(p, BUFFER_LARGE if name == "s3" else BUFFER_DEFAULT))
                for name, p in sources.items()}  # fmt: skip
    for name in sources:
        model.fit(datasets[name], steps_per_epoch=20, epochs=1, verbose=0)
    out = []
    for r in range(rounds):
        order = list(sources) if r % 2 == 0 else list(reversed(sources))
        for name in order:
            c0, t0 = common.cpu_seconds(), time.monotonic()
            model.fit(datasets[name], steps_per_epoch=steps, epochs=1, verbose=0)
            wall = time.monotonic() - t0
            out.append({"round": r, "source": name, "steps": steps, "wall_seconds": round(wall, 3),
                        "examples_per_second": round(steps * TRAIN_BATCH / wall, 1),
                        "cpu_seconds": round(common.cpu_seconds() - c0, 2)})  # fmt: skip
            print(f"train round {r} {name}: {out[-1]['examples_per_second']} examples/s", file=sys.stderr)
    return out


# ---------------------------------------------------------------- fresh processes (memory)


def child(argv: list[str]) -> dict:
    """One measurement in this fresh process; its S3 settings come from the parent's environment."""
    import numpy as np
    import tensorflow as tf

    what, where = argv[0], argv[1]
    before = common.memory_mb()
    t0 = time.monotonic()
    if what == "stream":
        pattern = where
        files, _ = list_files(pattern)
        n = drain(pipeline(files, 0, 1, BUFFER_LARGE))
        result = {"files": len(files), "examples": n, "bytes": sum(tf.io.gfile.stat(f).length for f in files)}
    elif what == "npz":
        with tf.io.gfile.GFile(where, "rb") as f, np.load(f) as npz:
            arrays = {k: npz[k] for k in npz.files}
        result = {"bytes": tf.io.gfile.stat(where).length, "array_bytes": sum(a.nbytes for a in arrays.values())}
    elif what == "csv":
        rows, total = 0, 0.0
        with tf.io.gfile.GFile(where, "r") as f:
            next(f)  # the header
            for line in f:
                values = np.array(line.split(","), dtype=np.float32)
                total += float(values[-1])
                rows += 1
        result = {"bytes": tf.io.gfile.stat(where).length, "rows": rows}
    elif what == "csv-chunks":  # the same parsing, the file read 8 MiB at a time instead of line by line
        rows, total, rest, header = 0, 0.0, b"", True
        with tf.io.gfile.GFile(where, "rb") as f:
            while chunk := f.read(BUFFER_LARGE):
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in lines[1:] if header else lines:
                    total += float(np.array(line.split(b","), dtype=np.float32)[-1])
                    rows += 1
                header = False
        result = {"bytes": tf.io.gfile.stat(where).length, "rows": rows}
    else:
        raise SystemExit(f"unknown child {what}")
    after = common.memory_mb()
    return {"what": what, "where": where.split("://")[0] if "://" in where else "disk", **result,
            "seconds": round(time.monotonic() - t0, 2), "rss_before_mb": round(before["VmRSS"], 1),
            "peak_rss_mb": round(after["VmHWM"], 1),
            "peak_minus_before_mb": round(after["VmHWM"] - before["VmRSS"], 1)}  # fmt: skip


def run_child(srv: common.Server, *args: str) -> dict:
    env = {**os.environ, **common.s3_env(srv), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-m", "bench.s3.read", "--child", *args], env=env, cwd=common.REPO,
                          capture_output=True, text=True, timeout=1800)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"child {args[0]} {result['where']}: {result}", file=sys.stderr)
    return result


def files_for_memory(srv: common.Server, local: Path, shards: int) -> tuple[str, str]:
    """3x the shards as server-side copies (CopyObject), and an .npz and a CSV on disk and in the bucket."""
    import numpy as np

    client = srv.client()
    for copy in range(3):
        for i in range(shards):
            name = shard_name(i, shards)
            reply = client.copy(srv.bucket, PREFIX + name, f"{COPIES_PREFIX}{copy}-{name}")
            if reply.status != 200:
                raise SystemExit(f"copy failed: HTTP {reply.status} {reply.code}")
    rng = np.random.RandomState(0)
    npz = local / "data.npz"
    np.savez(npz, x_train=rng.randint(0, 256, size=(120_000, 28, 28), dtype=np.uint8),
             y_train=rng.randint(0, 10, size=120_000))  # fmt: skip
    csv = local / "data.csv"
    table = rng.uniform(0, 1, size=(400_000, 13)).astype(np.float32)
    with open(csv, "w") as f:
        f.write(",".join(f"c{i}" for i in range(13)) + "\n")
        np.savetxt(f, table, delimiter=",", fmt="%.6f")
    for path in (npz, csv):
        reply = client.put(srv.bucket, f"read/{path.name}", path.read_bytes())
        if reply.status != 200:
            raise SystemExit(f"put failed: HTTP {reply.status} {reply.code}")
    return str(npz), str(csv)


def memory(srv: common.Server, local: Path, shards: int) -> list[dict]:
    npz, csv = files_for_memory(srv, local, shards)
    out = [
        run_child(srv, "stream", str(local / "shard-*")),
        run_child(srv, "stream", srv.url(PREFIX + "shard-*")),
        run_child(srv, "stream", srv.url(COPIES_PREFIX + "*")),
    ]
    for what, path in (("npz", npz), ("csv", csv), ("csv-chunks", csv)):
        out.append(run_child(srv, what, path))
        out.append(run_child(srv, what, srv.url(f"read/{Path(path).name}")))
    return out


# ---------------------------------------------------------------- report


def median_by(rows: list[dict], key: str, field: str) -> dict:
    names = dict.fromkeys(r[key] for r in rows)
    return {n: statistics.median(r[field] for r in rows if r[key] == n) for n in names}


def markdown(results: dict) -> str:
    m, d = results["machine"], results["data"]
    passes, train = results["passes"], results["training"]
    rate = median_by(passes, "source", "examples_per_second")
    cpu = median_by(passes, "source", "cpu_seconds")
    glob_s = median_by(passes, "source", "glob_seconds")
    server = {n: statistics.median(r["server_cpu_seconds"] or 0 for r in passes if r["source"] == n) for n in rate}
    lines = [
        "# Reading TFRecords from S3 (tensorflow-io's s3://) against local disk",
        "",
        f"`python -m bench.s3.read`, {m['when']}, `{m['commit']}`, {m['cpus']} CPUs, "
        f"load average {m['load_average'][0]} at the end (another CI run shared the machine), TensorFlow "
        f"{m['tensorflow']}, tensorflow-io {m['tensorflow_io']}, the S3 server (SeaweedFS `weed mini`) on the same "
        f"machine over loopback HTTP.",
        "",
        f"Data: {d['shards']} shards, {d['examples']} examples (28x28 uint8 image + int64 label), "
        f"{d['bytes'] / 1e6:.0f} MB.",
        "",
        f"## Input pipeline only ({results['rounds']} rounds, alternating; medians)",
        "",
        "| source | examples/s | vs disk | pass CPU s (this process) | server CPU s | glob s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n in rate:
        lines.append(f"| {n} | {rate[n]:.0f} | {rate[n] / rate['disk']:.2f} | {cpu[n]:.1f} | "
                     f"{server[n]:.1f} | {glob_s[n]:.3f} |")  # fmt: skip
    trate = median_by(train, "source", "examples_per_second")
    lines += [
        "",
        f"## Training the cnn ({train[0]['steps']} steps of {TRAIN_BATCH} per round, {results['rounds']} rounds, "
        "alternating; medians)",
        "",
        "| source | examples/s | vs disk |",
        "|---|---:|---:|",
        *[f"| {n} | {trate[n]:.0f} | {trate[n] / trate['disk']:.2f} |" for n in trate],
        "",
        "## Memory (fresh process each; peak RSS)",
        "",
        "| read | from | data MB | seconds | RSS before MB | peak RSS MB | peak - before MB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results["memory"]:
        lines.append(f"| {r['what']} | {r['where']} | {r['bytes'] / 1e6:.0f} | {r['seconds']} | {r['rss_before_mb']} | "
                     f"{r['peak_rss_mb']} | {r['peak_minus_before_mb']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    if "--child" in sys.argv:
        print(json.dumps(child(sys.argv[sys.argv.index("--child") + 1:])))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-file", help="a running server's DIR/s3.env (default: start one)")
    p.add_argument("--shards", type=int, default=32)
    p.add_argument("--per-shard", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--train-steps", type=int, default=300)
    args = p.parse_args()
    with common.server(args.env_file) as srv, tempfile.TemporaryDirectory(prefix="dtr-s3-read-") as tmp:
        common.use_s3(srv)
        local = Path(tmp)
        data = make_data(srv, local, args.shards, args.per_shard)
        print(f"data: {data}", file=sys.stderr)
        variants = [("disk", str(local / "shard-*"), BUFFER_DEFAULT),
                    ("s3 (256 KiB buffer)", srv.url(PREFIX + "shard-*"), BUFFER_DEFAULT),
                    ("s3 (8 MiB buffer)", srv.url(PREFIX + "shard-*"), BUFFER_LARGE)]  # fmt: skip
        one_pass(*variants[0][:2], BUFFER_DEFAULT, srv.pid)  # warm-up: tracing, the page cache
        passes = []
        for r in range(args.rounds):
            for name, pattern, buffer_size in variants[r % 3:] + variants[:r % 3]:
                passes.append({"round": r, **one_pass(name, pattern, buffer_size, srv.pid)})
                print(f"pass round {r}: {passes[-1]}", file=sys.stderr)
        train = training(srv, local, args.rounds, args.train_steps)
        mem = memory(srv, local, args.shards)
        results = {"machine": common.machine(), "data": data, "rounds": args.rounds, "passes": passes,
                   "training": train, "memory": mem}  # fmt: skip
        common.write_results("results-read", results, markdown(results))
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
