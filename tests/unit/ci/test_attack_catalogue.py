"""The attack catalogue (tests/reliability/attacks/*.yaml) is well formed, and its merge is a deep merge."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliability.catalogue import Attack, CatalogueError, flag_groups, load, merged


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


def test_flag_groups_share_a_rollout_unless_a_flag_would_take_two_values() -> None:
    def attack(i: str, *args: str) -> Attack:
        return Attack(id=i, finding="X", attack="t", spec={}, refused_by="operator", reason="R", source="s",
                      operator_args=args)

    attacks = [attack("a"), attack("b", "--x=1"), attack("c", "--y=2"), attack("d", "--x=3"), attack("e")]
    groups = [(flags, [a.id for a in members]) for flags, members in flag_groups(attacks)]
    assert groups == [((), ["a", "e"]), (("--x=1", "--y=2"), ["b", "c"]), (("--x=3",), ["d"])]


def test_the_catalogue_needs_few_operator_rollouts() -> None:
    assert len(flag_groups(load())) <= 3
