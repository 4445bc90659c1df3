"""Pure parts of the operator benchmark: percentiles, audit-log request counts, kopf overrides, goals, the table.

No I/O here; bench/operator/run.py measures and calls these (tests/unit/bench/test_bench_operator.py tests them).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# User agents of the operator process: its own REST calls (kube.py) and kopf's (watches, patches, events).
OPERATOR_AGENTS = ("dtr-operator/", "kopf/")
LARGEST_NOTE = (" (the largest spec that expands, tests/support/maximal.py expanding_spec: ~67 KB each, suspended, "
                "so no worker pods)")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def latency_summary(seconds: Sequence[float]) -> dict[str, float | int]:
    """n, p50, p95, min, max in milliseconds (rounded to 0.1 ms)."""
    ms = [s * 1000.0 for s in seconds]

    def r(x: float) -> float:
        return round(x, 1)

    return {
        "n": len(ms),
        "p50_ms": r(percentile(ms, 50)),
        "p95_ms": r(percentile(ms, 95)),
        "min_ms": r(min(ms)) if ms else math.nan,
        "max_ms": r(max(ms)) if ms else math.nan,
    }


def audit_requests(lines: Iterable[str], agents: Sequence[str] = OPERATOR_AGENTS) -> Counter[str]:
    """Requests in audit-log lines (one JSON event per line, stage ResponseComplete) from the given user
    agents, counted by "VERB resource[/subresource]". Watches are counted when their response starts
    (ResponseStarted), so a watch that is still open at the end is counted too."""
    counts: Counter[str] = Counter()
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut mid-write at the window's edge
        if not str(event.get("userAgent", "")).startswith(tuple(agents)):
            continue
        verb = event.get("verb", "?")
        stage = event.get("stage")
        if verb == "watch" and stage != "ResponseStarted":
            continue
        if verb != "watch" and stage != "ResponseComplete":
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource") or event.get("requestURI", "?").split("?")[0]
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        counts[f"{verb} {resource}"] += 1
    return counts


def parse_overrides(text: str) -> list[tuple[list[str], float | int]]:
    """ "execution.max_workers=32,persistence.consistency_timeout=30" -> [(path, value), ...]."""
    out: list[tuple[list[str], float | int]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, raw = item.partition("=")
        value: float | int = float(raw) if "." in raw else int(raw)
        out.append((key.split("."), value))
    return out


def goals(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The issue's three goals, each with the measured value, the target and whether it is met."""
    ours = results["create_to_children"]["p50_ms"]
    ref = results["reference_tfjob_to_pods"]["p50_ms"]
    burst = results["burst"]["seconds_to_all_expanded"]
    rss = results["processes"]["dtr-operator"]["peak_rss_mb"]
    return [
        {"goal": "create->TFJob+PVC p50 <= training-operator TFJob->pods+services p50",
         "value": f"{ours} ms vs {ref} ms", "met": ours <= ref},
        {"goal": f"{results['burst']['runs']} runs expanded in < 20 s",
         "value": f"{burst} s", "met": burst < 20.0},
        {"goal": "operator peak RSS < 150 MB", "value": f"{rss} MB", "met": rss < 150.0},
    ]  # fmt: skip


def history_row(results: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A run's line in bench/operator/history.json: what was measured and the figures the history table shows."""
    env, burst = results["environment"], results["burst"]
    ours = results["processes"]["dtr-operator"]
    running = results.get("running") or {}  # measured since run 19
    return {
        "what": what,
        "finished": env["finished"],
        "loadavg": [env["loadavg_before"][0], env["loadavg_after"][0]],
        "kopf_overrides": list(env.get("kopf_overrides") or []),
        "create_to_children_p50_ms": results["create_to_children"]["p50_ms"],
        "reference_tfjob_to_pods_p50_ms": results["reference_tfjob_to_pods"]["p50_ms"],
        "ratio_p50": results["ratio_ours_to_reference_p50"],
        "tfjob_status_to_run_p50_ms": results["tfjob_status_to_run"]["p50_ms"],
        "burst_runs": burst["runs"],
        "burst_seconds_to_create": burst["seconds_to_create"],
        "burst_seconds_to_all_expanded": burst["seconds_to_all_expanded"],
        "burst_seconds_to_all_status": burst["seconds_to_all_status"],
        "reference_burst_seconds": (results.get("reference_burst") or {}).get("seconds_to_all_pods_and_services"),
        "requests_per_run": burst["operator_requests_per_run"],
        "requests_per_running_run_per_minute": running.get("requests_per_running_run_per_minute"),
        "peak_rss_mb": ours["peak_rss_mb"],
        "cpu_seconds_burst": ours["cpu_seconds_burst"],
    }


def markdown(results: Mapping[str, Any]) -> str:
    """The results as a short markdown page (bench/operator/results.md)."""
    env = results["environment"]
    lat = [
        ("DistTrainingRun created -> TFJob and PVC exist (dtr-operator)", results["create_to_children"]),
        ("TFJob created -> its pods and services exist (training-operator, reference)",
         results["reference_tfjob_to_pods"]),
        ("TFJob status patched -> run status reflects it (dtr-operator)", results["tfjob_status_to_run"]),
    ]  # fmt: skip
    burst = results["burst"]
    out = [
        "# Operator benchmark results",
        "",
        (f"Measured {env['finished']} on {env['cpus']} CPUs (load average before: {env['loadavg_before']}, "
        f"after: {env['loadavg_after']}); control plane built from source, no kubelet (pods stay Pending). "
        f"Settings: {env['operator_args']}"
        + (f" with kopf overrides {', '.join(env['kopf_overrides'])}" if env.get("kopf_overrides") else "")
        + ". Produced by `make bench-operator`."),
        "",
        "| latency (watch-observed) | n | p50 ms | p95 ms | min ms | max ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, s in lat:
        out.append(f"| {label} | {s['n']} | {s['p50_ms']} | {s['p95_ms']} | {s['min_ms']} | {s['max_ms']} |")
    ratio = results.get("ratio_ours_to_reference_p50")
    out += ["", f"Ratio of p50s, dtr-operator / training-operator, in this run: **{ratio}**.", ""]
    running = results.get("running")
    if running:
        by_kind = ", ".join(f"`{k}` {v}" for k, v in sorted(running["operator_requests"].items())) or "none"
        out += [
            (f"With {running['running_runs']} runs Running (TFJob status patched; no pod runs) and nothing else "
             f"happening for {running['seconds']:.0f} s, the operator made "
             f"**{running['requests_per_running_run_per_minute']} API requests per running run per minute** "
             f"({by_kind}): the chief-log reads of status.progress."),
            "",
        ]
    out += [
        "| burst | value |",
        "|---|---:|",
        f"| runs created at once | {burst['runs']}{LARGEST_NOTE if burst.get('largest') else ''} |",
        f"| seconds to create them (client) | {burst['seconds_to_create']} |",
        f"| seconds until all have TFJob and PVC | {burst['seconds_to_all_expanded']} |",
        f"| runs expanded per second | {burst['runs_per_second']} |",
        f"| seconds until every run's status mirrors its TFJob ({burst.get('mirrored_reason', 'TFJobCreated')}) | "
        f"{burst['seconds_to_all_status']} |",
        f"| operator API requests per run (audit log) | {burst['operator_requests_per_run']} |",
    ]
    rb = results.get("reference_burst")
    if rb:
        out += [
            (f"| reference: {rb['tfjobs']} TFJobs created at once, seconds to create them (client) | "
            f"{rb['seconds_to_create']} |"),
            (f"| reference: seconds until the training-operator made all their pods and services | "
            f"{rb['seconds_to_all_pods_and_services']} |"),
            f"| reference: TFJobs expanded per second | {rb['tfjobs_per_second']} |",
        ]
    out += [
        "",
        "| process | peak RSS MB | CPU s (whole run) | CPU s (during the burst) |",
        "|---|---:|---:|---:|",
    ]
    for name, proc in results["processes"].items():
        out.append(
            f"| {name} | {proc['peak_rss_mb']} | {proc['cpu_seconds_total']} | {proc['cpu_seconds_burst']} |"
        )
    out += ["", "| goal | measured | met |", "|---|---|---|"]
    for g in results["goals"]:
        out.append(f"| {g['goal']} | {g['value']} | {'yes' if g['met'] else '**no**'} |")
    out += ["", "Operator requests during the burst, by verb and resource:", ""]
    for key, n in sorted(burst["operator_requests"].items(), key=lambda kv: -kv[1]):
        out.append(f"- `{key}`: {n}")
    out.append("")
    return "\n".join(out)
