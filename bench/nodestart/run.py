"""What the images' seed (devcluster/imagestore.py) saves a node's start: `python -m devcluster.node up --install`
timed with the seed there, then with no seed (it is made first: the `docker save | ctr import` of both images every
start paid before the seed), in one run, and the ratio.

    python -m bench.nodestart.run [--rounds 1]   (from the repository root; root, `make images node-build`)

Writes bench/nodestart/results.json and results.md. Removes the seed for the "no seed" start, which makes it again.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from devcluster import imagestore
from devcluster.controlplane import default_cache

HERE = Path(__file__).resolve().parent
NODE = [sys.executable, "-m", "devcluster.node"]


def timed_start(workdir: Path) -> float:
    """Seconds for `up --install` in a fresh directory; the node is stopped and purged after."""
    t0 = time.monotonic()
    try:
        subprocess.run([*NODE, "up", "--install", "--dir", str(workdir)], check=True, capture_output=True)
        return round(time.monotonic() - t0, 1)
    finally:
        subprocess.run([*NODE, "down", "--purge", "--dir", str(workdir)], check=False, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, choices=range(1, 6), metavar="N", help="1..5 (default 1)")
    args = parser.parse_args(argv)
    seeds = default_cache() / imagestore.SEEDS
    rows = []
    with tempfile.TemporaryDirectory(prefix="dtr-nodestart-") as tmp:
        timed_start(Path(tmp) / "warm-up")  # makes the seed if there is none, so the first timed start has it
        for i in range(args.rounds):
            seeded = timed_start(Path(tmp) / f"seeded-{i}")
            for old in (d for d in seeds.glob("*") if d.is_dir()):
                shutil.rmtree(old)
            unseeded = timed_start(Path(tmp) / f"unseeded-{i}")
            rows.append({"with seed s": seeded, "seed made first s": unseeded, "ratio": round(seeded / unseeded, 2)})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    doc = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit.stdout.strip(),
           "what": "python -m devcluster.node up --install, fresh directory, then down --purge", "rounds": rows}
    (HERE / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [f"# A node's start with and without the images' seed ({doc['date']}, `{doc['commit']}`)", "",
             f"{doc['what']}; one machine, one run, the two starts one after the other.", "",
             "| round | with the seed (s) | seed made first (s) | ratio |", "|---:|---:|---:|---:|"]
    lines += [f"| {i + 1} | {r['with seed s']} | {r['seed made first s']} | {r['ratio']} |" for i, r in enumerate(rows)]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
