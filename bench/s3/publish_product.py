"""Time to publish a model version to a bucket with the product's code (trainer/dtr_trainer/export_s3.py): the
claim, the publish (upload to staging, server-side copies with saved_model.pb last, the manifest, staging
removed) and a reader's check (dtr_contract.published.verified_manifest), for a small and a large model.

    .venv/trainer/bin/python -m bench.s3.publish_product [--rounds 5] [--env-file DIR/s3.env]

The model directories are SavedModel-shaped files of random bytes of the cnn's and a 20 M-parameter model's sizes
(publishing handles files only; TensorFlow's save is the volume's export, timed in docs/performance.md). Results:
bench/s3/results-publish-product.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from dtr_contract import objectstore, published
from dtr_contract.objectstore import Location
from dtr_trainer import export_s3
from dtr_trainer.lineage import RunIdentity

from bench.s3.common import HERE, server

# name -> (file -> bytes): the cnn as the trainer exports it (424 KB) and a 20 M-parameter model (80 MB)
MODELS = {
    "cnn": {"saved_model.pb": 95_000, "keras_metadata.pb": 12_000, "fingerprint.pb": 56,
            "variables/variables.data-00000-of-00001": 316_000, "variables/variables.index": 1_300,
            "lineage.json": 1_900},
    "20M": {"saved_model.pb": 160_000, "keras_metadata.pb": 14_000, "fingerprint.pb": 56,
            "variables/variables.data-00000-of-00001": 80_060_000, "variables/variables.index": 1_400,
            "lineage.json": 1_900},
}  # fmt: skip


def make_model(root: Path, files: dict[str, int]) -> Path:
    for rel, size in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(os.urandom(size))
    return root


def one_round(store: objectstore.ObjectStore, base: Location, local: Path) -> dict[str, float]:
    run = RunIdentity(name="bench")
    t0 = time.monotonic()
    claim = export_s3.claim_version(base.uri, None, run, store=store)
    t1 = time.monotonic()
    uri = export_s3.publish(store, base, claim, local, run)
    t2 = time.monotonic()
    published.verified_manifest(store, *published.split_version_uri(uri))
    t3 = time.monotonic()
    return {"claim": t1 - t0, "publish": t2 - t1, "check": t3 - t2}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--env-file", help="a running server's DIR/s3.env (default: start one)")
    args = p.parse_args()
    results: dict[str, dict] = {}
    with server(args.env_file) as srv, tempfile.TemporaryDirectory() as tmp:
        store = objectstore.ObjectStore(objectstore.Config(srv.endpoint, srv.access_key, srv.secret_key,
                                                           ca_file=srv.ca))  # fmt: skip
        for name, files in MODELS.items():
            local = make_model(Path(tmp) / name, files)
            base = Location(srv.bucket, f"publish-product/{name}")
            rounds = [one_round(store, base, local) for _ in range(args.rounds)]
            results[name] = {"bytes": sum(files.values()), "files": len(files), "rounds": rounds,
                             **{f"median_{k}_s": round(statistics.median(r[k] for r in rounds), 3)
                                for k in ("claim", "publish", "check")}}  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    meta = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, "cpus": os.cpu_count(),
            "load": round(os.getloadavg()[0], 2), "python": platform.python_version(), "rounds": args.rounds}
    (HERE / "results-publish-product.json").write_text(json.dumps({"meta": meta, "models": results}, indent=1) + "\n")
    rows = [f"| {n} | {r['bytes']} | {r['files']} | {r['median_claim_s']} | {r['median_publish_s']} | "
            f"{r['median_check_s']} |" for n, r in results.items()]
    (HERE / "results-publish-product.md").write_text(
        "# Publishing a model version to a bucket: the product's code\n\n"
        f"`python -m bench.s3.publish_product`, {meta['when']}, `{commit}`, {meta['cpus']} CPUs, load average "
        f"{meta['load']} at the end, SeaweedFS on the same machine, {args.rounds} rounds per model (medians).\n\n"
        "publish: upload to staging, server-side copies into `<base>/<N>/` with saved_model.pb last, the manifest, "
        "the staging objects removed. check: what a reader does before it takes the version.\n\n"
        "| model | bytes | files | claim s | publish s | check s |\n|---|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows) + "\n")  # fmt: skip
    print((HERE / "results-publish-product.md").read_text())


if __name__ == "__main__":
    main()
