"""Whether a local run starts fresh or resumes the backup on its volume (dtr_client.local.backups): the pure
rule, the fingerprint, and the shell on a temporary directory (no processes: tests/e2e/test_dtr_run_fresh.py
runs real ones)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
from dtr_cli import cli
from dtr_client.local import backups, start
from dtr_client.local.backups import FRESH, RESUME, Found, Refuse, Start, decide
from dtr_client.local.source import RunError
from dtr_operator.spec import parse_run

from support.runs import digits_run

RUN = parse_run(digits_run("fresh"))
SAME = backups.fingerprint(RUN, "aa")
WHERE = ".dtr/volumes/fresh-data/backup/fresh"
OTHER_RATE = backups.fingerprint(dataclasses.replace(
    RUN, training=dataclasses.replace(RUN.training, learning_rate=0.0001)), "aa")  # fmt: skip
OTHER_CODE = backups.fingerprint(RUN, "bb")


def _found(recorded: dict | None = SAME, phase: str | None = "Failed", present: bool = True) -> Found:
    return Found(present, recorded, phase)


@pytest.mark.parametrize("ask", [None, RESUME, FRESH])
def test_no_backup_starts_fresh_and_says_so_only_when_a_resume_was_asked(ask: str | None) -> None:
    got = decide("fresh", WHERE, _found(present=False), SAME, ask)
    assert isinstance(got, Start) and not got.resume
    assert (got.note is not None) == (ask == RESUME)


@pytest.mark.parametrize("phase", ["Failed", "Succeeded", None])
def test_a_new_run_of_the_same_file_and_options_starts_fresh_saying_how_to_resume(phase: str | None) -> None:
    got = decide("fresh", WHERE, _found(phase=phase), SAME, None)
    assert got == Start(False, got.note) and got.note is not None
    assert "starts fresh" in got.note and "--resume" in got.note and WHERE in got.note


def test_the_same_run_suspended_resumes_and_so_does_the_same_run_asked_to() -> None:
    assert decide("fresh", WHERE, _found(phase="Suspended"), SAME, None).resume is True  # type: ignore[union-attr]
    assert decide("fresh", WHERE, _found(phase="Failed"), SAME, RESUME).resume is True  # type: ignore[union-attr]


def test_fresh_wins_over_a_suspended_run() -> None:
    got = decide("fresh", WHERE, _found(phase="Suspended"), SAME, FRESH)
    assert isinstance(got, Start) and not got.resume and "--fresh" in (got.note or "")


@pytest.mark.parametrize(("other", "named"), [
    (OTHER_RATE, "training.learning_rate 0.002 -> 0.0001"), (OTHER_CODE, "the code file"),
])  # fmt: skip
def test_a_backup_of_other_options_or_code_is_never_resumed(other: dict, named: str) -> None:
    # a run that ended: started fresh, saying what changed
    got = decide("fresh", WHERE, _found(recorded=SAME), other, None)
    assert isinstance(got, Start) and not got.resume and named in (got.note or "")
    # asked to resume it, or it is suspended: refused, naming the change and both ways on
    asked = decide("fresh", WHERE, _found(recorded=SAME), other, RESUME)
    assert isinstance(asked, Refuse) and named in asked.message and "without --resume" in asked.message
    held = decide("fresh", WHERE, _found(recorded=SAME, phase="Suspended"), other, None)
    assert isinstance(held, Refuse) and "is suspended" in held.message and "--fresh" in held.message


def test_a_backup_without_a_record_is_resumed_only_when_asked() -> None:
    assert decide("fresh", WHERE, _found(recorded=None, phase="Suspended"), SAME, None).resume is False  # type: ignore[union-attr]
    asked = decide("fresh", WHERE, _found(recorded=None), SAME, RESUME)
    assert isinstance(asked, Start) and asked.resume and "does not record" in (asked.note or "")


def test_the_fingerprint_ignores_suspend_and_the_uid_and_is_json() -> None:
    moved = dataclasses.replace(RUN, suspend=True, uid="u-1", generation=4)
    assert backups.fingerprint(moved, "aa") == SAME
    assert json.loads(json.dumps(SAME)) == SAME
    assert backups.differences(SAME, SAME) == []


# ---- the shell, on a directory ----------------------------------------------------------------


def _settle(tmp_path: Path, ask: str | None, sha: str = "aa", phase: str | None = None) -> tuple[str | None, Path]:
    backup = tmp_path / "volumes" / "fresh-data" / "backup" / "fresh"
    run_dir = tmp_path / "runs" / "fresh"
    if phase:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "status.json").write_text(json.dumps({"phase": phase}))
    return backups.settle(RUN, sha, backup, run_dir, "status.json", ask), backup


def test_settle_discards_the_backup_of_a_finished_run_and_keeps_a_suspended_ones(tmp_path: Path) -> None:
    note, backup = _settle(tmp_path, None)
    assert note is None, "nothing there: nothing said"
    backup.mkdir(parents=True)
    (backup / "diverged").write_text("epoch 2")
    note, _ = _settle(tmp_path, None, phase="Failed")
    assert "starts fresh" in (note or "") and not backup.exists()
    backup.mkdir(parents=True)
    (backup / "checkpoint").write_text("x")
    note, _ = _settle(tmp_path, None, phase="Suspended")
    assert "resumes" in (note or "") and (backup / "checkpoint").exists()
    with pytest.raises(RunError, match="another file or other options"):
        _settle(tmp_path, RESUME, sha="bb")
    assert (backup / "checkpoint").exists(), "a refused run touches nothing"


def test_data_is_copied_where_the_local_run_reads_it(tmp_path: Path) -> None:
    (tmp_path / "wine.npz").write_bytes(b"npz")
    (tmp_path / "series").mkdir()
    (tmp_path / "series" / "a.csv").write_text("x\n1\n")
    claim = tmp_path / "volumes" / "fresh-data"
    line = start.put_data(RUN, str(claim), str(tmp_path / "wine.npz"))
    assert (claim / "data" / "wine.npz").read_bytes() == b"npz" and "--dataset wine.npz" in line
    start.put_data(RUN, str(claim), str(tmp_path / "series"))
    assert (claim / "data" / "series" / "a.csv").read_text() == "x\n1\n"
    with pytest.raises(RunError, match="not a file or a directory"):
        start.put_data(RUN, str(claim), str(tmp_path / "gone"))


def test_the_command_line_asks_for_a_resume_or_a_fresh_start_not_both(capsys: pytest.CaptureFixture) -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["run", "m.py", "--resume"]).backup == RESUME
    assert parser.parse_args(["run", "m.py", "--fresh", "--data", "d"]).backup == FRESH
    assert parser.parse_args(["run", "m.py"]).backup is None
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "m.py", "--resume", "--fresh"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_run_of_that_name_still_training_here_is_never_touched(tmp_path: Path) -> None:
    got = decide("fresh", WHERE, Found(True, SAME, "Running", 4242), SAME, FRESH)
    assert isinstance(got, Refuse) and "training in this directory already" in got.message and "4242" in got.message
    backup = tmp_path / "volumes" / "fresh-data" / "backup" / "fresh"
    backup.mkdir(parents=True)
    (backup / "checkpoint").write_text("x")
    run_dir = tmp_path / "runs" / "fresh"
    run_dir.mkdir(parents=True)
    (run_dir / "status.json").write_text(json.dumps({"phase": "Running"}))
    other = subprocess.Popen(["sleep", "30"])
    try:
        (run_dir / backups.RECORD).write_text(json.dumps({**SAME, "pid": other.pid}))
        with pytest.raises(RunError, match=f"process {other.pid}"):
            backups.settle(RUN, "aa", backup, run_dir, "status.json", FRESH)
        assert (backup / "checkpoint").exists()
    finally:
        other.kill()
        other.wait()
    # Gone (a dtr run killed outright leaves Running in its status): the rule as for any ended run.
    assert "starts fresh" in (backups.settle(RUN, "aa", backup, run_dir, "status.json", None) or "")
    assert not backup.exists()
