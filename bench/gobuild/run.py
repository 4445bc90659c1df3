"""What devcluster/goenv.sh's GOGC=off and its compilers' -dwarf=false save a cold Go build: etcd (the control plane's
smallest build) built with an empty Go build cache, with goenv.sh as it is, with DTR_GOGC=100 (Go's default), and with
the compilers' DWARF (GOFLAGS=-mod=mod, as before 2026-12-07), alternating, in one run. CPU seconds are the build's
processes' (user + sys, wait4's rusage); the ratios are goenv.sh's against each.

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
BUILD = ('set -e; . "$1"; export CGO_ENABLED=0; if [ -n "$4" ]; then export GOFLAGS="$4"; fi; cd "$2"; '
         'go build -trimpath -ldflags "-s -w" -o "$3" .')
GOENV_AS_IS, DEFAULT_GC, WITH_DWARF = "goenv.sh (GOGC=off, -dwarf=false)", "GOGC=100", "DWARF (GOFLAGS=-mod=mod)"


def cold_build(source: Path, gogc: str | None, goflags: str = "") -> dict[str, float]:
    """One build of `source` with an empty GOCACHE; gogc None and goflags "": goenv.sh's own settings."""
    with tempfile.TemporaryDirectory(prefix="dtr-bench-gobuild.") as tmp:
        env = {**os.environ, "GOCACHE": f"{tmp}/cache"}
        if gogc is not None:
            env["DTR_GOGC"] = gogc
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        subprocess.run(["bash", "-c", BUILD, "build", str(GOENV), str(source), f"{tmp}/out", goflags], env=env,
                       check=True)  # fmt: skip
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
    runs: dict[str, list[dict[str, float]]] = {GOENV_AS_IS: [], DEFAULT_GC: [], WITH_DWARF: []}
    for _ in range(args.rounds):
        runs[DEFAULT_GC].append(cold_build(source, "100"))
        runs[WITH_DWARF].append(cold_build(source, None, "-mod=mod"))
        runs[GOENV_AS_IS].append(cold_build(source, None))
    mean = {k: round(sum(r["cpu seconds"] for r in v) / len(v), 1) for k, v in runs.items()}
    doc = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "cores": os.cpu_count(), "what": "etcd, cold",
           "runs": runs, "mean cpu seconds": mean,
           "cpu ratio off/default": round(mean[GOENV_AS_IS] / mean[DEFAULT_GC], 2),
           "cpu ratio no dwarf/dwarf": round(mean[GOENV_AS_IS] / mean[WITH_DWARF], 2)}  # fmt: skip
    (HERE / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [f"# Cold Go build, devcluster/goenv.sh against Go's default GC and against DWARF ({doc['date']}, "
             f"{doc['cores']} cores)", "", "| setting | CPU s | wall s | largest process MB |", "|---|---:|---:|---:|"]
    for name, rows in runs.items():
        lines += [f"| {name} | {r['cpu seconds']} | {r['wall seconds']} | {r['max rss MB']} |" for r in rows]
    lines += ["", f"CPU, GOGC off / default: **{doc['cpu ratio off/default']}**; without DWARF / with it: "
              f"**{doc['cpu ratio no dwarf/dwarf']}**. The largest-process column is the run's peak so far (the "
              "default's build runs first)."]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
