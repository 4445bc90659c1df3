"""Unit tests of the operator benchmark's pure parts (bench/operator/analysis.py), and its recorded history."""

from __future__ import annotations

import json
import math

from bench.operator.analysis import (
    audit_requests,
    goals,
    history_row,
    latency_summary,
    parse_overrides,
    percentile,
)
from support.repo import REPO

BENCH = REPO / "bench" / "operator"


def test_percentile_interpolates_between_ranks_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([10.0], 95) == 10.0
    assert percentile([5.0, 1.0, 3.0], 0) == 1.0 and percentile([5.0, 1.0, 3.0], 100) == 5.0
    assert math.isclose(percentile(list(map(float, range(1, 21))), 95), 19.05)
    assert math.isnan(percentile([], 50))


def test_latency_summary_is_in_milliseconds() -> None:
    s = latency_summary([0.1, 0.2, 0.3])
    assert s == {"n": 3, "p50_ms": 200.0, "p95_ms": 290.0, "min_ms": 100.0, "max_ms": 300.0}


def event(agent: str, verb: str, resource: str, stage: str = "ResponseComplete", sub: str | None = None) -> str:
    ref = {"resource": resource, **({"subresource": sub} if sub else {})}
    return json.dumps({"userAgent": agent, "verb": verb, "stage": stage, "objectRef": ref})


def test_audit_requests_counts_only_the_operators_agents_once_per_request() -> None:
    lines = [
        event("dtr-operator/0.1.0", "create", "tfjobs"),
        event("dtr-operator/0.1.0", "patch", "disttrainingruns", sub="status"),
        event("kopf/1.45.2", "patch", "disttrainingruns"),
        event("kopf/1.45.2", "watch", "tfjobs", stage="ResponseStarted"),
        event("kopf/1.45.2", "watch", "tfjobs", stage="ResponseComplete"),  # the same watch, ending
        event("training-operator/v0", "create", "pods"),
        event("dtr-bench/1", "create", "disttrainingruns"),
        '{"userAgent": "dtr-operator/0.1.0", "verb": "get", "sta',  # cut at the window's edge
        "",
    ]
    assert audit_requests(lines) == {
        "create tfjobs": 1,
        "patch disttrainingruns/status": 1,
        "patch disttrainingruns": 1,
        "watch tfjobs": 1,
    }


def test_goals_compare_against_the_reference_and_the_fixed_limits() -> None:
    results = {
        "create_to_children": {"p50_ms": 90.0},
        "reference_tfjob_to_pods": {"p50_ms": 100.0},
        "burst": {"runs": 200, "seconds_to_all_expanded": 25.0},
        "processes": {"dtr-operator": {"peak_rss_mb": 149.9}},
    }
    assert [g["met"] for g in goals(results)] == [True, False, True]
    results["create_to_children"]["p50_ms"] = 100.1
    assert goals(results)[0]["met"] is False


def test_kopf_overrides_parse_to_paths_and_numbers() -> None:
    assert parse_overrides("execution.max_workers=32, persistence.consistency_timeout=30.0") == [
        (["execution", "max_workers"], 32),
        (["persistence", "consistency_timeout"], 30.0),
    ]
    assert parse_overrides("") == []


def test_the_history_ends_with_the_committed_results() -> None:
    """bench/operator/history.json's last run is results.json's (run.py --history adds both at once)."""
    runs = json.loads((BENCH / "history.json").read_text())
    results = json.loads((BENCH / "results.json").read_text())
    assert runs[-1] == history_row(results, runs[-1]["what"])
    assert [sorted(run) for run in runs] == [sorted(runs[-1])] * len(runs), "every run has the same figures"
