"""Whether a step's nice reaches across steps: two sessions of spinning processes side by side, as tests/tiers.py
starts its steps (each a session of its own), the second at nice 10; then the same with the second session's
autogroup at nice 10 (/proc/PID/autogroup). With the kernel's autogroup on, the root cpu cgroup weighs each session
as one nice-0 process whatever its processes' nice: the first pair takes about the same CPU, the second does not.

    python3 -m bench.cpu.autogroup [--seconds 15] [--processes 3] [--json bench/cpu/autogroup.json --label TEXT]

Ratios in one run (this machine is noisy); tests/tiers.py's SIDE_NICE cites them. Stdlib only; Linux.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.cpu.accounting import add_result

SPIN = """
import os, sys, time
seconds, processes, autogroup_nice, nice = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
if autogroup_nice != "-":
    with open(f"/proc/{os.getpid()}/autogroup", "w") as f:
        f.write(autogroup_nice)
os.nice(nice)
pids = []
for _ in range(processes):
    pid = os.fork()
    if pid == 0:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
        os._exit(0)
    pids.append(pid)
cpu = 0.0
for pid in pids:
    usage = os.wait4(pid, 0)[2]
    cpu += usage.ru_utime + usage.ru_stime
print(round(cpu, 2))
"""


def pair(seconds: float, processes: int, second_autogroup: str) -> tuple[float, float]:
    """CPU seconds of two sessions spinning at once: the first at nice 0, the second at nice 10 (its autogroup's nice
    set to `second_autogroup`, or left as it is with "-")."""
    def start(autogroup: str, nice: int) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", SPIN, str(seconds), str(processes), autogroup, str(nice)],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip

    procs = [start("-", 0), start(second_autogroup, 10)]
    first, second = (float(p.communicate()[0].strip()) for p in procs)
    return first, second


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--json", type=Path, help="add the figures to this file, under --label")
    parser.add_argument("--label", default=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    args = parser.parse_args(argv)
    enabled = Path("/proc/sys/kernel/sched_autogroup_enabled")
    result = {
        "autogroup enabled": enabled.read_text().strip() == "1" if enabled.exists() else None,
        "cores": os.cpu_count(),
        "seconds": args.seconds,
        "processes per session": args.processes,
    }
    for name, autogroup in (("nice 10 only", "-"), ("nice 10 and its autogroup at 10", "10")):
        first, second = pair(args.seconds, args.processes, autogroup)
        result[name] = {"nice 0 session CPU s": first, "nice 10 session CPU s": second,
                        "ratio": round(second / first, 2) if first else None}  # fmt: skip
        print(f"{name}: {second:.1f} CPU s against {first:.1f} at nice 0 (ratio {result[name]['ratio']})")
    if args.json:
        add_result(args.json, args.label, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
