"""Time an epoch's backup in a bucket adds (--backup-uri; trainer/dtr_trainer/backup_s3.py): the same trainer
run with its backup dir only, and with that dir kept in the bucket too, alternating, for the built-in cnn and a
dense model of 16.8 M parameters (a backup of about 200 MB: weights and Adam's two slots).

    .venv/trainer/bin/python -m bench.s3.backup [--rounds 3] [--epochs 4] [--env-file DIR/s3.env]

One worker process per run (the chief: the one that uploads), the digits. Per run: the steady epoch time from the
trainer's `window` line (epochs after the first), and each upload's seconds and size from its `backup:
generation N to ...` lines. Results: bench/s3/results-backup.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.s3.common import HERE, REPO, server
from tests.support.big_model import BIG_MODEL

WINDOW = re.compile(r"window epochs=(\d+) examples=\d+ wall_s=([\d.]+)")
PUSH = re.compile(r"backup: generation \d+ to \S+, \d+ file\(s\), ([\d.]+) MiB in ([\d.]+) s")


def models(tmp: Path) -> dict[str, list[str]]:
    code = tmp / "dense.py"
    code.write_text(BIG_MODEL)
    return {"cnn": ["--model", "cnn", "--dataset", "digits", "--batch-size-per-worker", "64"],
            "dense-16.8M": ["--code", str(code), "--batch-size-per-worker", "16", "--steps-per-epoch", "4"]}


def one_run(srv, tmp: Path, flags: list[str], epochs: int, bucket: bool, tag: str) -> dict[str, float]:
    root = tmp / tag
    args = [sys.executable, "-m", "dtr_trainer", *flags, "--epochs", str(epochs), "--learning-rate", "0.001",
            "--export-dir", srv.url(f"bench-backup/models/{tag}"), "--backup-dir", str(root / "backup"),
            "--data-dir", str(root / "data"), "--termination-message-path", str(root / "term")]
    if bucket:
        args += ["--backup-uri", srv.url(f"bench-backup/backups/{tag}")]
    env = {**os.environ, "S3_ENDPOINT": srv.endpoint, "AWS_ACCESS_KEY_ID": srv.access_key,
           "AWS_SECRET_ACCESS_KEY": srv.secret_key, "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
           "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("trainer", "contract"))}
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"trainer exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    [(n, wall)] = WINDOW.findall(proc.stderr)
    pushes = [(float(mib), float(s)) for mib, s in PUSH.findall(proc.stderr)]
    epoch_pushes = pushes[1:epochs + 1]  # the claim's record first; the export's record last
    return {"epoch_s": float(wall) / int(n), "push_s": statistics.median(s for _, s in epoch_pushes) if pushes else 0.0,
            "push_mib": max((m for m, _ in epoch_pushes), default=0.0)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--env-file", help="a running server's DIR/s3.env (default: start one)")
    args = p.parse_args()
    results: dict[str, dict] = {}
    with server(args.env_file) as srv, tempfile.TemporaryDirectory() as tmp:
        for name, flags in models(Path(tmp)).items():
            rounds = []
            for r in range(args.rounds):  # alternating: the machine's noise falls on both alike
                local = one_run(srv, Path(tmp), flags, args.epochs, False, f"{name}-{r}-local")
                bucket = one_run(srv, Path(tmp), flags, args.epochs, True, f"{name}-{r}-bucket")
                rounds.append({"local_epoch_s": local["epoch_s"], "bucket_epoch_s": bucket["epoch_s"],
                               "push_s": bucket["push_s"], "push_mib": bucket["push_mib"]})
            med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
            results[name] = {"rounds": rounds, **{f"median_{k}": round(v, 3) for k, v in med.items()},
                             "added_s_per_epoch": round(med["bucket_epoch_s"] - med["local_epoch_s"], 3),
                             "ratio": round(med["bucket_epoch_s"] / med["local_epoch_s"], 3)}  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    meta = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, "cpus": os.cpu_count(),
            "load": round(os.getloadavg()[0], 2), "python": platform.python_version(), "rounds": args.rounds,
            "epochs": args.epochs}
    (HERE / "results-backup.json").write_text(json.dumps({"meta": meta, "models": results}, indent=1) + "\n")
    rows = [f"| {n} | {r['median_push_mib']} | {r['median_local_epoch_s']} | {r['median_bucket_epoch_s']} | "
            f"{r['added_s_per_epoch']} | {r['ratio']} | {r['median_push_s']} |" for n, r in results.items()]
    (HERE / "results-backup.md").write_text(
        "# Epoch backups kept in a bucket: the time they add\n\n"
        f"`python -m bench.s3.backup`, {meta['when']}, `{commit}`, {meta['cpus']} CPUs, load average {meta['load']} "
        f"at the end, SeaweedFS on the same machine over loopback, one trainer process, {args.epochs} epochs, "
        f"{args.rounds} rounds alternating (medians). Epoch time: the trainer's steady window (epochs after the "
        "first), with the backup dir only (local) and kept in the bucket too (bucket, `--backup-uri`).\n\n"
        "| model | backup MiB | local epoch s | bucket epoch s | added s per epoch | ratio | upload s |\n"
        "|---|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n")  # fmt: skip
    print((HERE / "results-backup.md").read_text())


if __name__ == "__main__":
    main()
