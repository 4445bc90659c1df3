"""report.py's arithmetic on records (pure; no cluster)."""

from __future__ import annotations

from report import DRIVEN, DRY_RUN, figures, merge_sessions, render


def rec(area: str, case: str, tried: int, correct: int, **kw: object) -> dict[str, object]:
    return {"area": area, "case": case, "tried": tried, "correct": correct, "lost": kw.pop("lost", 0),
            "duplicated": kw.pop("duplicated", 0), "user_sees": "x", "detail": kw}  # fmt: skip


RECORDS = [
    rec("invalid-input", "range/a", 2, 2, field="spec.workers"),
    rec("invalid-input", "edit/b", 1, 0, field="spec"),
    rec("generated-specs", DRIVEN, 10, 9, accepted=6, accepted_ended_or_explained=5, refused_naming_a_field=4,
        strata={"outcome": {"accepted": 6, "refused": 4}, "refused_fields": {"spec.workers": 3, "spec.image": 2},
                "accepted_paths": {"trains, then watch": 5, "created suspended": 1}}),
    rec("generated-specs", DRY_RUN, 100, 99, kind="dry-run", accepted=60, refused_by_api_server=40,
        refused_naming_a_field=40, disagreements=[{"spec": {"tolerations": {}}, "wrong": "the parser accepts what "
        "the server refused", "server": "422 spec.tolerations: Invalid value"}], status_codes={"201": 60, "422": 40},
        draw={"hypothesis": "6.1", "seed": 18, "max_examples": 100, "derandomize": True, "database": None,
              "phases": ["explicit", "generate"], "local_constants": "pinned off"},
        strata={"outcome": {"accepted": 60, "refused": 40}, "refused_fields": {"spec.workers": 30},
                "accepted_paths": {"trains": 50, "created suspended": 10}}),
    rec("fault", "k", 20, 20, runs=6, runs_correct=6, duplicated=1),
    rec("fault", "t", 2, 2, runs=1, runs_correct=0, lost=1),
]


def test_figures_add_up_from_the_records() -> None:
    f = figures(RECORDS)  # type: ignore[arg-type]
    assert (f["invalid manifests (new runs)"], f["spec edits after creation"]) == (1, 1)
    assert f["invalid inputs sent (manifests x 2 clients + edits)"] == 3
    assert f["refused naming the field"] == 2
    assert f["generated specs driven with the operator running"] == 10 and f["driven specs accepted (runs driven)"] == 6
    assert f["driven specs refused by the API server (naming a field)"] == 4
    # The dry-run specs are counted apart: they make no runs.
    assert f["generated specs sent with server-side dry-run"] == 100 and f["dry-run specs accepted"] == 60
    assert f["dry-run specs refused by the API server"] == 40
    assert f["dry-run specs refused naming a `spec.` field"] == 40
    assert f["dry-run specs where the operator's parser (`dtr render`) disagreed"] == 1
    assert f["faults injected"] == 22
    assert f["runs that ended correctly"] == 6 + 0 + 5
    assert f["runs in total (fault scenarios + accepted generated specs)"] == 7 + 6
    assert (f["objects lost"], f["objects duplicated"]) == (1, 1)


def test_a_red_session_and_missing_scenarios_are_shown() -> None:
    text = render(RECORDS, {"started": 0, "collected": 5, "failed": 2, "exitstatus": 1, "seconds": 3},  # type: ignore[arg-type]
                  {"kube-apiserver": "v", "training-operator": "v", "kubectl": "v", "commit": "c"})  # fmt: skip
    assert "FAILED (2 failed)" in text
    assert "Not recorded" in text and "kube-apiserver SIGKILLed" in text
    assert "| edit/b | `spec` | 0/1 |" in text


def test_the_sessions_of_a_split_run_count_as_one() -> None:
    parts = [{"started": 20, "collected": 127, "failed": 0, "exitstatus": 0, "seconds": 200.0},
             {"started": 10, "collected": 6, "failed": 1, "exitstatus": 1, "seconds": 170.0}]  # fmt: skip
    assert merge_sessions(parts) == {"started": 10, "collected": 133, "failed": 1, "exitstatus": 1, "seconds": 370.0}
    assert merge_sessions(parts[0])["collected"] == 127  # a file from before the split: one session
    assert merge_sessions([]) is None


def test_generated_specs_say_how_to_draw_them_again_and_how_many_of_each() -> None:
    text = render(RECORDS, None, {"kube-apiserver": "v", "training-operator": "v", "kubectl": "v", "commit": "c"})  # type: ignore[arg-type]
    assert "`@seed(18)`, max_examples=100, derandomize=True" in text and "local constants pinned off" in text
    assert "| refused by the API server | 40 | 4 |" in text and "| accepted | 60 | 6 |" in text
    assert "| accepted: trains | 50 | 5 |" in text and "| accepted: trains, then watch |  | 5 |" in text
    assert "| `spec.workers` | 30 | 3 |" in text and "| `spec.image` |  | 2 |" in text
    assert "- disagreement: `{'tolerations': {}}`: the parser accepts what the server refused" in text
    # Both batches are rows of the scenario table, in its columns.
    assert f"| generated-specs | {DRY_RUN} | 100 | 99 | 0 | 0 |" in text
