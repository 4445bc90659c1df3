"""Where a whole run's CPU goes, by the kernel's process accounting (acct(2), BSD v3 records): every process that
ends is written down with its command, parent, start and CPU seconds, however short it lived; a container's too (the
records go to every PID namespace above it). A sampler of /proc misses what lives under its interval: in a warm CI
run it saw 2389 of the machine's 2780 CPU seconds; the accounting found the rest (3823 kubectl processes, 208 s).

    sudo python3 -m bench.cpu.accounting on FILE      # before the run (root: acct(2))
    sudo python3 -m bench.cpu.accounting off          # after it
    python3 -m bench.cpu.accounting report FILE [--top 40] [--steps .dtr/timings/run.json]
                                                [--tests .dtr/timings] [--json bench/cpu/results.json --label COMMIT]

The report: CPU seconds by command; by the run's step (the child of the longest-lived process that started the
others: tests/tiers.py in a CI run, each step's process below it, by its start second), pods' processes apart (a
containerd-shim above them), and the processes the kernel records under a thread's name (TensorFlow's ends under
`grpc_global_tim` and the like). With --tests (the tiers' <tier>.tests.json: each test's start and seconds,
tests/plugins/tier_timings.py), the pods' CPU by the node tiers' tests running when each pod process started, shared
out among them when several ran at once (the single node's two steps do): what a node test costs, which its tier's own
figures cannot see. Stdlib only: it runs in any Python 3.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import struct
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

RECORD = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")  # struct acct_v3, 64 bytes (linux/acct.h)
AHZ = 100  # comp_t ticks a second (AHZ)


def comp_t(value: int) -> int:
    """A comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (((value >> 13) & 7) * 3)


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    start: int  # epoch seconds
    lived: float  # seconds
    cpu: float  # user + system seconds
    command: str


def parse(data: bytes) -> list[Process]:
    """Every v3 record of an accounting file, in the order the processes ended."""
    out = []
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        if fields[1] != 3:
            continue
        pid, ppid, start, lived, utime, stime = fields[6], fields[7], fields[8], fields[9], fields[10], fields[11]
        command = fields[-1].split(b"\0", 1)[0].decode(errors="replace")
        out.append(Process(pid, ppid, start, lived / AHZ, (comp_t(utime) + comp_t(stime)) / AHZ, command))
    return out


class Tree:
    """Each process's parent: the process of its parent's PID alive when it started (PIDs are reused)."""

    def __init__(self, processes: list[Process]) -> None:
        self.by_pid: dict[int, list[Process]] = defaultdict(list)
        for p in processes:
            self.by_pid[p.pid].append(p)

    def parent(self, p: Process) -> Process | None:
        alive = [c for c in self.by_pid.get(p.ppid, ()) if c is not p and c.start <= p.start + 1
                 and c.start + c.lived >= p.start - 1]  # fmt: skip
        return max(alive, key=lambda c: c.start, default=None)

    def ancestors(self, p: Process, limit: int = 64) -> list[Process]:
        chain, at = [], self.parent(p)
        while at is not None and len(chain) < limit:
            chain.append(at)
            at = self.parent(at)
        return chain


def where(tree: Tree, p: Process, root: Process | None) -> str:
    """`pods`, `step@SECOND:COMMAND` (the root's child above p, SECOND from the root's start), or `other`."""
    chain = tree.ancestors(p)
    if any(a.command == "containerd-shim" for a in chain):
        return "pods"
    if root is not None and root in chain:
        top = chain[chain.index(root) - 1] if chain.index(root) > 0 else p
        return f"step@{top.start - root.start}:{top.command}"
    return "other"


def step_names(starts: dict[str, float], place: str, slack: float = 3.0) -> str:
    """`step@SECOND:COMMAND` as the names of the steps of tests/tiers.py's run.json that started then (+-slack)."""
    if not place.startswith("step@"):
        return place
    second = float(place.removeprefix("step@").split(":", 1)[0])
    names = [n for n, start in starts.items() if abs(start - second) <= slack]
    return " | ".join(names) if names else place


def runner(tree: Tree, processes: list[Process]) -> Process | None:
    """The process that started the steps: the longest-lived of those with three children or more that lived 5 s or
    more (not the `make` above it, with one)."""
    steps = Counter(q for p in processes if p.lived >= 5 and (q := tree.parent(p)) is not None)
    return max((p for p, n in steps.items() if n >= 3), key=lambda p: p.lived, default=None)


def report(processes: list[Process], top: int = 40, starts: dict[str, float] | None = None) -> dict[str, object]:
    tree = Tree(processes)
    root = runner(tree, processes)
    by_command: Counter[str] = Counter()
    by_where: Counter[str] = Counter()
    by_both: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for p in processes:
        place = step_names(starts or {}, where(tree, p, root))
        by_command[p.command] += p.cpu
        count[p.command] += 1
        by_where[place] += p.cpu
        by_both[f"{place} {p.command}"] += p.cpu
    return {
        "processes": len(processes),
        "cpu seconds": round(sum(p.cpu for p in processes), 1),
        "root": root.command if root else None,
        "by command": [(c, round(s, 1), count[c]) for c, s in by_command.most_common(top)],
        "by step": sorted(((w, round(s, 1)) for w, s in by_where.items()), key=lambda x: -x[1]),
        "by step and command": [(c, round(s, 1)) for c, s in by_both.most_common(top)],
    }


Span = tuple[str, float, float]  # "tier test", its start and end, epoch seconds


def test_spans(timings: Path) -> list[Span]:
    """Every test of every tier's <tier>.tests.json in `timings`: [node id, start, seconds, cpu] rows."""
    spans = []
    for path in sorted(timings.glob("*.tests.json")):
        tier = path.name.removesuffix(".tests.json")
        for nodeid, start, seconds, *_ in json.loads(path.read_text()):
            spans.append((f"{tier} {nodeid}", float(start), float(start) + float(seconds)))
    return spans


NODE_TIERS = ("node", "node runs", "node faults", "multinode")  # tests/tiers.py's steps whose tests start pods


def pods_by_test(processes: list[Process], spans: list[Span], top: int = 40,
                 tiers: tuple[str, ...] = NODE_TIERS) -> list[tuple[str, float]]:  # fmt: skip
    """The pods' CPU seconds by the tests of `tiers` running when each pod process started (shared among them)."""
    spans = [span for span in spans if span[0].split(" tests/", 1)[0] in tiers]
    tree = Tree(processes)
    root = runner(tree, processes)
    by_test: Counter[str] = Counter()
    for p in processes:
        if p.cpu <= 0 or where(tree, p, root) != "pods":
            continue
        running = [name for name, start, end in spans if start - 1 <= p.start <= end]  # acct: whole seconds
        for name in running or ["(no test running)"]:
            by_test[name] += p.cpu / max(1, len(running))
    return [(name, round(cpu, 1)) for name, cpu in by_test.most_common(top)]


def add_result(path: Path, label: str, result: dict) -> None:
    """Keep `result` under `label` in the JSON file of labelled results at path (bench/cpu's results files)."""
    results = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**results, label: result}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `report ... | head` ends quietly
    parser = argparse.ArgumentParser(prog="python3 -m bench.cpu.accounting", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("on").add_argument("file", type=Path)
    sub.add_parser("off")
    rep = sub.add_parser("report")
    rep.add_argument("file", type=Path)
    rep.add_argument("--top", type=int, default=40)
    rep.add_argument("--json", type=Path, help="merge the report into this file, under --label")
    rep.add_argument("--label", default="run", help="the report's key in --json (a commit, a date)")
    rep.add_argument("--steps", type=Path, help="the run's .dtr/timings/run.json: steps by name, not start second")
    rep.add_argument("--tests", type=Path, help="the run's .dtr/timings: the pods' CPU by the tests running then")
    args = parser.parse_args(argv)
    if args.command == "report":
        return print_report(args)
    return switch(args.file if args.command == "on" else None)


def switch(file: Path | None) -> int:
    """acct(2) on into `file`, or off."""
    libc = ctypes.CDLL(None, use_errno=True)
    if file is not None:
        file.touch()
    if libc.acct(str(file).encode() if file is not None else None) != 0:
        reason = os.strerror(ctypes.get_errno())
        print(f"error: acct(2): {reason} (it needs root and a kernel with BSD process accounting)", file=sys.stderr)
        return 1
    return 0


def print_report(args: argparse.Namespace) -> int:
    try:
        steps = json.loads(args.steps.read_text())["steps"] if args.steps else None
        starts = {s["name"]: s["start"] for s in steps if s.get("start") is not None} if steps is not None else None
        data = args.file.read_bytes()
        spans = test_spans(args.tests) if args.tests else None
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"error: cannot read {err}", file=sys.stderr)
        return 1
    if spans == []:
        print(f"error: no <tier>.tests.json in {args.tests} (a run's .dtr/timings)", file=sys.stderr)
        return 1
    processes = parse(data)
    result = report(processes, args.top, starts)
    if spans is not None:
        result["pods by test"] = pods_by_test(processes, spans, args.top)
    if args.json:
        add_result(args.json, args.label, result)
    print(f"{result['processes']} processes, {result['cpu seconds']} CPU s (the longest-lived: {result['root']})")
    for title in ("by command", "by step", "by step and command", "pods by test"):
        if title not in result:
            continue
        print(f"-- {title}")
        for row in result[title][: args.top]:
            print("  ".join(f"{v:>8}" if isinstance(v, float | int) else str(v) for v in row[1:]), row[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
