"""docs/gen.py: the generated CRD and the docs' generated sections match their sources now (`make docs`)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import yaml

from support.repo import REPO


def _load_gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_gen", REPO / "docs" / "gen.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


gen = _load_gen()


def test_every_generated_section_is_current() -> None:
    assert gen.stale(REPO) == [], "a generated docs section is stale: run `make docs`"


def test_the_committed_crd_is_the_one_the_field_table_generates(tmp_path) -> None:
    assert gen.stale_files(REPO) == [], "crds/disttrainingrun.yaml is stale: run `make docs`"
    # A hand edit (here: another default) is what the check exists to catch.
    crd = tmp_path / gen.crd.FILE
    crd.parent.mkdir()
    crd.write_text((REPO / gen.crd.FILE).read_text().replace("default: 64", "default: 32", 1))
    (tmp_path / gen.sweep_crd.FILE).write_text((REPO / gen.sweep_crd.FILE).read_text())
    assert gen.stale_files(tmp_path) == [gen.crd.FILE]


def test_every_field_and_reason_has_a_row() -> None:
    table = gen.render_fields(REPO)
    for path, f in gen.schema.walk(gen.fields.SPEC):
        if path != "spec" and "[]" not in path and f.attr:
            assert f"| `{path.removeprefix('spec.')}` |" in table, path
    status = gen.render_status(REPO)
    for path, _ in gen.status_fields.walk():
        assert f"| `{path}` |" in status, path
    reasons = gen.render_reasons(REPO) + gen.render_events(REPO)
    for reason in gen.reasons.REASONS:
        assert f"| `{reason.name}` |" in reasons, reason.name


def test_the_rbac_table_has_every_rule_of_every_manifest() -> None:
    table = gen.render_rbac(REPO)
    roles = [
        (name, doc)
        for name in gen.RBAC_FILES
        for doc in yaml.safe_load_all((REPO / name).read_text())
        if doc and doc["kind"] in ("Role", "ClusterRole")
    ]
    assert len(roles) == 3
    for name, doc in roles:
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    shown = group or '""'
                    row = f"- `{shown}` `{resource}`: {', '.join(rule['verbs'])}\n"
                    assert row in table + "\n", f"{name}: {row}"


def test_the_columns_table_has_every_printer_column() -> None:
    table = gen.render_columns(REPO)
    crd = yaml.safe_load((REPO / gen.CRD_FILE).read_text())
    for column in crd["spec"]["versions"][0]["additionalPrinterColumns"]:
        assert f"| `{column['name'].upper()}` | `{column['jsonPath']}`" in table


def test_a_comment_covers_the_rules_below_it_until_the_next_one() -> None:
    text = """rules:
  # The runs.
  - apiGroups: ["a"]
    resources: ["x"]
    verbs: ["get"]
  - apiGroups: ["a"]
    # inside the second rule.
    resources: ["x/status"]
    verbs: ["get"]
  # Other.
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get"]
  # a trailing remark, on no rule
"""
    assert gen._rule_comments(text) == ["The runs.", "The runs. inside the second rule.", "Other."]


def test_regenerate_replaces_only_the_named_section() -> None:
    begin, end = gen.BEGIN.format(name="x"), gen.END
    text = f"intro\n{begin}\nold\n{end}\nrest\n"
    assert gen.regenerate(text, "x", "new\n") == f"intro\n{begin}\nnew\n{end}\nrest\n"
    try:
        gen.regenerate("no markers", "x", "new")
    except ValueError as exc:
        assert "'x'" in str(exc)
    else:
        raise AssertionError("a missing section must be an error")
