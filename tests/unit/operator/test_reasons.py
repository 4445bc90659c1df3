"""reasons.py is the one home of the operator's reasons: the code names them from there, and the table is sound."""

from __future__ import annotations

import ast

from dtr_operator import reasons

from support.repo import REPO

OPERATOR = REPO / "operator" / "dtr_operator"


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _literal_reasons(tree: ast.AST) -> list[tuple[int, str]]:
    """Reasons spelled as literals: State(phase, "Reason", ...) and emit(body, type, "Reason", ...)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        where = {"State": 1, "emit": 2}.get(_called(node))
        if where is not None and len(node.args) > where:
            arg = node.args[where]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((node.lineno, arg.value))
            if isinstance(arg, ast.IfExp):  # "A" if x else "B"
                found += [(node.lineno, a.value) for a in (arg.body, arg.orelse) if isinstance(a, ast.Constant)]
    return found


def test_the_operator_names_every_reason_from_reasons_py() -> None:
    literals = [
        f"{path.relative_to(OPERATOR)}:{line}: {value!r}"
        for path in sorted(OPERATOR.rglob("*.py"))
        if path.name != "reasons.py"
        for line, value in _literal_reasons(ast.parse(path.read_text()))
    ]
    assert literals == [], "declare these in operator/dtr_operator/reasons.py and use the name"


def test_the_scan_finds_a_literal_reason() -> None:
    code = 'State(PENDING, "Waiting", "m")\nself.emit(body, "Normal", "A" if x else "B", "m")\nemit(b, "N", OK, "m")'
    assert [value for _, value in _literal_reasons(ast.parse(code))] == ["Waiting", "A", "B"]


def test_every_reason_is_declared_once_with_what_it_needs() -> None:
    names = [r.name for r in reasons.REASONS if r.kind != reasons.EVENT]
    assert len(names) == len(set(names))
    for r in reasons.REASONS:
        assert r.kind in (reasons.STATUS, reasons.CONDITION, reasons.EVENT), r
        assert (r.phase in reasons.PHASES) == (r.kind == reasons.STATUS), r
        assert r.meaning and "\n" not in r.meaning and "|" not in r.meaning, r
    # A failed run's event is a Warning whatever its reason; the table says so for the operator's own.
    assert {r.name for r in reasons.REASONS if r.phase == reasons.FAILED} <= reasons.WARNING_REASONS
