"""report.py's arithmetic on records (pure; no cluster)."""

from __future__ import annotations

from report import figures, render


def rec(area: str, case: str, tried: int, correct: int, **kw: object) -> dict[str, object]:
    return {"area": area, "case": case, "tried": tried, "correct": correct, "lost": kw.pop("lost", 0),
            "duplicated": kw.pop("duplicated", 0), "user_sees": "x", "detail": kw}  # fmt: skip


RECORDS = [
    rec("invalid-input", "range/a", 2, 2, field="spec.workers"),
    rec("invalid-input", "edit/b", 1, 0, field="spec"),
    rec("generated-specs", "g", 10, 9, accepted=6, accepted_ended_or_explained=5, refused_naming_a_field=4),
    rec("fault", "k", 20, 20, runs=6, runs_correct=6, duplicated=1),
    rec("fault", "t", 2, 2, runs=1, runs_correct=0, lost=1),
]


def test_figures_add_up_from_the_records() -> None:
    f = figures(RECORDS)  # type: ignore[arg-type]
    assert (f["invalid manifests (new runs)"], f["spec edits after creation"]) == (1, 1)
    assert f["invalid inputs sent (manifests x 2 clients + edits)"] == 3
    assert f["refused naming the field"] == 2
    assert f["generated specs tried"] == 10 and f["generated specs accepted (runs driven)"] == 6
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
