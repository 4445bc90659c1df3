"""What streaming TFRecord shards from a bucket adds to a process's memory, against the data's size: the trainer's
own pipeline (dtr_trainer.data_s3.tfrecords, userdata's counting pass, data.make_datasets, one epoch), as
tests/s3/test_s3_dataset.py reads it, over data sets of 8 MB shards from 16 to 128 shards.

    .venv/trainer/bin/python -m bench.s3.stream_rss [--shards 16 32 64 128] [--env-file DIR/s3.env]

Per size, one process writes the shards (2,500 records of the built-in schema each), another reads them: its RSS
once the pipeline gave its first record (TensorFlow, tf.data and the S3 client up) and its peak after the counting
pass and an epoch. What reading adds (peak - before) stays about the same whatever the data's size; a `cache()` in
memory would add the data. The test reads the smallest data set whose size is well above that figure.
Results: bench/s3/results-stream-rss.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import textwrap
import time

from bench.s3.common import HERE, REPO, s3_env, server

PER_SHARD = 2_500
WRITE = """
    import json
    import numpy as np
    import tensorflow as tf
    from dtr_trainer import records
    record = records.example(np.random.RandomState(0).uniform(0, 1, records.IMAGE_SHAPE), 3)
    for i in range({shards}):
        with tf.io.TFRecordWriter(f"{prefix}/{{records.shard_name('train', i, {shards})}}") as w:
            for _ in range({per_shard}):
                w.write(record)
    print(json.dumps({{"record": len(record)}}))
"""
READ = """
    import json, resource
    from dtr_trainer import data, data_s3, userdata
    files = [f"{prefix}/train-{{i:05d}}-of-{shards:05d}.tfrecord" for i in range({shards})]
    stream = data_s3.tfrecords(files, data_s3.shard_policy(len(files), 1))
    for _ in stream.take(1):
        pass
    before = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:")) * 1024
    train = userdata.dataset_split(stream, "train")
    evaluation = userdata.dataset_split(data_s3.tfrecords(files[:1], None).take(10), "eval")
    train_ds, _ = data.make_datasets(userdata.combine(train, evaluation), global_batch=512, seed=1)
    for _ in train_ds.take(train.size // 512):
        pass
    print(json.dumps({{"before": before, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""


def python(code: str, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=1800, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shards", type=int, nargs="+", default=[16, 32, 64, 128])
    p.add_argument("--env-file", help="a running server's DIR/s3.env (default: start one)")
    args = p.parse_args()
    mib = 1 << 20
    rows = []
    with server(args.env_file) as srv:
        env = {**os.environ, **s3_env(srv), "TF_CPP_MIN_LOG_LEVEL": "2",
               "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("trainer", "contract"))}  # fmt: skip
        for shards in args.shards:
            fmt = {"shards": shards, "per_shard": PER_SHARD, "prefix": srv.url(f"stream-{shards}")}
            record = python(WRITE.format(**fmt), env)["record"]
            got = python(READ.format(**fmt), env)
            data = shards * PER_SHARD * (record + 16)  # TFRecord framing: 16 bytes a record
            rows.append({"shards": shards, "data_mib": round(data / mib), "before_mib": round(got["before"] / mib),
                         "peak_mib": round(got["peak"] / mib), "added_mib": round((got["peak"] - got["before"]) / mib),
                         "added_over_data": round((got["peak"] - got["before"]) / data, 2)})  # fmt: skip
            print(rows[-1], flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    meta = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, "cpus": os.cpu_count(),
            "load": round(os.getloadavg()[0], 2), "python": platform.python_version(), "per_shard": PER_SHARD}
    (HERE / "results-stream-rss.json").write_text(json.dumps({"meta": meta, "sizes": rows}, indent=1) + "\n")
    table = [f"| {r['shards']} | {r['data_mib']} | {r['before_mib']} | {r['peak_mib']} | {r['added_mib']} | "
             f"{r['added_over_data']} |" for r in rows]
    (HERE / "results-stream-rss.md").write_text(
        "# Streaming shards from a bucket: the memory it adds against the data's size\n\n"
        f"`python -m bench.s3.stream_rss`, {meta['when']}, `{commit}`, {meta['cpus']} CPUs, load average "
        f"{meta['load']} at the end, SeaweedFS on the same machine over loopback. One reading process per size: the "
        "trainer's pipeline over 8 MB shards, the counting pass and one epoch (the data read twice); RSS once the "
        "pipeline gave its first record (before), the peak after (peak), what reading added (peak - before).\n\n"
        "| shards | data MiB | before MiB | peak MiB | added MiB | added / data |\n"
        "|---:|---:|---:|---:|---:|---:|\n" + "\n".join(table) + "\n")  # fmt: skip
    print((HERE / "results-stream-rss.md").read_text())


if __name__ == "__main__":
    main()
