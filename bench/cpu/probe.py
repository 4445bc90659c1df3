"""Whether tests/tiers.py's machine probe (probe_seconds: fixed pure-Python work in its thread's CPU seconds) measures
the CPU's speed and not the load beside it: the probe alone, then beside N spinning processes in sessions of their
own (as a run's steps are), alternating, several rounds. Equal medians mean the run's recorded probe compares
machines, whatever ran beside it.

    python3 -m bench.cpu.probe [--rounds 5] [--spinners 2] [--json bench/cpu/probe.json --label TEXT]

Ratios in one run (this machine is noisy). Stdlib only; Linux.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.cpu.accounting import add_result

REPO = Path(__file__).resolve().parents[2]


def tiers_probe():
    spec = importlib.util.spec_from_file_location("dtr_tiers", REPO / "tests" / "tiers.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module.probe_seconds


def beside(spinners: int, probe) -> float:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
             for _ in range(spinners)]  # fmt: skip
    try:
        time.sleep(0.3)
        return probe()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.cpu.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--spinners", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--label", default=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    args = parser.parse_args()
    probe = tiers_probe()
    alone, loaded = [], []
    for _ in range(args.rounds):
        alone.append(probe())
        loaded.append(beside(args.spinners, probe))
    result = {"alone s": [round(x, 4) for x in alone],
              f"beside {args.spinners} spinners s": [round(x, 4) for x in loaded],
              "ratio of medians (beside / alone)": round(statistics.median(loaded) / statistics.median(alone), 3)}
    print(json.dumps(result, indent=1))
    if args.json:
        add_result(args.json, args.label, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
