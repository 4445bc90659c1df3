"""How soon a finished epoch shows in `kubectl get distrainingruns` (status.progress), on the real node.

For each run: the chief's log line `epoch N/M end` carries the container runtime's timestamp; a reader
polls the run's status every 0.5 s (kubectl, as a user would) and notes when epoch N first appears. The
difference is the latency: when the operator's read schedule reads the chief's log (progress_schedule.py:
at each epoch's expected end once the mean epoch time is known; --progress-interval, 5 s by default as deploy/
runs it, bounds how late), its read and status write, the watch, and the reader's own polling (<= 0.5 s).
Also, from the operator's /metrics (through the API server's service proxy; "not measured" when that cannot be
reached): its chief-log reads and all its API requests while each run ran, per minute the run was Running.

    python -m bench.progress.run [--runs 3] [--epochs 6] [--steps 1000]   (from the repository root)

Needs root, the built images (make images) and the node build (make node-build): `make bench-progress`.
Writes bench/progress/results.json (every sample, with each run's epoch times, which bench/progress/schedule.py
computes request rates from) and results.md. Epochs take ~9 s here (1000 steps), longer than the read interval,
so every epoch is seen; epochs shorter than the interval would be seen only partly, by design.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from tests.support.node import (
    RealNode,
    epoch_end_times,
    percentile,
    restricted_namespace,
    start_real_node,
    watch_progress,
)
from tests.support.runs import digits_run

HERE = Path(__file__).resolve().parent
# The operator's own counters (docs/performance.md#prometheus-metrics), read through the API server's proxy to its
# metrics Service (deploy/base/service.yaml): the API server runs on the node, which its NetworkPolicy does not police.
METRICS = "/api/v1/namespaces/dtr-system/services/dtr-operator-metrics:metrics/proxy/metrics"
READS, REQUESTS = 'dtr_reconcile_seconds_count{handler="progress"}', "dtr_api_requests_total"


def operator_counters(node: RealNode) -> dict[str, float] | str:
    """The operator's chief-log reads and API requests so far, or why they could not be read."""
    proc = node.cluster.kubectl("get", "--raw", METRICS, check=False)
    if proc.returncode != 0:
        return f"not measured: {(proc.stderr.strip().splitlines() or ['kubectl get --raw failed'])[-1][:200]}"
    found = {}
    for line in proc.stdout.splitlines():
        name, _, value = line.rpartition(" ")
        if name in (READS, REQUESTS):
            with contextlib.suppress(ValueError):
                found[name] = float(value)
    return found if len(found) == 2 else f"not measured: {READS} or {REQUESTS} not in the operator's /metrics"


def per_running_minute(before: dict[str, float] | str, after: dict[str, float] | str, minutes: float) -> dict | str:
    """Reads and requests between the two readings, per minute the run was Running."""
    if isinstance(before, str) or isinstance(after, str):
        return before if isinstance(before, str) else str(after)
    if minutes <= 0:
        return "not measured: the run was not seen Running"
    return {"reads": round((after[READS] - before[READS]) / minutes, 2),
            "requests": round((after[REQUESTS] - before[REQUESTS]) / minutes, 2)}  # fmt: skip


def epoch_seconds(log: str) -> list[float]:
    """The chief's epoch times after its first (whose start the log's epoch lines do not give), from its epoch ends."""
    ends = [t for _, t in sorted(epoch_end_times(log).items())]
    return [round(b - a, 2) for a, b in itertools.pairwise(ends)]


def measure(runs: int, epochs: int, steps: int) -> dict:
    samples: list[dict] = []
    started = time.time()
    load_before = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(prefix="dtr-bench-progress-") as tmp,
        start_real_node(Path(tmp)) as node,
        restricted_namespace(node, "bench-progress") as namespace,
    ):
        for i in range(runs):
            name = f"latency-{i}"
            counted = operator_counters(node)
            node.apply(namespace, digits_run(name, epochs=epochs, steps=steps))
            seen = watch_progress(node, namespace, name)
            rate = per_running_minute(counted, operator_counters(node), seen.running_seconds / 60)
            log = node.logs(namespace, f"{name}-worker-0", timestamps=True)
            delays = seen.delays(log)
            samples.append({"run": name, "phase": seen.final.get("phase"), "epochs_seen": sorted(seen.first_seen),
                            "order": seen.order, "delays_s": [round(d, 3) for d in delays],
                            "epoch_seconds": epoch_seconds(log), "running_s": round(seen.running_seconds, 1),
                            "operator_per_running_minute": rate})  # fmt: skip
            print(f"{name}: {seen.final.get('phase')}, epochs seen {sorted(seen.first_seen)}, "
                  f"delays {[round(d, 1) for d in delays]}, operator per running minute {rate}", flush=True)
    delays = sorted(d for s in samples for d in s["delays_s"])
    rates = [s["operator_per_running_minute"] for s in samples if isinstance(s["operator_per_running_minute"], dict)]
    return {
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(time.time() - started),
        "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "runs": runs, "epochs": epochs, "steps_per_epoch": steps,
        "operator_progress_interval_s": 5, "reader_poll_s": 0.5,
        "latency_s": {"n": len(delays), "p50": round(statistics.median(delays), 2),
                      "p95": round(percentile(delays, 0.95), 2), "max": round(delays[-1], 2),
                      "min": round(delays[0], 2)} if delays else {"n": 0},
        "operator_per_running_minute": {
            "reads": round(statistics.mean(r["reads"] for r in rates), 2),
            "requests": round(statistics.mean(r["requests"] for r in rates), 2)} if rates else
            next((s["operator_per_running_minute"] for s in samples), "not measured"),
        "samples": samples,
    }  # fmt: skip


def markdown(r: dict) -> str:
    lat = r["latency_s"]
    return "\n".join([
        "# Progress latency: epoch end -> `kubectl get distrainingruns`",
        "",
        (f"Measured {r['finished']} on {r['cpus']} CPUs (load average before {r['loadavg_before']}, after "
        f"{r['loadavg_after']}), real node, the operator as deploy/ runs it (its read schedule, --progress-interval "
        "5 s), a reader "
        f"polling the status every {r['reader_poll_s']} s. {r['runs']} runs of {r['epochs']} epochs "
        f"({r['steps_per_epoch']} steps each, about 9 s); {r['seconds']} s in all. Produced by `make bench-progress`."),
        "",
        "| samples | p50 s | p95 s | min s | max s | goal |",
        "|---:|---:|---:|---:|---:|---|",
        (f"| {lat['n']} | {lat.get('p50')} | {lat.get('p95')} | {lat.get('min')} | {lat.get('max')} | "
        f"p95 <= 10 s: {'met' if lat.get('p95', 99) <= 10 else 'NOT met'} |"),
        "",
        f"The operator's own counters per minute a run was Running (its /metrics): {_rates(r)}.",
        "",
        ("Per run (epochs as they first appeared in the status while Running; the last epoch can be missed when the "
        "run finishes within one read interval):"),
        "",
        *[f"- {s['run']}: {s['phase']}, order {s['order']}, delays {s['delays_s']}" for s in r["samples"]],
        "",
    ])  # fmt: skip


def _rates(r: dict) -> str:
    rate = r.get("operator_per_running_minute", "not measured")
    if isinstance(rate, str):
        return rate
    return (f"{rate['reads']} chief-log reads and {rate['requests']} API requests in all (the run's creation and "
            "end included), the mean of the runs")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--out", type=Path, default=HERE)
    args = p.parse_args()
    result = measure(args.runs, args.epochs, args.steps)
    (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "results.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
