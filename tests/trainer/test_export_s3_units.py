"""export_s3's decisions (no store, no TensorFlow): what a chief removes before its export, claims' bodies."""

from __future__ import annotations

from dtr_contract.objectstore import ObjectInfo
from dtr_trainer import export, export_s3
from dtr_trainer.lineage import RunIdentity

DAY = export.STALE_STAGING_SECONDS
NOW = 10 * DAY
OURS = export.Claim(7, "tok")


def obj(key: str, age: float) -> ObjectInfo:
    return ObjectInfo(key, 1, "e", NOW - age)


def test_own_staging_and_old_dead_staging_go_live_staging_and_published_versions_stay():
    objects = [
        obj("m/.dtr-export/claim-7", 2 * DAY),
        obj("m/.dtr-export/staging-7-tok-aa/saved_model.pb", 10),  # ours, from a killed try: goes
        obj("m/.dtr-export/staging-8-other-bb/saved_model.pb", 10),  # another run's, live: stays
        obj("m/.dtr-export/staging-5-dead-cc/variables/v.data", DAY + 5),  # dead for a day: goes
        obj("m/.dtr-export/staging-5-dead-cc/saved_model.pb", DAY + 1),
        obj("m/1/saved_model.pb", 9 * DAY), obj("m/1/dtr-manifest.json", 9 * DAY),  # published: never
    ]
    assert export_s3.to_remove("m", objects, OURS, NOW) == [
        "m/.dtr-export/staging-5-dead-cc/saved_model.pb", "m/.dtr-export/staging-5-dead-cc/variables/v.data",
        "m/.dtr-export/staging-7-tok-aa/saved_model.pb"]


def test_a_claimed_version_without_manifest_goes_when_old_or_ours_and_an_unclaimed_one_never():
    objects = [
        obj("m/.dtr-export/claim-2", 3 * DAY), obj("m/2/variables/v.data", 2 * DAY),  # claimed, partial, old
        obj("m/.dtr-export/claim-3", 10), obj("m/3/variables/v.data", 10),  # claimed, partial, live
        obj("m/.dtr-export/claim-7", 10), obj("m/7/variables/v.data", 10),  # our own partial copy
        obj("m/4/saved_model.pb", 5 * DAY),  # put there by hand, no claim, no manifest: not ours to judge
    ]
    assert export_s3.to_remove("m", objects, OURS, NOW) == ["m/2/variables/v.data", "m/7/variables/v.data"]


def test_a_partial_version_waits_an_hour_and_staging_a_day():
    hour = export_s3.STALE_PARTIAL_VERSION_SECONDS
    objects = [
        obj("m/.dtr-export/claim-2", 3 * hour), obj("m/2/variables/v.data", hour + 1),  # dead an hour: goes
        obj("m/.dtr-export/claim-3", 3 * hour), obj("m/3/variables/v.data", hour - 1),  # not yet
        obj("m/.dtr-export/staging-5-dead-cc/saved_model.pb", hour + 1),  # staging: a day
    ]
    assert export_s3.to_remove("m", objects, OURS, NOW) == ["m/2/variables/v.data"]


def test_a_base_at_the_buckets_root_is_judged_alike():
    objects = [obj(".dtr-export/staging-7-tok-aa/saved_model.pb", 1), obj("7/saved_model.pb", 1),
               obj(".dtr-export/claim-7", 1), obj("1/saved_model.pb", 1), obj("1/dtr-manifest.json", 1)]
    assert export_s3.to_remove("", objects, OURS, NOW) == [".dtr-export/staging-7-tok-aa/saved_model.pb",
                                                           "7/saved_model.pb"]


def test_a_claims_body_names_its_token_and_run():
    body = export_s3.claim_body(OURS, RunIdentity(name="r", uid="u"), "2026-12-04T18:00:00Z")
    assert export_s3.token_of(body) == "tok"
    assert b'"name": "r"' in body and b'"version": 7' in body
    assert export_s3.token_of(b"") is None and export_s3.token_of(b"{}") is None
