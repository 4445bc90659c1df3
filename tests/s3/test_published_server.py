"""The readers of versions published in a bucket (dtr_contract.published; dtr_client.bucket, what `dtr model get`
and fetch_model() run) against a real S3 server: a version counts only with its manifest there and matching, a
download checks every file's SHA-256 and lands whole or not at all, and each refusal says why.

The versions here are written by this test with the store's client, as the trainer's chief writes them
(tests/s3/test_export_s3.py has the trainer itself, and readers in the trainer's Python). Runs in the operator's
environment, where dtr_client is (make test-s3-local).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dtr_cli.cli import main
from dtr_client import bucket, volume
from dtr_client.transfer import TransferError
from dtr_contract import layout, published
from dtr_contract.objectstore import Location, ObjectStore
from dtr_operator import kube

from devcluster import s3
from support.local_exec import VolumeKube
from support.s3store import s3_env, server_fixture, store

BUCKET = "readers"
FILES = {"saved_model.pb": b"graph" * 10, "variables/variables.index": b"index", "lineage.json": b'{"run": {}}'}


server = server_fixture(BUCKET)


def publish_by_hand(c: ObjectStore, base: Location, version: int, tmp: Path, manifest: bool = True) -> None:
    """A version as the trainer's chief leaves it: its files, then (unless cut short) the manifest, last."""
    local = tmp / f"v{version}"
    for rel, body in FILES.items():
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_bytes(body)
    entries = published.local_files(local)
    for entry in entries:
        c.put(BUCKET, f"{published.version_key(base.key, version)}/{entry.path}", local / entry.path)
    c.put(BUCKET, layout.bucket_claim_key(base.key, version), b'{"token": "t"}')
    if manifest:
        body = published.Manifest(version, tuple(entries), "t", {"name": "r"}, "now").to_json().encode()
        c.put(BUCKET, published.manifest_key(base.key, version), body)


def test_only_versions_with_a_matching_manifest_are_published(server: s3.State, tmp_path: Path):
    c, base = store(server), Location(BUCKET, "m/only")
    publish_by_hand(c, base, 1, tmp_path)
    publish_by_hand(c, base, 2, tmp_path, manifest=False)  # a chief killed before its manifest
    publish_by_hand(c, base, 3, tmp_path)
    c.put(BUCKET, "m/only/3/extra.bin", b"x")  # an object the manifest does not list
    publish_by_hand(c, base, 4, tmp_path)
    c.put(BUCKET, "m/only/4/saved_model.pb", b"short")  # a size the manifest does not say
    assert published.published_versions(c, base) == [1]
    with pytest.raises(published.UnpublishedVersion, match=r"has 3 object\(s\) but no dtr-manifest\.json"):
        published.verified_manifest(c, base, 2)
    with pytest.raises(published.UnpublishedVersion, match=r"extra\.bin is not in the manifest"):
        published.verified_manifest(c, base, 3)
    with pytest.raises(published.UnpublishedVersion, match=r"saved_model\.pb has 5 bytes, the manifest says 50"):
        published.verified_manifest(c, base, 4)
    with pytest.raises(published.UnpublishedVersion, match="has no objects"):
        published.verified_manifest(c, base, 9)


def test_a_download_is_the_manifests_files_checked_and_a_changed_one_is_refused(server: s3.State, tmp_path: Path):
    c, base = store(server), Location(BUCKET, "m/dl")
    publish_by_hand(c, base, 1, tmp_path)
    published.download_version(c, "s3://readers/m/dl/1", tmp_path / "got")
    got = {p.relative_to(tmp_path / "got").as_posix(): p.read_bytes() for p in (tmp_path / "got").rglob("*")
           if p.is_file()}  # fmt: skip
    assert {k: v for k, v in got.items() if k != published.MANIFEST_NAME} == FILES
    c.put(BUCKET, "m/dl/1/variables/variables.index", b"INDEX")  # same size, other bytes
    with pytest.raises(published.UnpublishedVersion, match=r"variables/variables\.index changed while it was copied"):
        published.download_version(c, "s3://readers/m/dl/1", tmp_path / "again")


def test_the_clients_get_takes_the_latest_published_and_refuses_the_rest_clearly(server: s3.State, tmp_path: Path):
    c, base = store(server), Location(BUCKET, "m/client")
    publish_by_hand(c, base, 1, tmp_path)
    publish_by_hand(c, base, 2, tmp_path, manifest=False)
    env = s3_env(server)
    line = bucket.get(base, None, tmp_path / "latest", env)
    assert line.startswith("got version 1 (3 file(s), 66 bytes)") and "s3://readers/m/client/1" in line
    assert (tmp_path / "latest" / "saved_model.pb").read_bytes() == FILES["saved_model.pb"]
    with pytest.raises(TransferError, match=r"s3://readers/m/client/2 is not a published model version.*not copied"):
        bucket.get(base, 2, tmp_path / "got-2", env)
    assert not (tmp_path / "got-2").exists() and [p.name for p in tmp_path.iterdir() if "dtr-partial" in p.name] == []
    with pytest.raises(TransferError, match="no published model version in s3://readers/m/none yet"):
        bucket.get(Location(BUCKET, "m/none"), None, tmp_path / "none", env)
    with pytest.raises(TransferError, match="SignatureDoesNotMatch") as wrong:
        bucket.get(base, 1, tmp_path / "wrong", {**env, "AWS_SECRET_ACCESS_KEY": "W" * 40})
    assert "W" * 40 not in str(wrong.value)
    with pytest.raises(TransferError, match="S3_ENDPOINT not set"):
        bucket.get(base, 1, tmp_path / "unset", {k: v for k, v in env.items() if k != "S3_ENDPOINT"})


class OneRun:
    """The one API call `dtr model get` makes before it reads a bucket: the run."""

    def __init__(self, run: dict) -> None:
        self.run = run

    def get_run(self, namespace: str, name: str) -> dict | None:
        return self.run if name == self.run["metadata"]["name"] else None


def test_dtr_model_get_reads_a_runs_version_from_its_bucket_with_no_pod(server: s3.State, tmp_path: Path):
    c, base = store(server), Location(BUCKET, "m/run")
    publish_by_hand(c, base, 1, tmp_path)
    publish_by_hand(c, base, 2, tmp_path)
    run = {"metadata": {"name": "r"}, "spec": {"export": {"storageUri": "s3://readers/m/run"}},
           "status": {"model": {"path": "s3://readers/m/run/1", "version": 1}}}
    reporter = volume.Reporter("get r", quiet=True)
    line = volume.get(OneRun(run), "ns", "r", tmp_path / "m", None, "unused-image", 1.0, reporter, s3_env(server))
    assert line.startswith("r: got version 1 ") and (tmp_path / "m" / "lineage.json").exists()
    line = volume.get(OneRun(run), "ns", "r", tmp_path / "m2", 2, "unused-image", 1.0, reporter, s3_env(server))
    assert "s3://readers/m/run/2 into" in line


def test_the_dtr_model_get_command_downloads_from_the_bucket_with_no_pod(server: s3.State, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch, capsys):
    (tmp_path / "volume").mkdir()
    fake = VolumeKube(tmp_path / "volume", "ml")
    monkeypatch.setattr(kube.Kube, "for_cli", classmethod(lambda cls: fake))
    c, base = store(server), Location(BUCKET, "m/cli")
    publish_by_hand(c, base, 1, tmp_path)
    publish_by_hand(c, base, 2, tmp_path, manifest=False)
    fake.put({"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun",
              "metadata": {"name": "r", "namespace": "ml"}, "spec": {"export": {"storageUri": "s3://readers/m/cli"}},
              "status": {"model": {"path": "s3://readers/m/cli/1", "version": 1}}})  # fmt: skip
    # The keys from the environment, the endpoint from the flag (the environment's is wrong).
    for name, value in s3_env(server, S3_ENDPOINT="http://127.0.0.1:9").items():
        monkeypatch.setenv(name, value)
    assert main(["model", "get", "r", str(tmp_path / "got"), "-n", "ml", "-q", "--s3-endpoint", server.endpoint]) == 0
    assert capsys.readouterr().out.startswith("r: got version 1 (3 file(s), 66 bytes) from s3://readers/m/cli/1")
    assert (tmp_path / "got" / "saved_model.pb").read_bytes() == FILES["saved_model.pb"]
    assert main(["model", "get", "r", str(tmp_path / "two"), "-n", "ml", "-q", "--version", "2",
                 "--s3-endpoint", server.endpoint]) == 1  # fmt: skip
    assert capsys.readouterr().err == ("dtr model get: s3://readers/m/cli/2 is not a published model version: it "
                                       "has 3 object(s) but no dtr-manifest.json (an export that did not finish, or "
                                       "one still under way; docs/models.md#versions-in-a-bucket); not copied\n")
    assert not (tmp_path / "two").exists() and not fake.created


def test_the_python_clients_fetch_model_of_a_local_run_reads_its_bucket(server: s3.State, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    import json

    from dtr_client import TrainingClient
    from dtr_client.local import runner

    c, base = store(server), Location(BUCKET, "m/local")
    publish_by_hand(c, base, 1, tmp_path)
    publish_by_hand(c, base, 2, tmp_path, manifest=False)
    for name, version in (("done", 1), ("cut", 2)):
        (tmp_path / ".dtr" / "runs" / name).mkdir(parents=True)
        status = {"phase": "Succeeded", "model": {"claim": f"{name}-data", "path": f"s3://readers/m/local/{version}"}}
        (tmp_path / ".dtr" / "runs" / name / runner.STATUS_FILE).write_text(json.dumps(status))
    for key, value in s3_env(server).items():
        monkeypatch.setenv(key, value)
    client = TrainingClient("local", local_dir=tmp_path / ".dtr")
    assert client.fetch_model("done", tmp_path / "got") == tmp_path / "got"
    assert (tmp_path / "got" / "variables" / "variables.index").read_bytes() == FILES["variables/variables.index"]
    with pytest.raises(TransferError, match="is not a published model version"):
        client.fetch_model("cut", tmp_path / "cut")
    assert not (tmp_path / "cut").exists()
