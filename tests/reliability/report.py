#!/usr/bin/env python3
"""Write docs/reliability.md from the suite's results (the JSON tests/reliability writes).

    python tests/reliability/report.py [--results .dtr/reliability/results.json] [--out docs/reliability.md]

Pure formatting: every number in the document comes from the results file; nothing is typed in by hand.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger import load, results_path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# test_node_faults.py's scenarios, by the names it records them under (it takes them from here).
NODE_FAULTS = {
    "kubelet": "kubelet SIGKILLed mid-training, restarted 5 s later (real node)",
    "containerd": "containerd SIGKILLed mid-training, restarted 5 s later (real node)",
    "reboot": "node rebooted mid-training: kubelet, containerd and every container SIGKILLed at once (real node)",
    "oom": "worker OOM-killed by its memory limit, OnFailure, backoffLimit 1 (real node)",
    # The export itself filling the volume: tests/trainer/test_volume.py (a tmpfs under models/ only).
    "full": "the run's volume fills up mid-run: the first checkpoint does not fit (a 1 MiB tmpfs PV; real node)",
    "unwritable": "the run's volume not writable by uid 1000 (a root-owned 0755 hostPath PV; real node)",
}

DRIVEN = "hypothesis specs (derandomized), operator via KopfRunner"
DRY_RUN = "hypothesis specs (derandomized), server-side dry-run, the operator's parser alongside"

# Scenarios the suite records; one missing from the results means its test did not get that far.
EXPECTED = {
    ("unknown-fields", "client behaviour"),
    ("generated-specs", DRIVEN),
    ("generated-specs", DRY_RUN),
    ("fault", "operator SIGKILLed at random points"),
    ("fault", "kube-apiserver SIGKILLed and restarted mid-run"),
    ("fault", "TFJob deleted out-of-band (then an operator restart)"),
    ("fault", "foreign TFJob / PVC already holding the run's child names"),
    ("fault", "PVC deleted under a running job"),
    ("fault", "run deleted while the operator is down"),
    ("fault", "claimName missing, then created (with an operator restart while waiting)"),
    ("security", "restricted PSS enforced: the run's TFJob worker pods"),
    ("security", "restricted PSS enforced: the operator Deployment (deploy/), server dry-run"),
    *(("fault", case) for case in NODE_FAULTS.values()),
}

ELSEWHERE = [
    ("fault", "a worker SIGKILLed mid-run (resumes from backup; `Never` fails naming the worker)",
     ("tests/node/test_real_node.py::"
      "test_worker_container_killed_resumes_from_backup_and_succeeds_and_pods_hold_no_token, "
      "::test_a_killed_worker_under_never_fails_its_run_and_runs_deleted_mid_training_stop_keeping_the_pvc_with_retain "
      "(containers on the real node)")),
    ("fault", "operator pod deleted during a real training run",
     "tests/node/test_operator_pod.py::test_operator_pod_deleted_mid_run_is_replaced_and_the_run_continues_without_duplicates"),
    ("security", "RBAC least privilege: can-i, impersonated run, namespaced mode cannot leave its namespace",
     "tests/integration/test_deploy.py"),
    ("security", "the trainer refuses dataset paths that escape its volume (`escapes --data-dir`)",
     "tests/trainer/test_bad_input.py::test_npz_path_escaping_the_data_dir, tests/trainer/test_units.py"),
]  # fmt: skip


def cell(text: Any, limit: int = 220) -> str:
    s = " ".join(str(text).split()).replace("|", "\\|")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def versions() -> dict[str, str]:
    out = {}
    cache = Path.home() / ".cache" / "dtr" / "bin"
    for component in ("kube-apiserver", "training-operator"):
        f = cache / f"{component}.version"
        out[component] = f.read_text().split()[0] if f.exists() else "?"
    try:
        proc = subprocess.run(["kubectl", "version", "--client", "-o", "json"], capture_output=True, text=True,
                              check=False)
        out["kubectl"] = json.loads(proc.stdout)["clientVersion"]["gitVersion"]
    except (OSError, ValueError, KeyError):
        out["kubectl"] = "?"
    return out


def is_dry_run(record: dict[str, Any]) -> bool:
    return record["area"] == "generated-specs" and record["detail"].get("kind") == "dry-run"


def figures(records: list[dict[str, Any]]) -> dict[str, int]:
    invalid = [r for r in records if r["area"] == "invalid-input"]
    dry = [r for r in records if is_dry_run(r)]
    gen = [r for r in records if r["area"] == "generated-specs" and not is_dry_run(r)]
    faults = [r for r in records if r["area"] == "fault"]
    fault_runs = sum(r["detail"].get("runs", 0) for r in faults)
    fault_runs_ok = sum(r["detail"].get("runs_correct", 0) for r in faults)
    gen_accepted = sum(r["detail"].get("accepted", 0) for r in gen)
    gen_ok = sum(r["detail"].get("accepted_ended_or_explained", 0) for r in gen)
    return {
        "invalid manifests (new runs)": sum(1 for r in invalid if not r["case"].startswith("edit/")),
        "spec edits after creation": sum(1 for r in invalid if r["case"].startswith("edit/")),
        "invalid inputs sent (manifests x 2 clients + edits)": sum(r["tried"] for r in invalid),
        "refused naming the field": sum(r["correct"] for r in invalid),
        "generated specs sent with server-side dry-run": sum(r["tried"] for r in dry),
        "dry-run specs refused by the API server": sum(r["detail"].get("refused_by_api_server", 0) for r in dry),
        "dry-run specs refused naming a `spec.` field": sum(r["detail"].get("refused_naming_a_field", 0) for r in dry),
        "dry-run specs accepted": sum(r["detail"].get("accepted", 0) for r in dry),
        "dry-run specs where the operator's parser (`dtr render`) disagreed": sum(
            len(r["detail"].get("disagreements", [])) for r in dry
        ),
        "generated specs driven with the operator running": sum(r["tried"] for r in gen),
        "driven specs refused by the API server (naming a field)": sum(
            r["detail"].get("refused_naming_a_field", 0) for r in gen
        ),
        "driven specs accepted (runs driven)": gen_accepted,
        "faults injected": sum(r["tried"] for r in faults),
        "runs in fault scenarios": fault_runs,
        "runs that ended correctly": fault_runs_ok + gen_ok,
        "runs in total (fault scenarios + accepted generated specs)": fault_runs + gen_accepted,
        "objects lost": sum(r["lost"] for r in records),
        "objects duplicated": sum(r["duplicated"] for r in records),
    }


def draw_line(d: dict[str, Any]) -> str:
    """How to draw the same specs again (specgen.py)."""
    if not d:
        return "draw settings not recorded"
    return (
        f"hypothesis {d.get('hypothesis')}, `@seed({d.get('seed')})`, max_examples={d.get('max_examples')}, "
        f"derandomize={d.get('derandomize')}, database={d.get('database')}, phases: "
        f"{'+'.join(d.get('phases', []))} (no shrinking), hypothesis' local constants {d.get('local_constants')}"
    )


def strata_tables(dry: dict[str, Any] | None, driven: dict[str, Any] | None) -> list[str]:
    """How many specs fell in each stratum, side by side: outcome and path, then the fields refusals named."""
    sd = (dry or {}).get("detail", {}).get("strata", {})
    sg = (driven or {}).get("detail", {}).get("strata", {})
    driven_paths = dict(sg.get("accepted_paths", {}))
    trains = [n for p, n in driven_paths.items() if p.startswith("trains, then ")]
    if trains:
        driven_paths.setdefault("trains", sum(trains))
    sg = {**sg, "accepted_paths": driven_paths}
    paths = sorted({*sd.get("accepted_paths", {}), *driven_paths})
    rows = [("refused by the API server", sd.get("outcome", {}).get("refused"), sg.get("outcome", {}).get("refused")),
            ("accepted", sd.get("outcome", {}).get("accepted"), sg.get("outcome", {}).get("accepted"))]  # fmt: skip
    rows += [(f"accepted: {p}", sd.get("accepted_paths", {}).get(p, ""), sg.get("accepted_paths", {}).get(p, ""))
             for p in paths]  # fmt: skip
    out = ["| stratum | sent with dry-run | driven |", "|---|---:|---:|"]
    out += [f"| {name} | {'' if a is None else a} | {'' if b is None else b} |" for name, a, b in rows]
    fd, fg = sd.get("refused_fields", {}), sg.get("refused_fields", {})
    fields = sorted({*fd, *fg}, key=lambda f: (-fd.get(f, 0), -fg.get(f, 0), f))
    title = ("Refusals by the field they named (a refusal naming several fields counts under each; map keys and "
             "list indices dropped):")  # fmt: skip
    out += ["", title, "", "| field named | sent with dry-run | driven |", "|---|---:|---:|"]
    out += [f"| `{f}` | {fd.get(f, '')} | {fg.get(f, '')} |" for f in fields]
    return out


def generated_section(records: list[dict[str, Any]]) -> list[str]:
    dry = next((r for r in records if is_dry_run(r)), None)
    gen = next((r for r in records if r["area"] == "generated-specs" and not is_dry_run(r)), None)
    if not (dry or gen):
        return []
    out = ["## Generated specs", ""]
    out.append("One strategy (tests/reliability/specgen.py): each field valid most of the time, out of bounds or "
               "malformed sometimes; two specs in three draw valid values only.")  # fmt: skip
    out.append("")
    if dry:
        d = dry["detail"]
        out.append(
            f"Sent with server-side dry-run (tests/reliability/test_generated_specs_dry_run.py): {dry['tried']} "
            f"drawn; {d.get('accepted')} accepted, and the operator's parser (dtr_operator.spec.parse_run, what "
            f"`dtr render` and `dtr run` use) accepted {d.get('parser_accepts_accepted')} of them, "
            f"{d.get('parser_same_defaults')} with the server's defaults; {d.get('refused_by_api_server')} refused "
            f"(HTTP {', '.join(f'{k}: {v}' for k, v in d.get('status_codes', {}).items() if k != '201')}), "
            f"{d.get('refused_naming_a_field')} naming a `spec.` field, and the parser refused "
            f"{d.get('parser_refuses_refused')} of them, {d.get('parser_names_a_field_the_server_named')} naming a "
            f"field the server named ({d.get('parser_names_a_field_the_server_had_not_reached')} another, which "
            f"the server had not validated yet). Refusals were peeled: {d.get('peeled_sent')} more specs sent with "
            f"the named fields removed, until both accepted ({d.get('peeled_accepted_by_both')}) or disagreed. "
            f"Disagreements: {len(d.get('disagreements', []))}; runs stored: {d.get('stored')}; "
            f"{d.get('dry_run_creates')} dry-run creates in {d.get('seconds')} s ({d.get('per_request_ms')} ms each)."
        )
        for dis in d.get("disagreements", [])[:20]:
            out.append(f"- disagreement: `{cell(dis.get('spec'), 300)}`: {cell(dis.get('wrong'), 300)} "
                       f"(server: {cell(dis.get('server'), 200)})")  # fmt: skip
        out.append("")
        out.append(f"Drawn with {draw_line(d.get('draw', {}))}.")
        out.append("")
    if gen:
        d = gen["detail"]
        out.append(
            f"Driven with the operator running (tests/reliability/test_generated_specs.py): {gen['tried']} drawn "
            f"until {d.get('accepted')} were accepted; {d.get('refused_by_api_server')} refused by the API server on "
            f"the way, {d.get('refused_naming_a_field')} of them naming a field; the {d.get('accepted')} accepted "
            f"were driven (the endings in turn among those that train), {d.get('accepted_ended_or_explained')} "
            f"of them ended "
            f"(Succeeded/Failed) or waited with phase, reason and message; children outside the run's "
            f"namespace: {d.get('children_outside_namespace')}; operator crashed: {d.get('operator_crashed')}; "
            f"retry attempts of runs waiting for a PVC: {d.get('waiting_runs_attempts')} (the backoff bound held)."
        )
        out.append("")
        out.append(f"Drawn with {draw_line(d.get('draw', {}))}.")
        out.append("")
    out.append("How many of each (an accepted run's path: what the spec asks for; \"trains, then E\": the suite "
               "played the kubelet to the ending E):")  # fmt: skip
    out.append("")
    out += strata_tables(dry, gen)
    out.append("")
    return out


def attack_section(records: list[dict[str, Any]]) -> list[str]:
    """The attack suite (test_attacks.py, on the real node): each attack, who refused it, what the author saw."""
    attacks = [r for r in records if r["area"] == "attack"]
    if not attacks:
        return []
    refused = sum(r["correct"] for r in attacks)
    elsewhere = sorted({str((r.get("detail") or {})["where"]) for r in attacks if (r.get("detail") or {}).get("where")})
    out = ["## Attacks (tests/reliability/test_attacks.py on the real node, test_attacks_api.py on the API server)", "",
           "As a user who may only create runs and ConfigMaps in one namespace (impersonated), the operator as "
           "deploy/ ships it unless the row names flags; a row that names a teammate, as one holding the `edit` "
           "role there, with the operator of the checkout"
           + (f" ({'; '.join(elsewhere)}, marked *)" if elsewhere else "")
           + f": {len(attacks)} attacks tried, {refused} refused or harmless. Finding: its id in the project's "
           f"security reviews (H1-H3, M1-M6, L1-L11; R1-R14 of the second); the specs sent: "
           f"tests/reliability/attacks/*.yaml.",
           "", "| attack | finding | refused by | as | what the author got |", "|---|---|---|---|---|"]  # fmt: skip
    for r in sorted(attacks, key=lambda r: r["case"]):
        d = r.get("detail") or {}
        verdict = "" if r["correct"] == r["tried"] else "**NOT REFUSED** "
        where = " *" if d.get("where") else ""
        out.append(f"| {cell(r['case'], 200)}{where} | {d.get('finding', r['case'].split('-')[0])} | "
                   f"{d.get('refused_by', 'the node')} | {cell(d.get('reason', ''), 60)} | "
                   f"{verdict}{cell(r['user_sees'], 300)} |")  # fmt: skip
    out.append("")
    return out


def merge_sessions(sessions: list[dict[str, Any]] | dict[str, Any]) -> dict[str, Any] | None:
    """The pytest sessions since the results were reset, as one (make test runs the suite in two parts)."""
    sessions = sessions if isinstance(sessions, list) else [sessions]
    if not sessions:
        return None
    return {
        "started": min((s.get("started") or 0 for s in sessions), default=0) or None,
        "collected": sum(s.get("collected", 0) for s in sessions),
        "failed": sum(s.get("failed", 0) for s in sessions),
        "exitstatus": max(s.get("exitstatus", 0) for s in sessions),
        "seconds": round(sum(s.get("seconds", 0) for s in sessions), 1),
    }


def render(records: list[dict[str, Any]], session: dict[str, Any] | None, meta: dict[str, str]) -> str:  # noqa: C901
    lines: list[str] = []
    add = lines.append
    add("# Reliability and security: what was tried and what survived")
    add("")
    add("Generated by `make test-reliability` (the suite `tests/reliability/` writes "
        "`.dtr/reliability/results.json`; `python tests/reliability/report.py` turns it into this page). "
        "Do not edit by hand.")  # fmt: skip
    add("")
    if session:
        started = session.get("started")
        when = datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%d %H:%M UTC") if started else "?"
        state = "passed" if session.get("exitstatus") == 0 else f"FAILED ({session.get('failed')} failed)"
        # Its duration stays in results.json: what the suite costs has one home, docs/cluster.md#what-ci-costs.
        add(f"Last run: {when}, {session.get('collected')} tests, {state} "
            "(what the suite costs: [cluster.md](cluster.md#what-ci-costs)).")  # fmt: skip
    add(
        f"Against kube-apiserver {meta['kube-apiserver']}, training-operator {meta['training-operator']}, "
        f"kubectl {meta['kubectl']}; commit {meta['commit']}."
    )
    add("")
    add("## Figures")
    add("")
    add("| figure | count |")
    add("|---|---:|")
    for name, value in figures(records).items():
        add(f"| {name} | {value} |")
    add("")
    short = [r for r in records if r["correct"] < r["tried"]]
    if short:
        add("**Did not survive as required:**")
        add("")
        for r in short:
            add(f"- {r['area']} / {r['case']}: {r['correct']} of {r['tried']}: {cell(r['user_sees'], 900)}")
        add("")
    missing = sorted(EXPECTED - {(r["area"], r["case"]) for r in records})
    if missing:
        add("**Not recorded (the test stopped before recording):** " + "; ".join(f"{a}: {c}" for a, c in missing))
        add("")

    add("## Faults and security")
    add("")
    add("| area | scenario | tried | survived | lost | duplicated | what the user sees |")
    add("|---|---|---:|---:|---:|---:|---|")
    for r in records:
        if r["area"] in ("fault", "security", "generated-specs"):
            add(f"| {r['area']} | {cell(r['case'])} | {r['tried']} | {r['correct']} | {r['lost']} | "
                f"{r['duplicated']} | {cell(r['user_sees'], 400)} |")  # fmt: skip
    for area, case, where in ELSEWHERE:
        add(f"| {area} | {cell(case)} | see | {where} | | | |")
    add("")
    kill = next((r for r in records if r["case"] == "operator SIGKILLed at random points"), None)
    if kill:
        points = Counter(p.split()[0] for p in kill["detail"].get("kill_points", []))
        add(
            f"Operator kills: {kill['tried']} SIGKILLs, {kill['detail'].get('operator_starts')} starts, "
            f"{kill['detail'].get('runs')} runs; killed right after: "
            + ", ".join(f"{k} ({v})" for k, v in sorted(points.items()))
            + "."
        )
        add("")

    lines += attack_section(records)
    lines += generated_section(records)

    unknown = next((r for r in records if r["area"] == "unknown-fields"), None)
    if unknown:
        add("## Unknown fields: what each client really does")
        add("")
        add("The schema is structural, so the API server prunes unknown fields unless the request asks for "
            "strict field validation. kubectl asks for it by default, so users see a refusal:")  # fmt: skip
        add("")
        add("| client | result |")
        add("|---|---|")
        for client, result in unknown["detail"].items():
            add(f"| `{client}` | {cell(result, 300)} |")
        add("")

    invalid = [r for r in records if r["area"] == "invalid-input"]
    if invalid:
        add("## Invalid DistTrainingRuns (tests/reliability/invalid_runs.yaml)")
        add("")
        groups = Counter(r["case"].split("/")[0] for r in invalid)
        add("By kind: " + ", ".join(f"{g} {n}" for g, n in sorted(groups.items())) + ". Each new manifest is sent "
            "with `kubectl apply` and `kubectl create`; each edit case creates a valid run and then changes its "
            "spec (merge/JSON patch, apply, replace).")  # fmt: skip
        add("")
        add("| case | field named | refused | the API server's answer |")
        add("|---|---|---:|---|")
        for r in invalid:
            add(f"| {r['case']} | `{r['detail'].get('field')}` | {r['correct']}/{r['tried']} | "
                f"{cell(r['user_sees'], 260)} |")
        add("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(results_path()))
    parser.add_argument("--out", default=str(REPO / "docs" / "reliability.md"))
    args = parser.parse_args(argv)
    records = load(Path(args.results))
    if not records:
        print(f"report.py: no results in {args.results}; run `make test-reliability` first", file=sys.stderr)
        return 1
    session_file = Path(args.results).with_suffix(".session.json")
    session = merge_sessions(json.loads(session_file.read_text())) if session_file.exists() else None
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip() or "?"  # fmt: skip
    text = render(records, session, {**versions(), "commit": commit})
    Path(args.out).write_text(text + "\n")
    print(f"wrote {args.out} ({len(records)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
