"""dtr_contract.published's pure parts: names in the bucket, the next version, the publish order, the manifest and
what a reader checks against it. The readers' I/O is tested against a real server (tests/s3/)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from dtr_contract import layout, objectstore, published


def test_bookkeeping_lives_inside_the_base_and_versions_are_numbered_below_it():
    assert layout.bucket_claim_key("models/digits", 3) == "models/digits/.dtr-export/claim-3"
    assert layout.bucket_claim_key("", 3) == ".dtr-export/claim-3"
    assert published.version_key("models/digits", 3) == "models/digits/3"
    assert published.manifest_key("", 3) == "3/dtr-manifest.json"
    base = objectstore.Location("bkt", "models/digits")
    assert published.split_version_uri("s3://bkt/models/digits/12") == (base, 12)
    assert published.split_version_uri("s3://bkt/7") == (objectstore.Location("bkt", ""), 7)
    for bad in ("s3://bkt/models/digits", "s3://bkt/models/0", "/mnt/dtr/models/m/1"):
        with pytest.raises(ValueError):
            published.split_version_uri(bad)


def test_the_next_version_is_above_every_version_and_claim_of_this_base_only():
    keys = ["m/1/saved_model.pb", "m/1/dtr-manifest.json", "m/4/variables/variables.index", "m/.dtr-export/claim-6",
            "m/.dtr-export/staging-9-t-a/saved_model.pb", "m/x/1", "other/8/saved_model.pb", "m/10"]
    assert published.version_numbers("m", keys) == {1, 4}
    assert published.claimed_numbers("m", keys) == {6}
    assert published.next_version("m", keys) == 7
    assert published.next_version("m", []) == 1
    assert published.next_version("", ["2/saved_model.pb", ".dtr-export/claim-5"]) == 6


def test_saved_model_pb_is_published_last():
    assert published.publish_order(["variables/variables.index", "saved_model.pb", "lineage.json",
                                    "variables/variables.data-00000-of-00001"]) == [
        "lineage.json", "variables/variables.data-00000-of-00001", "variables/variables.index", "saved_model.pb"]


def test_local_files_lists_every_file_with_size_and_digest_in_publish_order(tmp_path: Path):
    (tmp_path / "variables").mkdir()
    (tmp_path / "saved_model.pb").write_bytes(b"pb")
    (tmp_path / "variables" / "variables.index").write_bytes(b"index!")
    entries = published.local_files(tmp_path)
    assert [(e.path, e.size) for e in entries] == [("variables/variables.index", 6), ("saved_model.pb", 2)]
    assert entries[1].sha256 == hashlib.sha256(b"pb").hexdigest()


MANIFEST = published.Manifest(3, (published.FileEntry("saved_model.pb", 10, "a" * 64),
                                  published.FileEntry("variables/v.index", 4, "b" * 64)),
                              "tok", {"name": "r", "uid": None, "namespace": None}, "2026-12-04T18:00:00Z")


def test_a_manifest_reads_back_and_anything_else_is_none():
    assert published.parse_manifest(MANIFEST.to_json()) == MANIFEST
    for bad in ("", "{}", "[]", '{"format": 2, "version": 1, "files": [{"path": "a", "size": 1, "sha256": "x"}]}',
                '{"format": 1, "version": 1, "files": []}', '{"format": 1, "version": "x", "files": [{}]}'):
        assert published.parse_manifest(bad) is None, bad


def test_a_version_matches_its_manifest_only_with_exactly_its_objects_and_sizes():
    exact = {"saved_model.pb": 10, "variables/v.index": 4}
    assert published.mismatches(MANIFEST, 3, exact) == []
    assert published.mismatches(MANIFEST, 3, {"variables/v.index": 4}) == ["saved_model.pb is missing"]
    assert published.mismatches(MANIFEST, 3, {**exact, "saved_model.pb": 9}) == [
        "saved_model.pb has 9 bytes, the manifest says 10"]
    assert published.mismatches(MANIFEST, 3, {**exact, "extra": 1}) == ["extra is not in the manifest"]
    assert published.mismatches(MANIFEST, 4, exact) == ["its manifest is version 3's"]
