"""The trainer exporting to a bucket (--export-dir s3://bucket/<base>), real processes against a real S3 server
(SeaweedFS): two MWMS workers publish one version that a reader takes, downloads and scores; two runs exporting
to one base at once get distinct versions; a chief SIGKILLed in the middle of its upload, or of its copies into
<base>/<N>/, leaves no version a reader takes, the next run gets the next number, and a restarted chief of the
killed run reuses its claim and publishes it (docs/models.md#versions-in-a-bucket).

Runs in the trainer's environment (TensorFlow; make test-s3-local). Skipped, saying why, when `weed` was not built;
DTR_S3_REQUIRED=1 fails instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dtr_contract import layout, published
from dtr_contract.objectstore import Location, ObjectStore

from devcluster import s3
from devcluster.controlplane import free_ports
from support.big_model import BIG_MODEL
from support.s3store import s3_env, server_fixture, store
from support.trainer import Volume, Worker, kill_all, start_workers

BUCKET = "models"
pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 9), reason="runs in the trainer's environment "
                                "(.venv/trainer: make test-s3-local)")
CNN = ["--model", "cnn", "--dataset", "digits", "--batch-size-per-worker", "32", "--learning-rate", "0.002",
       "--seed", "7"]  # fmt: skip


server = server_fixture(BUCKET)


def args_for(volume: Volume, base: Location, run: str) -> list[str]:
    """The volume's flags for logs and backups, the export to the bucket (as the operator passes them)."""
    on_volume = volume.args(run=run)
    at = on_volume.index("--export-dir")
    return [*on_volume[:at], "--export-dir", base.uri, *on_volume[at + 2:]]


def train(server: s3.State, volume: Volume, base: Location, run: str, extra: list[str], workers: int = 1,
          attempt: str = "a") -> list[Worker]:  # fmt: skip
    # Logs and termination messages are named by the attempt, beside the volume: one per run and attempt.
    return start_workers(volume, free_ports(workers), [*extra, *args_for(volume, base, run)], f"{run}-{attempt}",
                         s3_env(server, DTR_RUN_NAME=run))  # fmt: skip


def finished(workers: list[Worker]) -> dict:
    """Every worker exited 0; the chief's summary."""
    try:
        codes = [w.wait() for w in workers]
    finally:
        kill_all(workers)
    assert codes == [0] * len(workers), "\n".join(w.log()[-3000:] for w in workers)
    return json.loads(workers[0].stdout_lines()[-1])


def keys(c: ObjectStore, prefix: str) -> list[str]:
    return [o.key for o in c.list(BUCKET, prefix)]


def test_two_workers_publish_a_version_a_reader_takes_downloads_and_scores(server: s3.State, tmp_path: Path):
    c, base = store(server), Location(BUCKET, "team/digits-cnn")
    volume = Volume(tmp_path / "mnt-dtr")
    summary = finished(train(server, volume, base, "two", [*CNN, "--epochs", "4"], workers=2))
    assert (summary["modelPath"], summary["modelVersion"]) == ("s3://models/team/digits-cnn/1", 1)
    assert published.published_versions(c, base) == [1]
    version = {k.split("/", 3)[3] for k in keys(c, "team/digits-cnn/1/")}
    assert {"saved_model.pb", "lineage.json", published.MANIFEST_NAME, "variables/variables.index"} <= version
    # Only the claim and the model name's owner are left of the bookkeeping; no worker left a local copy behind.
    assert keys(c, layout.bucket_bookkeeping_key(base.key) + "/") == [layout.bucket_claim_key(base.key, 1),
                                                                       layout.bucket_owner_key(base.key)]
    assert list(volume.tmp.iterdir()) == []
    manifest = published.download_version(c, summary["modelPath"], tmp_path / "model")
    lineage = json.loads((tmp_path / "model" / "lineage.json").read_text())
    assert lineage["run"]["name"] == "two" and manifest.run is not None and manifest.run["name"] == "two"
    scored = subprocess.run([sys.executable, "-m", "dtr_trainer.score", str(tmp_path / "model")],
                            capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert abs(json.loads(scored.stdout.splitlines()[-1])["accuracy"] - summary["accuracy"]) <= 0.01


def test_two_runs_exporting_to_one_base_at_once_get_distinct_versions(server: s3.State, tmp_path: Path):
    c, base = store(server), Location(BUCKET, "shared/digits")
    # Each lets the other publish under the name (whichever takes it first owns it: docs/models.md).
    runs = [train(server, Volume(tmp_path / f"vol-{r}"), base, r, [*CNN, "--epochs", "1", "--allowed-publishers",
                                                                   "ra,rb"]) for r in ("ra", "rb")]  # fmt: skip
    versions = sorted(finished(w)["modelVersion"] for w in runs)
    assert versions == [1, 2]
    assert published.published_versions(c, base) == [1, 2]


def wait_for_object(c: ObjectStore, prefix: str, chief: Worker, timeout: float = 300) -> list[str]:
    """Poll the bucket until an object appears under prefix; the keys then. The chief must still run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = keys(c, prefix)
        if found:
            return found
        assert chief.proc.poll() is None, f"the chief exited {chief.proc.returncode} first:\n{chief.log()[-3000:]}"
        time.sleep(0.02)
    raise AssertionError(f"nothing under {prefix} after {timeout} s:\n{chief.log()[-3000:]}")


def kill_when(c: ObjectStore, prefix: str, chief: Worker) -> None:
    wait_for_object(c, prefix, chief)
    chief.proc.kill()
    chief.proc.wait()


def test_a_chief_killed_mid_upload_leaves_no_version_a_reader_takes(server: s3.State, tmp_path: Path):
    c, base = store(server), Location(BUCKET, "killed/big")
    code = tmp_path / "big_model.py"
    code.write_text(BIG_MODEL)
    big = ["--code", str(code), "--epochs", "1", "--batch-size-per-worker", "16", "--learning-rate", "0.01",
           "--allowed-publishers", "ka,kb,kc"]  # three runs publish under one name
    staging = layout.bucket_bookkeeping_key(base.key) + "/staging-"
    vol_a, vol_b = Volume(tmp_path / "vol-a"), Volume(tmp_path / "vol-b")
    # Run a: killed while it uploads to its staging prefix (the first staged object is there, the rest not yet).
    kill_when(c, staging, train(server, vol_a, base, "ka", big)[0])
    # Run b: killed while it copies into <base>/2/ (its first object there; saved_model.pb and the manifest last).
    kill_when(c, "killed/big/2/", train(server, vol_b, base, "kb", big)[0])
    left = keys(c, "killed/big/")
    assert any(k.startswith(staging) for k in left), left  # a's upload was cut short
    partial = [k for k in left if k.startswith("killed/big/2/")]
    assert partial and "killed/big/2/saved_model.pb" not in partial, partial  # cut short before the model file
    assert "killed/big/2/" + published.MANIFEST_NAME not in partial
    assert published.published_versions(c, base) == []
    for version in (1, 2):
        with pytest.raises(published.UnpublishedVersion, match="not a published model version"):
            published.download_version(c, f"s3://models/killed/big/{version}", tmp_path / f"got-{version}")
    # The next run gets the next number: the killed ones' claims stand.
    assert finished(train(server, Volume(tmp_path / "vol-c"), base, "kc", [*CNN, "--epochs", "1"]))[
        "modelVersion"] == 3
    assert published.published_versions(c, base) == [3]
    # Run a's chief restarted (same run, same backup dir): its claim, 1, reused; its staging objects removed.
    again = finished(train(server, vol_a, base, "ka", big, attempt="b"))
    assert again["modelPath"] == "s3://models/killed/big/1"
    assert published.published_versions(c, base) == [1, 3]
    assert not [k for k in keys(c, staging) if "-" + token(c, base, 1) + "-" in k]
    # Run b's partial copy stays (it might still come back; a copy in flight at the kill may have landed since) and
    # no reader takes it.
    assert set(keys(c, "killed/big/2/")) >= set(partial)
    assert "killed/big/2/" + published.MANIFEST_NAME not in keys(c, "killed/big/2/")


def token(c: ObjectStore, base: Location, version: int) -> str:
    return json.loads(c.get_bytes(BUCKET, layout.bucket_claim_key(base.key, version)))["token"]


def test_wrong_keys_fail_the_chief_before_training_with_s3s_code(server: s3.State, tmp_path: Path):
    volume = Volume(tmp_path / "mnt-dtr")
    env = s3_env(server, AWS_SECRET_ACCESS_KEY="W" * 40)
    workers = start_workers(volume, free_ports(1), [*CNN, "--epochs", "1", *args_for(volume, Location(BUCKET, "x/m"),
                                                                                     "bad")], "a", env)  # fmt: skip
    try:
        code = workers[0].wait()
    finally:
        kill_all(workers)
    log = workers[0].log()
    # Refused at the first request: who owns the model name (read before any claim), or the claim.
    said = "cannot claim a model version" in log or "who owns" in log
    assert code != 0 and "SignatureDoesNotMatch" in log and said, log[-3000:]
    assert "W" * 40 not in log and server.secret_key not in log
    assert "epoch 1/1 end" not in log  # failed before training
