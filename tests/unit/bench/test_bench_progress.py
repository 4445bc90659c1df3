"""bench/progress/run.py's own arithmetic (the benchmark itself needs the real node: `make bench-progress`)."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from bench.progress import run as bench

METRICS = f"""# HELP dtr_api_requests_total Kubernetes API calls
dtr_api_requests_total 120.0
{bench.READS} 30.0
dtr_reconcile_seconds_count{{handler="tfjob"}} 7.0
"""


def node_answering(returncode: int, stdout: str = "", stderr: str = "") -> SimpleNamespace:
    answer = subprocess.CompletedProcess([], returncode, stdout, stderr)
    return SimpleNamespace(cluster=SimpleNamespace(kubectl=lambda *args, check=True: answer))


def test_the_operators_counters_are_read_from_its_metrics_or_said_missing():
    assert bench.operator_counters(node_answering(0, METRICS)) == {bench.READS: 30.0, bench.REQUESTS: 120.0}
    refused = bench.operator_counters(node_answering(1, stderr="Error from server (ServiceUnavailable): no endpoints"))
    assert refused == "not measured: Error from server (ServiceUnavailable): no endpoints"
    assert bench.operator_counters(node_answering(0, "other 1\n")).startswith("not measured: ")


def test_reads_and_requests_per_minute_the_run_was_running():
    before, after = {bench.READS: 30.0, bench.REQUESTS: 120.0}, {bench.READS: 36.0, bench.REQUESTS: 150.0}
    assert bench.per_running_minute(before, after, 2.0) == {"reads": 3.0, "requests": 15.0}
    assert bench.per_running_minute("not measured: x", after, 2.0) == "not measured: x"
    assert bench.per_running_minute(before, after, 0.0).startswith("not measured")


def test_epoch_times_come_from_the_chiefs_stamped_epoch_ends():
    log = "".join(f"2026-11-30T18:00:{s:02d}.5Z dtr_trainer[worker-0]: epoch {e}/3 end loss=1\n"
                  for e, s in ((1, 1), (2, 10), (3, 19)))  # fmt: skip
    assert bench.epoch_seconds(log) == [9.0, 9.0]
