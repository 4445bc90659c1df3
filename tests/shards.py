"""One tier's tests as several pytest sessions at once: `python tests/shards.py ARGS [-- ARGS ...]`.

For a tier that mostly waits on clocks (the integration tier, a control plane of its own per session: 647 s alone
here as one session, 325 s as two, 292 CPU seconds), two sessions side by side take about half its time. Each
shard's output is printed whole, in order, once it has ended; the exit code is the first failed shard's, else 0.
Under tests/tiers.py (DTR_TIMINGS and DTR_TIER set) each shard records its timings as DTR_TIER-<n>
(tests/plugins/tier_timings.py), merged at the end into the one file of DTR_TIER that the run's table reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from plugins.tier_timings import SLOWEST


def split_args(argv: list[str]) -> list[list[str]]:
    """`A B -- C D` -> [[A, B], [C, D]]; an empty shard is an error."""
    shards: list[list[str]] = [[]]
    for arg in argv:
        if arg == "--":
            shards.append([])
        else:
            shards[-1].append(arg)
    if any(not shard for shard in shards):
        raise SystemExit("shards.py: every shard needs pytest arguments (ARGS [-- ARGS ...])")
    return shards


def merge_timings(tier: str, parts: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """The shards' timings documents as one: outcomes, modules (their seconds and CPU) and shared starts added up,
    the slowest and the hungriest tests of all, the exit status of the first that failed; `seconds` the whole
    run's."""
    outcomes: dict[str, int] = {}
    modules: dict[str, dict[str, Any]] = {}
    fixtures: dict[str, float] = {}
    slowest: list[list[Any]] = []
    hungriest: list[list[Any]] = []
    teardown = 0.0
    for part in parts:
        for outcome, n in part.get("outcomes", {}).items():
            outcomes[outcome] = outcomes.get(outcome, 0) + n
        for module, row in part.get("modules", {}).items():
            have = modules.setdefault(module, {"seconds": 0.0, "tests": 0})
            have["seconds"] = round(have["seconds"] + row["seconds"], 1)
            have["tests"] += row["tests"]
            if "cpu seconds" in row:
                have["cpu seconds"] = round(have.get("cpu seconds", 0.0) + row["cpu seconds"], 1)
        for fixture, took in part.get("fixtures", {}).items():
            fixtures[fixture] = round(fixtures.get(fixture, 0.0) + took, 1)
        slowest.extend(part.get("slowest", []))
        hungriest.extend(part.get("hungriest", []))
        teardown += part.get("session teardown cpu seconds", 0.0)
    failed = [part["exitstatus"] for part in parts if part.get("exitstatus")]
    return {
        "tier": tier,
        "seconds": round(seconds, 1),
        "exitstatus": failed[0] if failed else 0,
        "outcomes": outcomes,
        "modules": dict(sorted(modules.items())),
        "fixtures": dict(sorted(fixtures.items())),
        "slowest": sorted(slowest, key=lambda row: -row[1])[:SLOWEST],
        "hungriest": sorted(hungriest, key=lambda row: -row[1])[:SLOWEST],
        "session teardown cpu seconds": round(teardown, 1),
    }


def run_shards(shards: list[list[str]]) -> int:
    started = time.monotonic()
    timings, tier = os.environ.get("DTR_TIMINGS"), os.environ.get("DTR_TIER")
    names = [f"{tier}-{n}" for n in range(1, len(shards) + 1)] if tier else []
    with tempfile.TemporaryDirectory(prefix="dtr-shards.") as tmp:
        running = []
        for n, args in enumerate(shards, 1):
            env = dict(os.environ, **({"DTR_TIER": names[n - 1]} if tier else {}))
            out = open(Path(tmp) / f"{n}.log", "w+b")  # noqa: SIM115 (closed below, once it has been printed)
            proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", *args], stdout=out,
                                    stderr=subprocess.STDOUT, env=env)  # fmt: skip
            running.append((n, args, proc, out))
        codes = []
        for n, args, proc, out in running:
            code = proc.wait()
            codes.append(code)
            out.seek(0)
            print(f"---- shard {n}/{len(shards)} (pytest {' '.join(args[:3])}{' ...' if len(args) > 3 else ''}): "
                  f"exit {code} after {time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
            sys.stdout.buffer.write(out.read())
            sys.stdout.flush()
            out.close()
    if timings and tier:
        merge_files(Path(timings), tier, names, time.monotonic() - started)
    return next((code for code in codes if code), 0)


def merge_files(timings: Path, tier: str, names: list[str], seconds: float) -> None:
    parts = []
    for name in names:
        path = timings / f"{name}.json"
        try:
            parts.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a shard that never got to its end: its tests are not counted, and its exit code says so
        path.unlink()
    (timings / f"{tier}.json").write_text(json.dumps(merge_timings(tier, parts, seconds), indent=1) + "\n")
    tests: list[Any] = []  # each test's start, seconds and CPU (tests/plugins/tier_timings.py): one list
    for name in names:
        path = timings / f"{name}.tests.json"
        with contextlib.suppress(OSError, ValueError):
            tests += json.loads(path.read_text())
            path.unlink()
    (timings / f"{tier}.tests.json").write_text(json.dumps(tests) + "\n")


if __name__ == "__main__":
    sys.exit(run_shards(split_args(sys.argv[1:])))
