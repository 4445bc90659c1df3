"""Who may publish versions of a model name (dtr_trainer.ownership; issue 39 item 4, security review R5), without
TensorFlow: the record's format, the decision, the volume's exclusive create and the bucket's, each refusal's line.
The real workers: test_model_owner.py."""

from __future__ import annotations

import argparse
import json
import os
import threading
from pathlib import Path

import pytest
from dtr_contract import exits, layout
from dtr_contract.objectstore import ObjectStoreError
from dtr_trainer import ownership
from dtr_trainer.errors import EXIT_MODEL_NAME_OWNED, ExportError, ModelNameOwnedError
from dtr_trainer.lineage import RunIdentity
from dtr_trainer.ownership import Owner

ALICE, BOB, CAROL = (RunIdentity(name, uid=f"uid-{name}", namespace="ml") for name in ("alice", "bob", "carol"))
HAND = RunIdentity()  # a trainer started by hand: no DTR_RUN_NAME


def models(tmp_path: Path) -> str:
    return str(tmp_path / "models" / "digits-cnn")


def owner_on_disk(export_dir: str) -> dict:
    return json.loads(Path(layout.owner_file(export_dir)).read_text())


def refused(export_dir: str, run: RunIdentity, **kwargs) -> str:
    with pytest.raises(ModelNameOwnedError) as err:
        ownership.admit(export_dir, run, **kwargs)
    assert err.value.exit_code == EXIT_MODEL_NAME_OWNED == exits.MODEL_NAME_OWNED
    assert not exits.is_retryable(EXIT_MODEL_NAME_OWNED) and exits.is_model_name_owned(EXIT_MODEL_NAME_OWNED)
    return str(err.value)


# ---------------------------------------------------------------- pure


def test_the_owner_admits_its_own_name_in_its_namespace_and_the_runs_it_lists():
    owner = Owner("ml", "alice", ("carol",))
    assert owner.admits(ALICE) and owner.admits(RunIdentity("alice", uid="another-uid", namespace="ml"))
    assert owner.admits(CAROL)
    assert not owner.admits(BOB)
    assert not owner.admits(RunIdentity("alice", namespace="other")), "a run of the name in another namespace"
    assert not owner.admits(RunIdentity("carol", namespace="other"))
    assert not owner.admits(HAND)


def test_a_record_reads_back_what_was_written_and_nothing_else_is_one():
    owner = Owner("ml", "alice", ("bob", "carol"), "2026-12-01T00:00:00Z")
    body = ownership.render(owner, "2026-12-05T00:00:00Z")
    assert ownership.parse(body) == owner
    assert json.loads(body)["updatedAt"] == "2026-12-05T00:00:00Z"
    assert json.loads(ownership.render(Owner("ml", "a"), "T"))["since"] == "T"
    for bad in (b"", b"\xff", b"[]", b"{}", b'{"owner": "alice"}', b'{"owner": {"name": 3}}',
                b'{"owner": {"name": "a"}, "allowedPublishers": "b"}', b'{"owner": {"name": "a", "namespace": 1}}',
                b'{"owner": {"name": "a"}, "allowedPublishers": [1]}'):  # fmt: skip
        with pytest.raises(ValueError):
            ownership.parse(bad)


@pytest.mark.parametrize("text, names", [
    ("", ()), ("bob", ("bob",)), ("bob,carol", ("bob", "carol")), (" bob , carol,bob,", ("bob", "carol")),
])  # fmt: skip
def test_allowed_publishers_are_run_names_comma_separated(text, names):
    assert ownership.run_names(text) == names


@pytest.mark.parametrize("text, words", [
    ("Bob", "not a run name"), ("bob/x", "not a run name"), ("1bob", "not a run name"), ("b" * 64, "not a run name"),
    (",".join(f"r{i}" for i in range(ownership.MAX_PUBLISHERS + 1)), "at most 64"),
])  # fmt: skip
def test_anything_else_is_refused_on_the_command_line(text, words):
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        ownership.run_names(text)


def test_the_refusal_names_the_owner_the_refused_run_and_both_ways_on():
    line = ownership.refusal("digits-cnn", Owner("ml", "alice", ("carol",)), BOB)
    assert line == ("model digits-cnn: its versions belong to run alice, whose spec.export.allowedPublishers does "
                    "not list this run: choose another spec.export.modelName, or have a run named alice list bob "
                    "there")  # fmt: skip
    elsewhere = ownership.refusal("s3://b/m", Owner("ml", "alice"), RunIdentity("bob", namespace="team-b"))
    assert "run ml/alice," in elsewhere and "list team-b/bob there" in elsewhere, "a bucket may be shared"
    # Long names: a modelName of 63 characters (the most), run names of 32: the status message (400 characters)
    # keeps the line whole, the ways on included; at the API's extremes (run names of 52) it cuts the end.
    long = ownership.refusal("m" * 63, Owner("ml", "a" * 32), RunIdentity("r" * 32, namespace="ml"))
    worker = f" (worker {'r' * 32}-worker-63, exit code {EXIT_MODEL_NAME_OWNED})"
    assert len(long + worker) <= 400, len(long + worker)
    assert long.index("a" * 32) < 160, "the owner is named early"
    assert "started without DTR_RUN_NAME" in ownership.refusal("m", Owner("ml", "alice"), HAND)


def test_the_model_is_named_by_its_name_on_a_volume_and_by_its_uri_in_a_bucket():
    assert ownership.model_label("/mnt/dtr/models/digits-cnn/") == "digits-cnn"
    assert ownership.model_label("s3://bucket/teams/a/digits") == "s3://bucket/teams/a/digits"


# ---------------------------------------------------------------- on a volume


def test_the_first_run_to_claim_owns_the_name_and_others_are_refused(tmp_path):
    export_dir = models(tmp_path)
    ownership.admit(export_dir, BOB)  # nobody owns it: a check alone writes nothing and admits
    assert not Path(layout.owner_file(export_dir)).exists()
    ownership.admit(export_dir, ALICE, ("carol",), take=True)
    assert owner_on_disk(export_dir)["owner"] == {"namespace": "ml", "name": "alice"}
    assert owner_on_disk(export_dir)["allowedPublishers"] == ["carol"]
    for take in (False, True):
        line = refused(export_dir, BOB, take=take)
        assert "belong to run alice," in line and "list bob there" in line
    ownership.admit(export_dir, CAROL, ("dave",), take=True)  # listed: admitted, and the owner's list stays
    assert owner_on_disk(export_dir)["owner"]["name"] == "alice"
    assert owner_on_disk(export_dir)["allowedPublishers"] == ["carol"]
    refused(export_dir, HAND, take=True)


def test_the_owners_next_run_replaces_its_list_and_keeps_the_name(tmp_path):
    export_dir = models(tmp_path)
    ownership.admit(export_dir, ALICE, take=True)
    since = owner_on_disk(export_dir)["since"]
    again = RunIdentity("alice", uid="uid-2", namespace="ml")  # deleted and created again
    ownership.admit(export_dir, again, ("bob",), take=True)
    assert owner_on_disk(export_dir)["allowedPublishers"] == ["bob"] and owner_on_disk(export_dir)["since"] == since
    ownership.admit(export_dir, BOB, take=True)
    ownership.admit(export_dir, again, take=False)  # a check never writes
    assert owner_on_disk(export_dir)["allowedPublishers"] == ["bob"]
    ownership.admit(export_dir, again, (), take=True)
    refused(export_dir, BOB)


def test_a_name_exported_before_owners_were_recorded_goes_to_the_next_run_that_claims(tmp_path):
    export_dir = models(tmp_path)
    (Path(export_dir) / "1").mkdir(parents=True)
    Path(layout.claim_file(export_dir, 1)).parent.mkdir(parents=True)
    Path(layout.claim_file(export_dir, 1)).write_text('{"version": 1}')
    ownership.admit(export_dir, BOB, take=True)
    assert owner_on_disk(export_dir)["owner"]["name"] == "bob"


def test_a_trainer_that_does_not_know_its_run_takes_nothing(tmp_path):
    export_dir = models(tmp_path)
    ownership.admit(export_dir, HAND, take=True)
    assert not Path(layout.owner_file(export_dir)).exists()


def test_a_record_that_is_not_one_refuses_everyone_naming_the_file(tmp_path):
    export_dir = models(tmp_path)
    path = Path(layout.owner_file(export_dir))
    path.parent.mkdir(parents=True)
    path.write_text("")
    line = refused(export_dir, ALICE, take=True)
    assert str(path) in line and "not an owner record" in line


def test_racing_chiefs_leave_one_owner_and_refuse_the_others(tmp_path):
    export_dir = models(tmp_path)
    runs = [RunIdentity(f"run-{i}", namespace="ml") for i in range(12)]
    outcomes: dict[str, str] = {}

    def claim(run: RunIdentity) -> None:
        try:
            ownership.admit(export_dir, run, take=True)
            outcomes[run.name] = "admitted"
        except ModelNameOwnedError:
            outcomes[run.name] = "refused"

    threads = [threading.Thread(target=claim, args=(run,)) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    owner = owner_on_disk(export_dir)["owner"]["name"]
    assert outcomes == {run.name: "admitted" if run.name == owner else "refused" for run in runs}
    assert sorted(p.name for p in Path(layout.owner_file(export_dir)).parent.iterdir()) == ["owner"]


def test_a_volume_without_hard_links_creates_the_record_exclusively_all_the_same(tmp_path, monkeypatch):
    def no_links(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    export_dir = models(tmp_path)
    ownership.admit(export_dir, ALICE, take=True)
    assert owner_on_disk(export_dir)["owner"]["name"] == "alice"
    refused(export_dir, BOB, take=True)


def test_a_volume_that_cannot_be_written_is_an_export_error_naming_the_record(tmp_path):
    (tmp_path / "models").write_text("a file where the models directory should be")
    with pytest.raises(ExportError) as err:
        ownership.admit(str(tmp_path / "models" / "m"), ALICE, take=True)
    assert "who owns model m" in str(err.value) and "owner" in str(err.value)


# ---------------------------------------------------------------- in a bucket


class FakeStore:
    """The ObjectStore calls a BucketRecord makes: get_bytes, create (If-None-Match: *), put."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}

    def get_bytes(self, bucket: str, key: str) -> bytes:
        if (bucket, key) not in self.objects:
            raise ObjectStoreError("NoSuchKey", 404, "get", f"{bucket}/{key}")
        return self.objects[bucket, key]

    def create(self, bucket: str, key: str, body: bytes) -> bool:
        if (bucket, key) in self.objects:
            return False
        self.objects[bucket, key] = body
        return True

    def put(self, bucket: str, key: str, body: bytes) -> str:
        self.objects[bucket, key] = body
        return "etag"


def test_a_bucket_base_has_an_owner_too_beside_its_claims():
    store = FakeStore()
    base = "s3://models/team/digits"
    ownership.admit(base, BOB, store=store)
    assert not store.objects
    ownership.admit(base, ALICE, ("carol",), take=True, store=store)
    assert list(store.objects) == [("models", "team/digits/.dtr-export/owner")]
    line = refused(base, BOB, take=True, store=store)
    assert line.startswith("model s3://models/team/digits: its versions belong to run alice,")
    ownership.admit(base, CAROL, take=True, store=store)
    ownership.admit(base, ALICE, (), take=True, store=store)
    refused(base, CAROL, store=store)


def test_a_store_that_does_not_answer_is_retryable_and_another_refusal_an_export_error():
    class Failing(FakeStore):
        def __init__(self, err: ObjectStoreError) -> None:
            super().__init__()
            self.err = err

        def get_bytes(self, bucket: str, key: str) -> bytes:
            raise self.err

    with pytest.raises(Exception) as err:
        ownership.admit("s3://bucket/m", ALICE, store=Failing(ObjectStoreError("SlowDown", 503, "get", "m")))
    assert err.value.exit_code == exits.OBJECT_STORE_UNREACHABLE
    with pytest.raises(ExportError):
        ownership.admit("s3://bucket/m", ALICE, store=Failing(ObjectStoreError("AccessDenied", 403, "get", "m")))


# ---------------------------------------------------------------- again at export


def test_the_chief_checks_again_just_before_its_version_appears(tmp_path, monkeypatch):
    """Carol was listed when she claimed; the owner's next run dropped her while she trained: her chief's last check,
    just before the rename, refuses, and no version, no staging directory is left (only her claim)."""
    from dtr_trainer import export

    def fake_save(model, path, layer_traces):
        Path(path, "variables").mkdir(parents=True)
        Path(path, "saved_model.pb").write_text("pb")

    monkeypatch.setattr(export, "_save", fake_save)
    export_dir = models(tmp_path)
    ownership.admit(export_dir, ALICE, ("carol",), take=True)
    ownership.admit(export_dir, CAROL, take=True)
    claim = export.claim_version(export_dir, None, CAROL)
    ownership.admit(export_dir, RunIdentity("alice", uid="uid-2", namespace="ml"), (), take=True)
    with pytest.raises(ModelNameOwnedError, match="does not list this run"):
        export.save_everywhere(
            None,
            export_dir,
            claim,
            True,
            {"lineage.json": "{}\n"},
            before_publish=lambda: ownership.admit(export_dir, CAROL),
        )
    assert not Path(export_dir, "1").exists() and sorted(p.name for p in Path(export_dir).iterdir()) == []
    assert sorted(p.name for p in export.bookkeeping_dir(export_dir).iterdir()) == ["claim-1", "owner"]
