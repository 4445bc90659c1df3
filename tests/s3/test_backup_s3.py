"""Epoch backups kept in a bucket (--backup-uri; trainer/dtr_trainer/backup_s3.py), against a real S3 server
(SeaweedFS), and real trainer processes:

- two MWMS workers, each with a directory of its own (two pods with no shared volume), killed after an epoch; two
  new workers with new empty directories (pods made again on other nodes) resume from the bucket's backup after
  that epoch and publish one version; started once more, they see the export and train nothing;
- a push cut short (its objects there, its `current` not) is never what a pull gets; only the last two
  generations are kept;
- wrong keys fail the worker before training, naming the Secret's keys, with the keys' exit code.

Runs in the trainer's environment (make test-s3-local). Skipped, saying why, when `weed` was not built;
DTR_S3_REQUIRED=1 fails instead.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from dtr_contract import exits, published
from dtr_contract.objectstore import Location, ObjectStore

from devcluster import s3
from devcluster.controlplane import free_ports
from support.s3store import s3_env, server_fixture, store
from support.trainer import Volume, Worker, kill_all, start_workers, wait_for_line

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 9), reason="runs in the trainer's environment "
                                "(.venv/trainer: make test-s3-local)")
BUCKET = "runs"
EPOCHS = 6
CNN = ["--model", "cnn", "--dataset", "digits", "--batch-size-per-worker", "32", "--learning-rate", "0.002",
       "--seed", "7", "--epochs", str(EPOCHS)]  # fmt: skip

server = server_fixture(BUCKET)


def keys(c: ObjectStore, prefix: str) -> list[str]:
    return [o.key for o in c.list(BUCKET, prefix)]


def pods(server: s3.State, tmp: Path, run: str, attempt: str, backup: Location, base: Location) -> list[Worker]:
    """Two workers as two pods with no shared volume: each its own directory (an emptyDir), the backup's copy
    in the bucket, the model published there (the flags the operator passes for spec.storage.volume false)."""
    ports = free_ports(2)
    workers = []
    for index in range(2):
        own = Volume(tmp / f"{attempt}-pod{index}" / "mnt-dtr")
        flags = [*CNN, *own.args(run=run), "--backup-uri", backup.uri]
        at = flags.index("--export-dir")
        flags[at + 1] = base.uri
        env = s3_env(server, DTR_RUN_NAME=run, DTR_RUN_UID="u-1")
        workers += start_workers(own, ports, flags, attempt, env, indices=[index])
    return workers


def test_workers_with_no_shared_volume_resume_from_the_buckets_backup_and_publish_once(server: s3.State,
                                                                                       tmp_path: Path):
    c, backup, base = store(server), Location(BUCKET, "backups/nv"), Location(BUCKET, "models/nv")
    first = pods(server, tmp_path, "nv", "a", backup, base)
    try:
        wait_for_line(first[0], f"epoch 3/{EPOCHS} end")
    finally:
        kill_all(first)
    current = json.loads(c.get_bytes(BUCKET, "backups/nv/current"))
    assert any(name.endswith(".index") for name in current["files"]), current
    assert published.published_versions(c, base) == []

    again = pods(server, tmp_path, "nv", "b", backup, base)  # new pods: their directories start empty
    try:
        codes = [w.wait() for w in again]
    finally:
        kill_all(again)
    logs = [w.log() for w in again]
    assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    for log in logs:
        assert "backup: generation" in log and "resumed from backup at epoch" in log, log[-3000:]
        resumed = int(log.split("resumed from backup at epoch ")[1].split("/")[0])
        assert resumed >= 4, log[-3000:]  # epochs 1..3 ended before the kill; none is trained again
        assert "epoch 1/6 begin" not in log
    summary = json.loads(again[0].stdout_lines()[-1])
    assert summary["modelPath"] == "s3://runs/models/nv/1"
    assert published.published_versions(c, base) == [1]
    # After the export the bucket's backup holds only the export's record: started again, nothing trains.
    assert json.loads(c.get_bytes(BUCKET, "backups/nv/current"))["files"] == ["exported"]
    third = pods(server, tmp_path, "nv", "c", backup, base)
    try:
        assert [w.wait() for w in third] == [0, 0]
    finally:
        kill_all(third)
    assert "has exported its model already" in third[0].log()
    assert json.loads(third[0].stdout_lines()[-1])["modelVersion"] == 1
    assert published.published_versions(c, base) == [1]


def test_a_push_cut_short_is_never_pulled_and_two_generations_are_kept(server: s3.State, tmp_path: Path):
    from dtr_trainer.backup_s3 import BucketBackup

    c, uri = store(server), f"s3://{BUCKET}/backups/gens"
    chief_dir = tmp_path / "chief"
    chief_dir.mkdir()
    chief = BucketBackup(uri, str(chief_dir), c, server.endpoint)
    for epoch in range(1, 5):
        (chief_dir / "checkpoint").write_text(f"epoch {epoch}\n")
        (chief_dir / "workertemp_1").mkdir(exist_ok=True)  # a worker's temporary save: never copied
        (chief_dir / "workertemp_1" / "x").write_text("temp")
        assert chief.push() == epoch
    assert sorted({k.split("/")[2] for k in keys(c, "backups/gens/g-")}) == ["g-3", "g-4"]
    # A push killed after its objects, before its `current`: g-5 is there, and nobody reads it.
    c.put(BUCKET, "backups/gens/g-5/checkpoint", b"epoch 5, half written\n")
    reader = BucketBackup(uri, str(tmp_path / "reader"), c, server.endpoint)
    (tmp_path / "reader").mkdir()
    (tmp_path / "reader" / "stale").write_text("an earlier container's")
    assert reader.pull() == 1
    assert sorted(p.name for p in (tmp_path / "reader").iterdir()) == ["checkpoint"]
    assert (tmp_path / "reader" / "checkpoint").read_text() == "epoch 4\n"
    # The chief that comes back pushes g-5 again, whole, and the cut-short objects do not outlive it.
    (tmp_path / "reader" / "checkpoint").write_text("epoch 5\n")
    assert reader.push() == 5
    assert c.get_bytes(BUCKET, "backups/gens/g-5/checkpoint") == b"epoch 5\n"
    assert sorted({k.split("/")[2] for k in keys(c, "backups/gens/g-")}) == ["g-4", "g-5"]


def test_wrong_keys_fail_a_worker_before_training_naming_the_secrets_keys(server: s3.State, tmp_path: Path):
    own = Volume(tmp_path / "mnt-dtr")
    flags = [*CNN, *own.args(run="bad"), "--backup-uri", f"s3://{BUCKET}/backups/bad"]
    env = s3_env(server, AWS_SECRET_ACCESS_KEY="W" * 40)
    [worker] = start_workers(own, free_ports(1), flags, "a", env)
    try:
        code = worker.wait()
    finally:
        kill_all([worker])
    log = worker.log()
    assert code == exits.OBJECT_STORE_KEYS, log[-3000:]
    assert "refused the keys (SignatureDoesNotMatch)" in log and "credentialsSecret" in log, log[-3000:]
    assert "W" * 40 not in log and server.secret_key not in log
    assert "epoch 1/" not in log
