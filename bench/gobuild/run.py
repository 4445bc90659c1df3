"""What devcluster/goenv.sh's GOGC=off saves a cold Go build: etcd (the control plane's smallest build) built with an
empty Go build cache, once with goenv.sh as it is and once with DTR_GOGC=100 (Go's default), alternating, in one run.
CPU seconds are the build's processes' (user + sys, wait4's rusage); the ratio is off / default.

    python -m bench.gobuild.run [--rounds 1]   (from the repository root; after `make cluster-build`)

Writes bench/gobuild/results.json and results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from devcluster.controlplane import default_cache

HERE = Path(__file__).resolve().parent
GOENV = HERE.parents[1] / "devcluster" / "goenv.sh"
BUILD = 'set -e; . "$1"; export CGO_ENABLED=0; cd "$2"; go build -trimpath -ldflags "-s -w" -o "$3" .'


def cold_build(source: Path, gogc: str | None) -> dict[str, float]:
    """One build of `source` with an empty GOCACHE; gogc None: goenv.sh's own setting."""
    with tempfile.TemporaryDirectory(prefix="dtr-bench-gobuild.") as tmp:
        env = {**os.environ, "GOCACHE": f"{tmp}/cache"}
        if gogc is not None:
            env["DTR_GOGC"] = gogc
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        subprocess.run(["bash", "-c", BUILD, "build", str(GOENV), str(source), f"{tmp}/out"], env=env, check=True)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # ru_maxrss of the children is the largest any of them has reached so far in this process, in KiB
    return {"cpu seconds": round(cpu, 1), "wall seconds": round(wall, 1), "max rss MB": round(after.ru_maxrss / 1024)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    source = default_cache() / "build" / "etcd"
    if not (source / "main.go").exists():
        print(f"bench.gobuild: no etcd source at {source}: run `make cluster-build` first", file=sys.stderr)
        return 2
    runs: dict[str, list[dict[str, float]]] = {"goenv.sh (GOGC=off)": [], "GOGC=100": []}
    for _ in range(args.rounds):
        runs["GOGC=100"].append(cold_build(source, "100"))
        runs["goenv.sh (GOGC=off)"].append(cold_build(source, None))
    mean = {k: round(sum(r["cpu seconds"] for r in v) / len(v), 1) for k, v in runs.items()}
    doc = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "cores": os.cpu_count(), "what": "etcd, cold",
           "runs": runs, "mean cpu seconds": mean,
           "cpu ratio off/default": round(mean["goenv.sh (GOGC=off)"] / mean["GOGC=100"], 2)}  # fmt: skip
    (HERE / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [f"# Cold Go build, GOGC=off (devcluster/goenv.sh) against Go's default ({doc['date']}, "
             f"{doc['cores']} cores)", "", "| setting | CPU s | wall s | largest process MB |", "|---|---:|---:|---:|"]
    for name, rows in runs.items():
        lines += [f"| {name} | {r['cpu seconds']} | {r['wall seconds']} | {r['max rss MB']} |" for r in rows]
    lines += ["", f"CPU, off / default: **{doc['cpu ratio off/default']}**. The largest-process column is the run's "
              "peak so far (the default's build runs first)."]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
