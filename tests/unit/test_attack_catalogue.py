"""The attack catalogue (tests/reliability/attacks/*.yaml) is well formed, and its merge is a deep merge."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliability.catalogue import CatalogueError, load, merged


def test_every_catalogue_entry_is_well_formed_and_ids_are_unique() -> None:
    attacks = load()
    assert attacks, "tests/reliability/attacks/ holds no attack"
    assert len({a.id for a in attacks}) == len(attacks)
    for a in attacks:
        assert a.finding and a.attack and a.reason, a


def test_an_entry_missing_its_reason_or_naming_an_unknown_refuser_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("- {id: a, finding: H1, attack: t, spec: {}, refused_by: crd}\n")
    with pytest.raises(CatalogueError, match="missing \\['reason'\\]"):
        load(tmp_path)
    (tmp_path / "x.yaml").write_text("- {id: a, finding: H1, attack: t, spec: {}, refused_by: me, reason: r}\n")
    with pytest.raises(CatalogueError, match="refused_by"):
        load(tmp_path)


def test_merge_is_deep_for_mappings_and_replaces_lists() -> None:
    base = {"training": {"epochs": 1, "dataset": "digits"}, "tolerations": [{"key": "a"}]}
    got = merged(base, {"training": {"epochs": 9}, "tolerations": [{"operator": "Exists"}]})
    assert got == {"training": {"epochs": 9, "dataset": "digits"}, "tolerations": [{"operator": "Exists"}]}
    assert base["training"]["epochs"] == 1
