"""Version claims on the volume (export.py, no TensorFlow): racing chiefs never share a number, a
restarted chief keeps its own, stale-staging cleanup never touches another run's staging dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from dtr_trainer import export
from dtr_trainer.errors import ExportError
from dtr_trainer.lineage import RunIdentity

RACERS = 12


def test_threads_racing_get_distinct_versions(tmp_path):
    models = tmp_path / "models"
    (models / "3").mkdir(parents=True)  # an earlier run's version
    barrier = threading.Barrier(RACERS)
    claims: dict[int, export.Claim] = {}

    def chief(i: int) -> None:
        barrier.wait()
        claims[i] = export.claim_version(str(models), str(tmp_path / "backup" / f"run{i}"), RunIdentity(f"run{i}"))

    threads = [threading.Thread(target=chief, args=(i,)) for i in range(RACERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(c.version for c in claims.values()) == list(range(4, 4 + RACERS))
    assert len({c.token for c in claims.values()}) == RACERS
    for i, claim in claims.items():  # each claim file names its run and token
        body = json.loads(export.claim_file(str(models), claim.version).read_text())
        assert body["token"] == claim.token and body["run"]["name"] == f"run{i}"


RACER = textwrap.dedent("""
    import json, os, sys, time
    from dtr_trainer import export
    from dtr_trainer.lineage import RunIdentity
    models, backup, go = sys.argv[1:4]
    while not os.path.exists(go):
        time.sleep(0.001)
    claim = export.claim_version(models, backup, RunIdentity(os.path.basename(backup)))
    print(json.dumps({"version": claim.version, "token": claim.token}))
""")


def test_processes_racing_get_distinct_versions(tmp_path):
    models, go = tmp_path / "models", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(models), str(tmp_path / "backup" / f"run{i}"), str(go)],
                              stdout=subprocess.PIPE, text=True) for i in range(RACERS)]  # fmt: skip
    time.sleep(1.0)  # every interpreter up and polling
    go.touch()
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0] * RACERS
    assert sorted(o["version"] for o in outs) == list(range(1, RACERS + 1))
    assert list(models.iterdir()) == []  # the model server's base path: versions only, none yet
    claims = sorted(p.name for p in export.bookkeeping_dir(str(models)).iterdir())
    assert claims == sorted(f"claim-{v}" for v in range(1, RACERS + 1))
    assert export.bookkeeping_dir(str(models)) == tmp_path / ".dtr-export" / "models"


def test_a_restarted_chief_keeps_its_claim_and_another_run_never_gets_it(tmp_path):
    models, backup_a, backup_b = str(tmp_path / "models"), str(tmp_path / "a"), str(tmp_path / "b")
    a = export.claim_version(models, backup_a, RunIdentity("a", uid="ua"))
    b = export.claim_version(models, backup_b, RunIdentity("b", uid="ub"))
    assert (a.version, b.version) == (1, 2)
    assert export.claim_version(models, backup_a, RunIdentity("a", uid="ua")) == a  # restart of a
    assert export.claim_version(models, backup_b, RunIdentity("b", uid="ub")) == b
    # run a re-created under the same name (same backup dir, another uid) gets a new number
    assert export.claim_version(models, backup_a, RunIdentity("a", uid="ua2")).version == 3


def test_a_record_whose_claim_is_someone_elses_is_not_reused(tmp_path):
    models, backup = tmp_path / "models", tmp_path / "backup"
    export.bookkeeping_dir(str(models)).mkdir(parents=True)
    backup.mkdir()
    export.claim_file(str(models), 1).write_text(json.dumps({"token": "other"}))
    (backup / export.VERSION_RECORD).write_text(json.dumps({"version": 1, "token": "mine"}))
    assert export.claim_version(str(models), str(backup), RunIdentity()).version == 2


def test_a_bare_version_record_from_before_claims(tmp_path):
    models, backup = tmp_path / "models", tmp_path / "backup"
    (models / "1").mkdir(parents=True)
    backup.mkdir()
    (backup / export.VERSION_RECORD).write_text("1\n")  # exported 1, restarted: reused, now claimed
    claim = export.claim_version(str(models), str(backup), RunIdentity())
    assert claim.version == 1 and export.claim_token(str(models), 1) == claim.token
    (backup / export.VERSION_RECORD).write_text("1\n")  # the same record in another run: 1 is claimed now
    assert export.claim_version(str(models), str(tmp_path / "backup2"), RunIdentity()).version == 2


def test_without_a_backup_dir_every_start_claims_anew(tmp_path):
    models = str(tmp_path / "models")
    assert [export.claim_version(models, None, RunIdentity()).version for _ in range(3)] == [1, 2, 3]


def test_an_unwritable_export_dir_is_one_export_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ExportError, match=r"^cannot claim a model version for --export-dir .*file/m: Not a directory$"):
        export.claim_version(str(blocker / "m"), None, RunIdentity())


def test_stale_staging_cleanup_removes_only_its_own_or_long_dead_dirs(tmp_path):
    models = tmp_path / "models"
    mine = export.claim_version(str(models), None, RunIdentity("mine"))
    other = export.claim_version(str(models), None, RunIdentity("other"))
    bookkeeping = export.bookkeeping_dir(str(models))
    dirs = {
        "own_partial": bookkeeping / f"{mine.staging_prefix}1234",  # this chief, killed mid-save
        "own_replaced": bookkeeping / f"{mine.staging_prefix}replaced-99",
        "other_live": bookkeeping / f"{other.staging_prefix}5678",  # another run saving right now
        "other_dead": bookkeeping / f"{export.Claim(7, 'cccc').staging_prefix}0000",  # untouched for two days
        "legacy_live": models / ".staging-3-0123456789abcdef",  # an older trainer's, inside the export dir
        "legacy_dead": models / ".staging-2-fedcba9876543210",
    }
    for path in dirs.values():
        path.mkdir()
    (models / "1").mkdir()
    two_days_ago = time.time() - 2 * 24 * 3600
    for key in ("other_dead", "legacy_dead"):
        os.utime(dirs[key], (two_days_ago, two_days_ago))
    removed = export.remove_stale_staging(str(models), mine)
    assert sorted(removed) == sorted(dirs[k].name for k in ("own_partial", "own_replaced", "other_dead", "legacy_dead"))
    assert sorted(p.name for p in models.iterdir()) == sorted(["1", dirs["legacy_live"].name])
    assert sorted(p.name for p in bookkeeping.iterdir()) == sorted(["claim-1", "claim-2", dirs["other_live"].name])


@pytest.mark.parametrize("text, expected", [
    ("3\n", (export.Claim(3, ""), None)),
    ('{"version": 3, "token": "t", "runUid": "u"}', (export.Claim(3, "t"), "u")),
    ('{"version": 3, "token": ""}', (None, None)),
    ('{"version": 0, "token": "t"}', (None, None)),
    ("garbage", (None, None)),
    ("[]", (None, None)),
])
def test_parse_record(text, expected):
    assert export.parse_record(text) == expected


def test_save_publishes_only_complete_versions(tmp_path, monkeypatch):
    """The version dir appears by one rename, with the extra files already inside; the export dir
    never holds anything but complete versions."""
    models = tmp_path / "models"
    seen_during_save = []

    def fake_save(model, path, layer_traces):
        Path(path, "variables").mkdir(parents=True)
        Path(path, "saved_model.pb").write_text("pb")
        seen_during_save.append((sorted(p.name for p in models.iterdir()),
                                 sorted(p.name for p in export.bookkeeping_dir(str(models)).iterdir())))

    monkeypatch.setattr(export, "_save", fake_save)
    claim = export.claim_version(str(models), None, RunIdentity())
    final = export.save_everywhere(None, str(models), claim, True, {"lineage.json": "{}\n"})
    assert final == models / "1"
    ((in_export_dir, in_bookkeeping),) = seen_during_save
    assert in_export_dir == [] and in_bookkeeping[0] == "claim-1" and in_bookkeeping[1].startswith(claim.staging_prefix)
    assert (final / "lineage.json").read_text() == "{}\n" and (final / "saved_model.pb").is_file()
    assert sorted(p.name for p in models.iterdir()) == ["1"]
    assert sorted(p.name for p in export.bookkeeping_dir(str(models)).iterdir()) == ["claim-1"]
    # the same chief restarted after publishing exports again: still exactly one version 1
    assert export.save_everywhere(None, str(models), claim, True, {"lineage.json": "{}\n"}) == final
    assert sorted(p.name for p in models.iterdir()) == ["1"]
    assert sorted(p.name for p in export.bookkeeping_dir(str(models)).iterdir()) == ["claim-1"]
