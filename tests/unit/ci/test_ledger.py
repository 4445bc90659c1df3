"""The reliability ledger (tests/reliability/ledger.py): CI's steps that record faults (the single node's, the three
nodes') save into one file, at times at once; every record of each must be there after."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from reliability.ledger import Ledger, Record, load

WRITERS, SAVES = 4, 25


def save_cases(path: Path, writer: int) -> None:
    for i in range(SAVES):
        Ledger([Record(area="fault", case=f"writer {writer} case {i}", tried=1, correct=1)]).save(path)


def test_records_saved_at_once_by_several_processes_are_all_kept(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    Ledger([Record(area="fault", case="before", tried=1, correct=0)]).save(path)
    ctx = multiprocessing.get_context("fork")
    writers = [ctx.Process(target=save_cases, args=(path, w)) for w in range(WRITERS)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    assert all(w.exitcode == 0 for w in writers)
    cases = [r["case"] for r in load(path)]
    assert len(cases) == len(set(cases)) == WRITERS * SAVES + 1, len(cases)
    assert not list(tmp_path.glob("*.tmp")), "no half-written file left"


def test_a_newer_record_of_a_case_replaces_the_older(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    Ledger([Record(area="fault", case="a", tried=1, correct=0), Record(area="fault", case="b", tried=1, correct=1)]
           ).save(path)  # fmt: skip
    Ledger([Record(area="fault", case="a", tried=2, correct=2)]).save(path)
    assert {(r["case"], r["tried"], r["correct"]) for r in load(path)} == {("a", 2, 2), ("b", 1, 1)}
