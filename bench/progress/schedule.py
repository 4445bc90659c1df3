"""API requests per running run per minute for status.progress, before and after the read schedule
(operator/dtr_operator/progress_schedule.py): computed, not measured, by running the operator's own pure schedule
over simulated runs.

    python -m bench.progress.schedule   (from the repository root; a second, no cluster)

Writes bench/progress/schedule.json and schedule.md. A simulated run: its workers start at 0 and the operator sees
it Running then; epoch i ends at the sum of the first i epoch lengths; every read (one `GET pods/log`) sees the
last epoch ended by its time and, when that is new, writes it into the status as the operator does (one status
PATCH; watchdog.with_epoch, with the time the chief logged it, in whole seconds); the next read is due when the
schedule says. Reads take no time and their writes show at once; the run is Running until TAIL seconds after its
last epoch (the final evaluation and the export). Before: one read every interval, the operator's loop until this
schedule (5 s plus the time its round of reads took, which this leaves out). The latency is from an epoch's end to
the read that shows it, so it leaves out the status write, the watch and kubectl (bench/progress/run.py measures
all of it on the real node). When bench/progress/results.json holds the epoch times bench/progress/run.py measured,
its runs are simulated too.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dtr_operator import progress_schedule, watchdog
from dtr_operator.spec import WatchdogSpec

HERE = Path(__file__).resolve().parent
T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
INTERVAL = 5.0  # --progress-interval's default (settings.py)
TAIL = 5.0  # seconds Running after the last epoch: the final evaluation and the export
FIRST_EPOCH = 1.5  # the first epoch's length, as a multiple of the others: it holds the data load and the tracing
JITTER = 0.05  # the jittered cases: each epoch's length drawn uniformly within +-5% (seeded, so the same each time)
RUNS = 1000

# (name, epochs, seconds per epoch, why this case)
CASES = [
    ("10 s epochs", 8, 10.0, "short epochs: as short as a read schedule can follow within 5 s"),
    ("60 s epochs", 8, 60.0, "a minute an epoch"),
    ("bench-progress", 6, 9.0, "make bench-progress's runs: 6 epochs of 1000 steps, about 9 s each (results.md)"),
    ("600 s epochs", 8, 600.0, "long epochs: MAX_WAIT sets the pace"),
    ("a long run", 100, 60.0, "100 epochs of a minute: the two epochs of unknown length count little"),
]  # fmt: skip

# The plan of a read: (status, last read or None, first seen) -> when the next read is due.
Plan = Callable[[Mapping[str, Any], datetime | None, datetime], datetime]


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def schedule_plan(interval: float = INTERVAL, spread: float = 0.0, watch: WatchdogSpec | None = None) -> Plan:
    """The operator's schedule (progress_schedule.next_read) for a run of spec.watchdog `watch` (the defaults)."""
    spec = watch or WatchdogSpec()
    return lambda status, last, first: progress_schedule.next_read(status, spec, last, first, interval, spread)


def every_interval(interval: float = INTERVAL, spread: float = 0.0) -> Plan:
    """The loop before the schedule: every run every interval."""
    return lambda status, last, first: (last or first) + timedelta(seconds=interval if last else spread * interval)


@dataclass
class Simulated:
    """What the operator did for one run: its reads (seconds after the start), the epochs it showed and when."""

    reads: list[float] = field(default_factory=list)
    shown: dict[int, float] = field(default_factory=dict)  # epoch -> seconds from its end to the read that showed it
    running_seconds: float = 0.0

    @property
    def writes(self) -> int:
        return len(self.shown)

    def per_minute(self, count: int) -> float:
        return count / self.running_seconds * 60


def epoch_ends(lengths: Sequence[float]) -> list[float]:
    ends, total = [], 0.0
    for length in lengths:
        total += length
        ends.append(total)
    return ends


def running_status() -> dict[str, Any]:
    """A run whose workers started at T0."""
    started = {"type": "Running", "status": "True", "reason": "TFJobRunning",
               "lastTransitionTime": watchdog.format_time(T0)}
    return {"phase": "Running", "reason": "TFJobRunning", "conditions": [started]}  # fmt: skip


def simulate(lengths: Sequence[float], plan: Plan, tail: float = TAIL) -> Simulated:
    """One run of epochs of these lengths under the plan."""
    ends = epoch_ends(lengths)
    out = Simulated(running_seconds=ends[-1] + tail)
    status: dict[str, Any] = running_status()
    last: datetime | None = None
    while (at := (plan(status, last, T0) - T0).total_seconds()) < out.running_seconds:
        out.reads.append(at)
        done = sum(1 for end in ends if end <= at)
        if done > max(out.shown, default=0):
            out.shown[done] = at - ends[done - 1]
            status = watchdog.with_epoch(status, done, watchdog.format_time(_at(ends[done - 1])))  # as logged
        last = _at(at)
    return out


def lengths_of(epochs: int, seconds: float, jitter: float = 0.0, seed: int = 1) -> list[float]:
    """The first epoch FIRST_EPOCH times as long; with jitter, each within +-jitter of its length."""
    rng = random.Random(seed)
    base = [seconds * FIRST_EPOCH] + [seconds] * (epochs - 1)
    return [s * (1 + rng.uniform(-jitter, jitter)) for s in base]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest rank, as bench/progress/run.py's (tests/support/node.py)."""
    return sorted_values[min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))]


def _figures(sim: Simulated) -> dict[str, Any]:
    delays = sorted(sim.shown.values())
    latency = {"p50": round(statistics.median(delays), 2), "p95": round(percentile(delays, 0.95), 2),
               "max": round(delays[-1], 2)} if delays else {}  # fmt: skip
    return {
        "reads": len(sim.reads), "writes": sim.writes, "running_seconds": round(sim.running_seconds, 1),
        "reads_per_minute": round(sim.per_minute(len(sim.reads)), 2),
        "requests_per_minute": round(sim.per_minute(len(sim.reads) + sim.writes), 2),
        "epochs_shown": sorted(sim.shown), "latency_s": latency,
    }  # fmt: skip


def _per_second(per_minute: float) -> float:
    return round(per_minute * RUNS / 60, 1)


def case(lengths: Sequence[float]) -> dict[str, Any]:
    before, after = _figures(simulate(lengths, every_interval())), _figures(simulate(lengths, schedule_plan()))
    return {"epoch_lengths_s": [round(x, 2) for x in lengths], "before": before, "after": after,
            f"requests_per_s_for_{RUNS}_runs": {"before": _per_second(before["requests_per_minute"]),
                                                "after": _per_second(after["requests_per_minute"])}}  # fmt: skip


def measured_lengths(results: Path) -> list[tuple[str, list[float]]]:
    """The epoch times bench/progress/run.py measured, per run (its first epoch, whose start its log does not give,
    FIRST_EPOCH times the mean of the others); none when it has not recorded them."""
    if not results.exists():
        return []
    runs = []
    for sample in json.loads(results.read_text()).get("samples", []):
        seconds = sample.get("epoch_seconds") or []
        if seconds:
            runs.append((sample["run"], [FIRST_EPOCH * statistics.mean(seconds), *seconds]))
    return runs


def compute(results: Path = HERE / "results.json") -> dict[str, Any]:
    cases = []
    for name, epochs, seconds, why in CASES:
        for jitter in (0.0, JITTER):
            cases.append({"case": name, "epochs": epochs, "seconds": seconds, "jitter": jitter, "why": why,
                          **case(lengths_of(epochs, seconds, jitter))})  # fmt: skip
    for run, lengths in measured_lengths(results):
        cases.append({"case": f"bench-progress {run}, measured epochs", "epochs": len(lengths),
                      "seconds": round(statistics.mean(lengths[1:]), 2), "jitter": None,
                      "why": "the epoch times bench/progress/run.py measured (results.json)",
                      **case(lengths)})  # fmt: skip
    return {"computed": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "interval_s": INTERVAL, "tail_s": TAIL,
            "first_epoch_factor": FIRST_EPOCH, "max_wait_s": progress_schedule.MAX_WAIT,
            "lead": progress_schedule.LEAD, "backoff": progress_schedule.BACKOFF, "cases": cases}  # fmt: skip


def markdown(r: dict[str, Any]) -> str:
    rows = []
    for c in r["cases"]:
        b, a, total = c["before"], c["after"], c[f"requests_per_s_for_{RUNS}_runs"]
        lat = a["latency_s"]
        spread = " +-5%" if c["jitter"] else " (mean)" if c["jitter"] is None else ""
        rows.append(f"| {c['case']} | {c['epochs']} x {c['seconds']:g} s{spread} | "
                    f"{b['reads_per_minute']} | **{a['reads_per_minute']}** | {b['requests_per_minute']} -> "
                    f"{a['requests_per_minute']} | {total['before']} -> **{total['after']}** | "
                    f"{lat.get('p50')} / {lat.get('p95')} / {lat.get('max')} | "
                    f"{len(a['epochs_shown'])}/{c['epochs']} |")  # fmt: skip
    return "\n".join([
        "# status.progress reads: requests per running run per minute, before and after the read schedule",
        "",
        (f"Computed {r['computed']} by `python -m bench.progress.schedule` (bench/progress/schedule.py): the "
         "operator's pure schedule (operator/dtr_operator/progress_schedule.py) run over simulated runs, not measured. "
         f"--progress-interval {r['interval_s']:g} s; the first epoch {r['first_epoch_factor']:g} times as long as "
         f"the others (data load, tracing; assumed); Running until {r['tail_s']:g} s after the last epoch (assumed); "
         "reads take no time. Before: one `GET pods/log` per run every interval (bench/operator measured 10.2 a "
         "minute for that loop, its round's own time included). Requests: those reads plus one status PATCH per "
         "epoch shown. Latency: an epoch's end to the read that shows it (the real node adds the write, the watch "
         "and kubectl: bench/progress/results.md)."),
        "",
        ("| case | epochs | reads/run/min before | reads/run/min after | requests/run/min before -> after | "
         f"requests/s for {RUNS} running runs before -> after | latency after p50 / p95 / max s | "
         "epochs shown after |"),
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        (f"Schedule constants: lead {r['lead']:g} of the mean epoch, backoff {r['backoff']:g} of an epoch's age or "
         f"lateness, at most {r['max_wait_s']:g} s between reads. Each case's epoch lengths and every figure: "
         "bench/progress/schedule.json."),
        "",
    ])  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=HERE)
    args = p.parse_args()
    result = compute()
    (args.out / "schedule.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "schedule.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
