"""The trainer itself (`python -m dtr_trainer`) reading TFRecord shards from S3 against local disk (issue 40 item 6).

    .venv/trainer/bin/python -m bench.s3.read_product [--env-file DIR/s3.env] [--shards 24] [--rounds 4]
        [--limit-mb 1024] [--skip-memory] [--results NAME]

The same TFRecord shards of the built-in schema (dtr_trainer.records: 784 floats and a label, about 8 MB a shard,
synthesized here) go to a local directory and into the bucket (its own server unless --env-file). Then, alternating
so that the machine's drifting load hits every variant alike, 2 trainer worker processes (TF_CONFIG on loopback, as
tests/s3/test_s3_dataset.py runs them) train the built-in cnn, 4 epochs, and the chief's summary line gives
examples/s (steady state: the first epoch left out), from:

- s3: `--model cnn --dataset s3://bucket/prefix/`, the store's settings in the environment (the product's path:
  preflight listing, data_s3.py's pipeline, by file, streamed);
- disk-npz: `--model cnn --dataset bench.npz --data-dir DIR`, the same examples as a .npz on the volume: for the
  built-in models the trainer accepts no local TFRecord dataset, only a built-in name or a .npz (read whole, cached);
- disk-tfrecord: `--code FILE --dataset DIR`, the same shards on disk through the same reader (a load_data of the
  run's own that returns data_s3.tfrecords over the local files, by file; build_model the built-in cnn).

Memory, in fresh single-worker processes (peak RSS from wait4's ru_maxrss): one worker in a cgroup v1 memory group
limited to --limit-mb (root; without one, its peak RSS is only compared with the limit) streaming 3x that much from
the bucket (server-side copies of the shards); and the same 512 MB as 8 MB and as 64 MB shards, no limit.
Results: bench/s3/results-read-product.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.s3 import common

TRAIN, BIG = "product/train/", "product/big/"
PER_SHARD = 2500  # ~8 MB of the schema's records (784 float32 + a label: ~3.2 kB each)
EVAL_EXAMPLES = 2000
CGROUP = Path("/sys/fs/cgroup/memory")
EPOCHS = 4
ARGS = ["--model", "cnn", "--epochs", str(EPOCHS), "--seed", "7"]
OWN_CODE = '''
import tensorflow as tf
from dtr_trainer import data_s3, records
from dtr_trainer.models import BUILT_IN


def load_data(ctx):
    files = sorted(tf.io.gfile.glob(ctx.dataset.rstrip("/") + "/*.tfrecord"))
    train = [f for f in files if not records.is_eval(f)]
    return (data_s3.tfrecords(train, data_s3.shard_policy(len(train), ctx.num_workers)),
            data_s3.tfrecords([f for f in files if records.is_eval(f)], None))


def build_model(ctx):
    return BUILT_IN["cnn"](ctx)
'''


def images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n learnable 28x28 uint8 images (a prototype per class plus noise) and their labels."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, common.CLASSES, size=n)
    prototypes = rng.randint(0, 256, size=(common.CLASSES, 28, 28, 1)).astype(np.int16)
    noise = rng.randint(-60, 61, size=(n, 28, 28, 1)).astype(np.int16)
    return np.clip(prototypes[labels] + noise, 0, 255).astype(np.uint8), labels


def make_data(srv: common.Server, local: Path, shards: int) -> dict:
    """The shards (records.write, the product's writer) on disk and in the bucket, and the same examples as .npz."""
    from dtr_trainer import records

    t0 = time.monotonic()
    x, y = images(shards * PER_SHARD + EVAL_EXAMPLES, seed=1)
    unit = x.astype(np.float32) / 255.0
    n = shards * PER_SHARD
    shard_dir = local / "shards"
    shard_dir.mkdir()
    records.write(unit[:n], y[:n], str(shard_dir), "train", shards)
    records.write(unit[n:], y[n:], str(shard_dir), records.EVAL_PREFIX, 1)
    np.savez(local / "data" / "bench.npz", x_train=x[:n], y_train=y[:n], x_test=x[n:], y_test=y[n:])
    client, total, train_bytes = srv.client(), 0, 0
    for path in sorted(shard_dir.iterdir()):
        body = path.read_bytes()
        total += len(body)
        train_bytes += 0 if records.is_eval(path.name) else len(body)
        if (reply := client.put(srv.bucket, TRAIN + path.name, body)).status != 200:
            raise SystemExit(f"put failed: HTTP {reply.status} {reply.code}")
    return {"shards": shards, "train_examples": n, "eval_examples": EVAL_EXAMPLES, "bytes": total,
            "train_bytes": train_bytes, "npz_bytes": (local / "data" / "bench.npz").stat().st_size,
            "make_seconds": round(time.monotonic() - t0, 1)}  # fmt: skip


# ---------------------------------------------------------------- trainer processes


def trainer_env(srv: common.Server, tmp: Path, tf_config: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_", "TF_CONFIG"))}
    return {**env, **common.s3_env(srv), "TF_CONFIG": tf_config, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2", "no_proxy": "localhost,127.0.0.1", "NO_PROXY": "localhost,127.0.0.1"}


def free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def into_cgroup(group: Path | None):
    return None if group is None else lambda: (group / "cgroup.procs").write_text(str(os.getpid()))


class Sampler(threading.Thread):
    """The peaks of a process's VmHWM, RssAnon (its own memory) and RssFile (mapped files: TensorFlow's libraries,
    charged to the cgroup that first read them) from /proc, every 0.2 s until it exits."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peaks = pid, {"VmHWM": 0, "RssAnon": 0, "RssFile": 0}

    def run(self) -> None:
        while True:
            try:
                text = Path(f"/proc/{self.pid}/status").read_text()
            except OSError:
                return
            fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
            if "RssAnon" not in fields:  # a zombie: exited
                return
            for k in self.peaks:
                self.peaks[k] = max(self.peaks[k], int(fields[k].split()[0]) // 1024)
            time.sleep(0.2)


def run_trainer(srv: common.Server, work: Path, args: list[str], workers: int, group: Path | None = None) -> dict:
    """`workers` trainer processes (worker 0 in the cgroup, if any); the chief's figures and each one's peak RSS."""
    work.mkdir(parents=True)
    ports, procs, logs = free_ports(workers), [], []
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    t0, load = time.monotonic(), os.getloadavg()[0]
    for i in range(workers):
        (work / f"tmp{i}").mkdir()
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        cmd = [sys.executable, "-m", "dtr_trainer", *args, "--export-dir", str(work / "models"),
               "--backup-dir", str(work / "backup"), "--termination-message-path", str(work / f"term{i}")]
        logs.append(work / f"worker{i}.log")
        with open(logs[-1], "w") as out:
            procs.append(subprocess.Popen(cmd, env=trainer_env(srv, work / f"tmp{i}", tf_config), cwd=common.REPO,
                                          stdout=out, stderr=subprocess.STDOUT,
                                          preexec_fn=into_cgroup(group) if i == 0 else None))  # fmt: skip
    sampler = Sampler(procs[0].pid)
    sampler.start()
    codes, rss = [], []
    for p in procs:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        codes.append(p.returncode)
        rss.append(round(usage.ru_maxrss / 1024, 1))
    text = logs[0].read_text(errors="replace")
    if codes != [0] * workers:
        raise SystemExit(f"trainer exited {codes}:\n" + "\n".join(log.read_text()[-2500:] for log in logs))
    summary = json.loads(next(line for line in text.splitlines() if line.startswith("{")))
    epochs = [float(w.split("=")[1]) for line in text.splitlines() if " end " in line and "epoch " in line
              for w in line.split() if w.startswith("examples_per_second=")]  # fmt: skip
    return {"examples_per_second": summary["examplesPerSecond"], "accuracy": summary.get("accuracy"),
            "epoch_rates": epochs, "wall_seconds": round(time.monotonic() - t0, 1), "peak_rss_mb": rss,
            "worker0_peaks_mb": sampler.peaks,
            "load_before": round(load, 2), "share": [line.split(": ", 1)[-1][:120] for line in text.splitlines()
                                                     if "training files shared" in line][:1]}  # fmt: skip


def variants(srv: common.Server, local: Path) -> dict[str, list[str]]:
    code = local / "own_tfrecords.py"
    code.write_text(OWN_CODE)
    data_dir = ["--data-dir", str(local / "data")]
    return {"s3": [*ARGS, "--dataset", srv.url(TRAIN), *data_dir],
            "disk-npz": [*ARGS, "--dataset", "bench.npz", *data_dir],
            "disk-tfrecord": [*ARGS[2:], "--code", str(code), "--dataset", str(local / "shards"), *data_dir]}


def compare(srv: common.Server, local: Path, rounds: int) -> list[dict]:
    runs, names = [], variants(srv, local)
    order = list(names)
    for r in range(rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:
            result = run_trainer(srv, local / "runs" / f"{r}-{name}", names[name], workers=2)
            runs.append({"round": r, "source": name, **result})
            print(f"round {r} {name}: {result['examples_per_second']} examples/s", file=sys.stderr)
    return runs


# ---------------------------------------------------------------- memory


def copies(srv: common.Server, prefix: str, times: int) -> int:
    """times server-side copies of the training shards under prefix, and the evaluation shard; their bytes."""
    client, total = srv.client(), 0
    listed = [o for o in client.list(srv.bucket, TRAIN)]
    for obj in listed:
        name = obj.key.rsplit("/", 1)[-1]
        targets = [name] if name.startswith("eval") else [f"c{c:03d}-{name}" for c in range(times)]
        for target in targets:
            if (reply := client.copy(srv.bucket, obj.key, prefix + target)).status != 200:
                raise SystemExit(f"copy failed: HTTP {reply.status} {reply.code}")
            total += obj.size
    return total


def big_shards(srv: common.Server, local: Path, prefix: str, per: int, count: int) -> int:
    """count shards of `per` local training shards each (TFRecord files concatenate), and the evaluation shard."""
    client, total = srv.client(), 0
    train = sorted((local / "shards").glob("train-*"))
    bodies = [b"".join(train[(i * per + j) % len(train)].read_bytes() for j in range(per)) for i in range(count)]
    bodies.append((local / "shards" / "eval-00000-of-00001.tfrecord").read_bytes())
    for i, body in enumerate(bodies):
        name = "eval-00000-of-00001.tfrecord" if i == count else f"train-{i:05d}-of-{count:05d}.tfrecord"
        if (reply := client.put(srv.bucket, prefix + name, body)).status != 200:
            raise SystemExit(f"put failed: HTTP {reply.status} {reply.code}")
        total += len(body)
    return total


def cgroup(limit_mb: int) -> Path | None:
    group = CGROUP / f"dtr-bench-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit_mb << 20))
    except OSError as err:
        print(f"no cgroup ({err}): peak RSS only", file=sys.stderr)
        return None
    return group


def cgroup_figures(group: Path) -> dict:
    read = lambda name: (group / name).read_text()  # noqa: E731
    oom = dict(line.split() for line in read("memory.oom_control").splitlines())
    return {"cgroup_limit_mb": int(read("memory.limit_in_bytes")) >> 20,
            "cgroup_max_usage_mb": round(int(read("memory.max_usage_in_bytes")) / 2**20, 1),
            "cgroup_failcnt": int(read("memory.failcnt")), "oom_kills": int(oom.get("oom_kill", 0))}  # fmt: skip


def memory(srv: common.Server, local: Path, limit_mb: int, train_bytes: int) -> list[dict]:
    one = ["--model", "cnn", "--epochs", "1", "--batch-size-per-worker", "256", "--data-dir", str(local / "data")]
    times = -(-3 * (limit_mb << 20) // train_bytes)  # copies of the training shards for 3x the limit
    out = []
    data_bytes = copies(srv, BIG, times)
    group = cgroup(limit_mb)
    try:
        r = run_trainer(srv, local / "runs" / "limit", [*one, "--dataset", srv.url(BIG)], 1, group)
        out.append({"what": f"3x the limit, {limit_mb} MB", "shard_mb": 8, "data_mb": data_bytes >> 20,
                    "limit_mb": limit_mb, **r, **(cgroup_figures(group) if group else {})})  # fmt: skip
    finally:
        if group:
            group.rmdir()
    for mb, per in ((8, 1), (64, 8)):
        prefix = f"product/shards-{mb}mb/"
        data_bytes = big_shards(srv, local, prefix, per, 512 // mb)
        r = run_trainer(srv, local / "runs" / f"shards-{mb}", [*one, "--dataset", srv.url(prefix)], 1)
        out.append({"what": f"{mb} MB shards", "shard_mb": mb, "data_mb": data_bytes >> 20, "limit_mb": None, **r})
    for r in out:
        print(f"memory {r['what']}: peak RSS {r['peak_rss_mb']} MB", file=sys.stderr)
    return out


# ---------------------------------------------------------------- report


def markdown(results: dict) -> str:
    m, d, runs = results["machine"], results["data"], results["runs"]
    rate = {n: statistics.median(r["examples_per_second"] for r in runs if r["source"] == n)
            for n in dict.fromkeys(r["source"] for r in runs)}  # fmt: skip
    loads = [r["load_before"] for r in runs]
    lines = [
        "# The trainer reading TFRecords from S3 against local disk (`python -m bench.s3.read_product`)",
        "",
        f"{m['when']}, `{m['commit']}`, {m['cpus']} CPUs, load average {min(loads)}-{max(loads)} before the runs, "
        f"{m['load_average'][0]} at the end; TensorFlow {m['tensorflow']}, tensorflow-io {m['tensorflow_io']}; "
        "the S3 server (SeaweedFS `weed mini`, devcluster/s3.py) on the same machine over loopback HTTP.",
        "",
        f"Data: {d['shards']} training shards of {PER_SHARD} examples and 1 evaluation shard of {d['eval_examples']} "
        f"(the built-in schema, dtr_trainer.records), {d['bytes'] / 1e6:.0f} MB; the .npz of the same examples "
        f"(uint8) {d['npz_bytes'] / 1e6:.0f} MB.",
        "",
        f"## 2 trainer workers, the built-in cnn, {EPOCHS} epochs, batch 64 per worker ({results['rounds']} rounds, "
        "alternating; the chief's summary examples/s, medians)",
        "",
        "| source | how the trainer reads it | examples/s | vs s3 | s3 / it | rounds |",
        "|---|---|---:|---:|---:|---|",
    ]
    how = {"s3": "`--dataset s3://...`: streamed, by file", "disk-npz": "`--dataset bench.npz`: whole, cached",
           "disk-tfrecord": "`--code` load_data: data_s3.tfrecords on local files, by file"}
    for n, v in rate.items():
        each = ", ".join(f"{r['examples_per_second']:.0f}" for r in runs if r["source"] == n)
        lines.append(f"| {n} | {how[n]} | {v:.0f} | {v / rate['s3']:.2f} | {rate['s3'] / v:.2f} | {each} |")
    per_round = {n: [round(a["examples_per_second"] / b["examples_per_second"], 2) for a in runs for b in runs
                     if a["round"] == b["round"] and a["source"] == "s3" and b["source"] == n]
                 for n in rate if n != "s3"}  # fmt: skip
    lines += ["", "s3 / disk in each round: " + "; ".join(f"{n} {v}" for n, v in per_round.items()) + "."]
    if results.get("memory"):
        lines += ["", "## Memory (1 worker, 1 epoch, batch 256; peak RSS from wait4, its parts sampled from /proc)", "",
                  "| run | shards | data MB | limit MB | peak RSS MB | peak anonymous MB | peak mapped files MB | "
                  "cgroup max usage MB | OOM kills | examples/s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for r in results["memory"]:
            peaks = r["worker0_peaks_mb"]
            lines.append(f"| {r['what']} | {r['shard_mb']} MB | {r['data_mb']} | {r['limit_mb'] or '-'} | "
                         f"{r['peak_rss_mb'][0]:.0f} | {peaks['RssAnon']} | {peaks['RssFile']} | "
                         f"{r.get('cgroup_max_usage_mb', '-')} | {r.get('oom_kills', '-')} | "
                         f"{r['examples_per_second']:.0f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-file", help="a running server's DIR/s3.env (default: start one)")
    p.add_argument("--shards", type=int, default=24)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--limit-mb", type=int, default=1024)
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--results", default="results-read-product", help="the results files' name (a repeat's own)")
    args = p.parse_args()
    with common.server(args.env_file) as srv, tempfile.TemporaryDirectory(prefix="dtr-s3-product-") as tmp:
        common.use_s3(srv)
        local = Path(tmp)
        (local / "data").mkdir()
        data = make_data(srv, local, args.shards)
        print(f"data: {data}", file=sys.stderr)
        runs = compare(srv, local, args.rounds)
        mem = [] if args.skip_memory else memory(srv, local, args.limit_mb, data["train_bytes"])
        results = {"machine": common.machine(), "data": data, "rounds": args.rounds, "runs": runs, "memory": mem}
        common.write_results(args.results, results, markdown(results))
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
