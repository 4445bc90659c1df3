"""A model name's versions belong to their owner (issue 39 item 4, security review R5), through the real CLI and real
MWMS workers on one volume, each run with the environment the operator gives its pods:

1. alice (two workers) exports model `team-model` first: version 1, and the name is hers; she lists carol;
2. bob (two workers), another run of the namespace naming the same model, is refused before it trains: both workers
   exit 11 (dtr_contract.exits.MODEL_NAME_OWNED) with one line naming alice, and no version, claim or record of his
   is left;
3. alice again (a new run object of the same name, so another uid) publishes version 2;
4. carol, listed by alice's runs, publishes version 3.
The same checks without TensorFlow: test_ownership_units.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dtr_contract import exits, flags, layout
from dtr_trainer.errors import EXIT_MODEL_NAME_OWNED

from devcluster.controlplane import free_ports
from support.trainer import Volume, all_entries, integer_dirs, kill_all, start_workers, validate_lineage

MODEL = "team-model"
ARGS = ["--dataset", "digits", "--epochs", "1", "--steps-per-epoch", "3", "--batch-size-per-worker", "16"]
REFUSAL = ("model team-model: its versions belong to run alice, whose spec.export.allowedPublishers does not list this "
           "run: choose another spec.export.modelName, or have a run named alice list bob there")  # fmt: skip


def run_env(name: str, uid: str) -> dict[str, str]:
    """What the operator's builder puts in a worker's env (builders.trainer_env)."""
    return {"DTR_RUN_NAME": name, "DTR_RUN_UID": uid, "DTR_RUN_NAMESPACE": "ml"}


def train(volume: Volume, name: str, uid: str, workers: int, *extra: str) -> tuple[list[int], list]:
    args = [*ARGS, *volume.args(model_name=MODEL, run=f"{name}-{uid}"), *extra]
    started = start_workers(volume, free_ports(workers), args, attempt=f"{name}-{uid}", env_extra=run_env(name, uid))
    try:
        codes = [w.wait() for w in started]
    finally:
        kill_all(started)
    return codes, started


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    volume = Volume(tmp_path_factory.mktemp("owner") / "mnt-dtr")
    done = {"alice": train(volume, "alice", "uid-1", 2, flags.ALLOWED_PUBLISHERS, "carol")}
    done["bob"] = train(volume, "bob", "uid-2", 2)
    done["alice again"] = train(volume, "alice", "uid-3", 1, flags.ALLOWED_PUBLISHERS, "carol")
    done["carol"] = train(volume, "carol", "uid-4", 1)
    return volume, done


def export_dir(volume: Volume) -> Path:
    return volume.root / "models" / MODEL


def logs(workers: list) -> str:
    return "\n".join(w.log()[-2000:] for w in workers)


def test_the_first_run_to_export_owns_the_name_and_lists_who_else_may(runs):
    volume, done = runs
    codes, workers = done["alice"]
    assert codes == [0, 0], logs(workers)
    record = json.loads(Path(layout.owner_file(str(export_dir(volume)))).read_text())
    assert record["owner"] == {"namespace": "ml", "name": "alice"} and record["allowedPublishers"] == ["carol"]


def test_another_run_is_refused_before_it_trains_and_leaves_nothing(runs):
    volume, done = runs
    codes, workers = done["bob"]
    assert codes == [EXIT_MODEL_NAME_OWNED] * 2, logs(workers)
    assert EXIT_MODEL_NAME_OWNED == exits.MODEL_NAME_OWNED and not exits.is_retryable(EXIT_MODEL_NAME_OWNED)
    for worker in workers:
        log = worker.log()
        (error,) = [line for line in log.splitlines() if "error:" in line]
        assert error == f"dtr_trainer[worker-{worker.index}]: error: {REFUSAL}", log[-3000:]
        assert worker.termination_path.read_text() == error + "\n"
        # Before training: no data loaded, no version claimed, no cluster joined, no epoch.
        for later in ("claimed", "worker(s), ", "epoch 1/1", "Traceback"):
            assert later not in log, (later, log[-3000:])
    bookkeeping = Path(layout.bookkeeping_dir(str(export_dir(volume))))
    assert all_entries(bookkeeping) == ["claim-1", "claim-2", "claim-3", "owner"], "three runs exported, bob not"
    claimants = [json.loads((bookkeeping / f"claim-{n}").read_text())["run"]["name"] for n in (1, 2, 3)]
    assert claimants == ["alice", "alice", "carol"], "bob claimed no number"
    assert not (volume.root / "backup" / "bob-uid-2" / "export-version").exists()


def test_the_owners_run_made_again_under_its_name_publishes_the_next_version(runs):
    volume, done = runs
    codes, workers = done["alice again"]
    assert codes == [0], logs(workers)
    lineage = validate_lineage(export_dir(volume) / "2")
    assert (lineage["run"]["name"], lineage["run"]["uid"]) == ("alice", "uid-3")


def test_a_run_the_owner_lists_publishes_and_the_name_stays_the_owners(runs):
    volume, done = runs
    codes, workers = done["carol"]
    assert codes == [0], logs(workers)
    assert integer_dirs(export_dir(volume)) == ["1", "2", "3"]
    assert validate_lineage(export_dir(volume) / "3")["run"]["name"] == "carol"
    assert validate_lineage(export_dir(volume) / "1")["run"]["uid"] == "uid-1"
    record = json.loads(Path(layout.owner_file(str(export_dir(volume)))).read_text())
    assert record["owner"]["name"] == "alice"
