"""spec.objectStore, s3:// datasets and spec.export.storageUri (docs/object-storage.md): what the parser admits and
refuses (the API server's twin: tests/integration/test_operator_crd.py), what the workers get (the environment with
the keys by reference only, the CA mounted read-only, the export dir), and the operator's --allowed-object-stores."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
from dtr_contract import env, exits, flags
from dtr_operator import objectstore, settings
from dtr_operator.builders import VOLUME_NAME, build_tfjob, children, effective_spec, trainer_args
from dtr_operator.policy import Policy, run_refusal
from dtr_operator.reasons import OBJECT_STORE_NOT_ALLOWED, STORAGE_TOO_LARGE
from dtr_operator.reconcile.decide import Create, Observed, decide
from dtr_operator.spec import SpecError, parse_run
from dtr_operator.status.compute import state_status
from dtr_operator.status.state import State
from dtr_operator.status.summary import parse_summary

from support.runs import make_run

ENDPOINT = "http://s3.example:8333"
STORE = {"endpoint": ENDPOINT, "credentialsSecret": "s3-keys"}
DATASET = "s3://data/digits/train"


def _run(**spec: Any):
    return parse_run(make_run(spec))


def _container(run) -> dict[str, Any]:
    return build_tfjob(run)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def _pod(run) -> dict[str, Any]:
    return build_tfjob(run)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]


def test_an_s3_dataset_and_storage_uri_reach_the_trainer_as_given():
    run = _run(objectStore=STORE, training={"dataset": DATASET}, export={"storageUri": "s3://models/digits"})
    args = trainer_args(run)
    assert args[args.index(flags.DATASET) + 1] == DATASET
    assert args[args.index(flags.EXPORT_DIR) + 1] == "s3://models/digits"
    assert run.object_store == objectstore.ObjectStoreSpec(ENDPOINT, "s3-keys", "us-east-1", None)


def test_without_storage_uri_the_model_stays_on_the_volume():
    run = _run(objectStore=STORE, training={"dataset": DATASET})
    args = trainer_args(run)
    assert args[args.index(flags.EXPORT_DIR) + 1] == "/mnt/dtr/models/mnist-cnn"


def test_the_keys_come_from_the_secret_by_reference_only():
    run = _run(objectStore={**STORE, "region": "eu-west-3"}, training={"dataset": DATASET})
    variables = {v["name"]: v for v in _container(run)["env"]}
    for key in (env.AWS_ACCESS_KEY_ID, env.AWS_SECRET_ACCESS_KEY):
        assert variables[key] == {"name": key, "valueFrom": {"secretKeyRef": {"name": "s3-keys", "key": key}}}
    assert variables[env.S3_ENDPOINT]["value"] == ENDPOINT  # with its scheme: tensorflow-io speaks HTTPS without
    assert variables[env.AWS_REGION]["value"] == "eu-west-3"
    assert variables[env.AWS_RETRY_MODE]["value"] == "standard"
    assert int(variables[env.AWS_MAX_ATTEMPTS]["value"]) == env.MAX_ATTEMPTS
    assert env.S3_CA_FILE not in variables and not any(v["name"] == objectstore.CA_VOLUME for v in _pod(run)["volumes"])


def test_the_ca_is_mounted_read_only_and_named_to_the_trainer():
    run = _run(objectStore={**STORE, "caConfigMap": "my-ca"}, training={"dataset": DATASET})
    container, pod = _container(run), _pod(run)
    mount = next(m for m in container["volumeMounts"] if m["name"] == objectstore.CA_VOLUME)
    volume = next(v for v in pod["volumes"] if v["name"] == objectstore.CA_VOLUME)
    assert mount["readOnly"] and volume["configMap"]["name"] == "my-ca"
    assert [i["key"] for i in volume["configMap"]["items"]] == ["ca.crt"]
    ca_file = next(v["value"] for v in container["env"] if v["name"] == env.S3_CA_FILE)
    assert ca_file == f"{mount['mountPath']}/ca.crt"


def test_a_run_without_an_object_store_gets_no_s3_environment():
    names = {v["name"] for v in _container(_run())["env"]}
    assert not names & set(env.OBJECT_STORE)


def test_the_effective_spec_round_trips_and_names_no_key():
    run = _run(objectStore={**STORE, "caConfigMap": "my-ca"}, training={"dataset": DATASET},
               export={"storageUri": "s3://models/digits"})  # fmt: skip
    spec = effective_spec(run)
    assert spec["objectStore"]["region"] == "us-east-1" and "modelName" not in spec["export"]
    assert parse_run(make_run(spec, uid=None)) == parse_run(make_run(spec))
    assert parse_run(make_run(spec)) == run
    assert "AKIA" not in json.dumps(build_tfjob(run))


BACKUP = "s3://runs/backups/digits"
NO_VOLUME = {"objectStore": STORE, "training": {"dataset": DATASET}, "export": {"storageUri": "s3://models/digits"},
             "storage": {"volume": False, "backupUri": BACKUP}}  # fmt: skip


def test_a_run_with_no_volume_mounts_an_empty_dir_and_keeps_its_backups_in_the_bucket():
    run = parse_run(make_run({**NO_VOLUME, "storage": {**NO_VOLUME["storage"], "size": "3Gi"}}, uid="u-1"))
    assert not run.has_volume and not run.creates_pvc
    pvc, tfjob = children(run)
    assert pvc is None
    pod = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == VOLUME_NAME)
    assert volume == {"name": VOLUME_NAME, "emptyDir": {"sizeLimit": "3Gi"}}
    assert not any("persistentVolumeClaim" in v for v in pod["volumes"])
    args = trainer_args(run)
    assert args[args.index(flags.BACKUP_URI) + 1] == f"{BACKUP}/mnist-cnn/u-1"  # per run object, as on a volume
    local = trainer_args(_run(**NO_VOLUME))
    assert local[local.index(flags.BACKUP_URI) + 1] == f"{BACKUP}/mnist-cnn"  # no uid (dtr run): per name
    assert args[args.index(flags.BACKUP_DIR) + 1].startswith("/mnt/dtr/")  # the pod's own copy, on the emptyDir
    assert flags.BACKUP_URI not in trainer_args(_run(objectStore=STORE, training={"dataset": DATASET}))


def test_a_run_with_no_volume_is_created_without_reading_a_claim_and_its_status_names_none():
    run = _run(**NO_VOLUME)
    assert decide(run, {}, Observed(None), None, None) == Create(pvc=False)
    status = state_status(run, State("Pending", "Creating", "creating"), {}, "2026-12-04T00:00:00Z")
    assert "pvc" not in status
    summary = parse_summary(json.dumps({"accuracy": 0.9, "metric": "accuracy", "modelPath": "s3://models/digits/1",
                                        "modelVersion": 1}), None)  # fmt: skip
    assert summary.model == {"path": "s3://models/digits/1", "version": 1, "storageUri": "s3://models/digits"}


def test_the_empty_dir_of_a_run_with_no_volume_is_bounded_by_max_storage():
    run = _run(**{**NO_VOLUME, "storage": {**NO_VOLUME["storage"], "size": "3Gi"}})
    refusal = run_refusal(run, Policy(max_storage="2Gi"))
    assert refusal is not None and refusal.reason == STORAGE_TOO_LARGE and "spec.storage.size 3Gi" in refusal.message


def test_a_run_with_no_volume_round_trips():
    run = _run(**NO_VOLUME)
    assert parse_run(make_run(effective_spec(run))) == run


REFUSED = [
    ("s3-dataset-without-store", {"training": {"dataset": DATASET}}, "spec.objectStore", "is required"),
    ("storage-uri-without-store", {"export": {"storageUri": "s3://models/x"}}, "spec.objectStore", "is required"),
    ("store-without-s3", {"objectStore": STORE}, "spec.objectStore", "only for a run"),
    ("store-with-npz", {"objectStore": STORE, "training": {"dataset": "a.npz"}}, "spec.objectStore", "only for"),
    ("model-name-and-uri", {"objectStore": STORE, "export": {"storageUri": "s3://models/x", "modelName": "m"}},
     "spec.export.modelName", "cannot be set with spec.export.storageUri"),
    ("endpoint-path", {"objectStore": {**STORE, "endpoint": "http://h:1/api"}, "training": {"dataset": DATASET}},
     "spec.objectStore.endpoint", "scheme://host[:port]"),
    ("endpoint-userinfo", {"objectStore": {**STORE, "endpoint": "http://k:s@h"}, "training": {"dataset": DATASET}},
     "spec.objectStore.endpoint", "scheme://host[:port]"),
    ("endpoint-scheme", {"objectStore": {**STORE, "endpoint": "ftp://h"}, "training": {"dataset": DATASET}},
     "spec.objectStore.endpoint", "scheme://host[:port]"),
    ("endpoint-no-scheme", {"objectStore": {**STORE, "endpoint": "h:8333"}, "training": {"dataset": DATASET}},
     "spec.objectStore.endpoint", "scheme://host[:port]"),
    ("no-secret", {"objectStore": {"endpoint": ENDPOINT}, "training": {"dataset": DATASET}},
     "spec.objectStore", "both endpoint and credentialsSecret"),
    ("secret-name", {"objectStore": {**STORE, "credentialsSecret": "S3_Keys"}, "training": {"dataset": DATASET}},
     "spec.objectStore.credentialsSecret", "Secret name"),
    ("dataset-dot-segment", {"objectStore": STORE, "training": {"dataset": "s3://data/a/../b"}},
     "spec.training.dataset", "s3://"),
    ("dataset-bucket-shape", {"objectStore": STORE, "training": {"dataset": "s3://Data_Set/x"}},
     "spec.training.dataset", "s3://"),
    ("uri-trailing-slash", {"objectStore": STORE, "export": {"storageUri": "s3://models/x/"}},
     "spec.export.storageUri", "trailing"),
    ("uri-dot-segment", {"objectStore": STORE, "export": {"storageUri": "s3://models/./x"}},
     "spec.export.storageUri", "segment"),
    ("no-volume-without-backup", {**{k: v for k, v in NO_VOLUME.items() if k != "storage"},
                                  "storage": {"volume": False}}, "spec.storage.backupUri", "go together"),
    ("backup-with-a-volume", {**NO_VOLUME, "storage": {"backupUri": BACKUP}}, "spec.storage.backupUri",
     "go together"),
    ("backup-without-store", {"storage": {"volume": False, "backupUri": BACKUP}}, "spec.objectStore", "is required"),
    ("no-volume-with-claim", {**NO_VOLUME, "storage": {**NO_VOLUME["storage"], "claimName": "c"}},
     "spec.storage.volume", "claimName and storageClassName are for a volume"),
    ("no-volume-with-class", {**NO_VOLUME, "storage": {**NO_VOLUME["storage"], "storageClassName": "fast"}},
     "spec.storage.volume", "claimName and storageClassName are for a volume"),
    ("no-volume-model-on-volume", {k: v for k, v in NO_VOLUME.items() if k != "export"}, "spec.storage.volume",
     "needs spec.export.storageUri"),
    ("no-volume-npz", {**NO_VOLUME, "training": {"dataset": "d/train.npz"}}, "spec.storage.volume",
     "an s3:// URI or one of mnist"),
    ("backup-dot-segment", {**NO_VOLUME, "storage": {"volume": False, "backupUri": "s3://b/a/../c"}},
     "spec.storage.backupUri", "segment"),
    ("backup-trailing-slash", {**NO_VOLUME, "storage": {"volume": False, "backupUri": "s3://b/a/"}},
     "spec.storage.backupUri", "trailing"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "field", "words"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_the_parser_refuses_with_the_field_named(spec: dict[str, Any], field: str, words: str):
    with pytest.raises(SpecError) as err:
        parse_run(make_run(spec))
    assert any(e.startswith(f"{field}:") and words in e for e in err.value.errors), err.value.errors


@pytest.mark.parametrize("dataset", ["s3://data", "s3://data/", "s3://data/digits/", "s3://data/d/train-0.tfrecord",
                                     "s3://my.bucket-1/a=1/b+c/x.csv"])  # fmt: skip
def test_s3_datasets_the_parser_admits(dataset: str):
    assert _run(objectStore=STORE, training={"dataset": dataset}).training.dataset == dataset


def test_an_s3_dataset_with_code_reaches_its_load_data():
    run = _run(objectStore=STORE, training={"code": {"configMap": "c"}, "dataset": DATASET})
    assert run.training.dataset == DATASET


# ---- --allowed-object-stores ----


def _settings(*argv: str, environ: dict[str, str] | None = None) -> settings.Settings:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return settings.from_args(parser.parse_args(list(argv)), environ or {})


def test_no_object_store_is_allowed_by_default():
    refusal = _settings().run_refusal(_run(objectStore=STORE, training={"dataset": DATASET}))
    assert refusal is not None and refusal.reason == OBJECT_STORE_NOT_ALLOWED
    assert ENDPOINT in refusal.message and "--allowed-object-stores" in refusal.message and "none" in refusal.message


@pytest.mark.parametrize("listed", [ENDPOINT, "HTTP://S3.Example:8333/", f"https://other,{ENDPOINT}"])
def test_a_listed_endpoint_is_allowed(listed: str):
    run = _run(objectStore=STORE, training={"dataset": DATASET})
    assert _settings(f"--allowed-object-stores={listed}").run_refusal(run) is None
    assert _settings(environ={"DTR_ALLOWED_OBJECT_STORES": listed}).run_refusal(run) is None


@pytest.mark.parametrize(("endpoint", "listed"), [
    ("http://s3.example:8333", "https://s3.example:8333"),  # another scheme
    ("http://s3.example:8334", "http://s3.example:8333"),  # another port
    ("http://s3.example", "http://s3.example:8333"),  # port 80 is not 8333
    ("http://evil.s3.example:8333", "http://s3.example:8333"),  # not a suffix match
])  # fmt: skip
def test_an_endpoint_not_listed_is_refused(endpoint: str, listed: str):
    run = _run(objectStore={**STORE, "endpoint": endpoint}, training={"dataset": DATASET})
    refusal = _settings(f"--allowed-object-stores={listed}").run_refusal(run)
    assert refusal is not None and refusal.reason == OBJECT_STORE_NOT_ALLOWED and listed in refusal.message


def test_default_ports_are_the_same_endpoint():
    assert objectstore.endpoint_allowed("http://s3", ["http://s3:80"])
    assert objectstore.endpoint_allowed("https://s3:443", ["https://s3"])
    assert not objectstore.endpoint_allowed("https://s3", ["http://s3:443"])


@pytest.mark.parametrize("bad", ["s3.example:8333", "http://h/path", "http://u:p@h", "ftp://h", "http://h:99999"])
def test_a_bad_allow_list_is_a_settings_error(bad: str):
    with pytest.raises(settings.SettingsError, match="allowed-object-stores"):
        _settings(f"--allowed-object-stores={bad}")
    with pytest.raises(settings.SettingsError, match="DTR_ALLOWED_OBJECT_STORES"):
        _settings(environ={"DTR_ALLOWED_OBJECT_STORES": bad})


# ---- the trainer's preflight exits, as the run's reasons (status/compute.py) ----

KEYS_LINE = ("s3://data/digits/train: the object store http://s3.example:8333 refused the keys (InvalidAccessKeyId): "
             "check the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY of spec.objectStore.credentialsSecret")


def _worker_pod(index: int, exit_code: int, message: str = "", where: str = "state") -> dict[str, Any]:
    from support.tfjobs import controlled_by

    labels = {"training.kubeflow.org/job-name": "mnist-cnn", "training.kubeflow.org/replica-type": "worker",
              "training.kubeflow.org/replica-index": str(index)}  # fmt: skip
    cs = {"name": "tensorflow", where: {"terminated": {"exitCode": exit_code, "message": message}}}
    return {"metadata": {"name": f"mnist-cnn-worker-{index}", "labels": labels, "ownerReferences": controlled_by()},
            "status": {"containerStatuses": [cs]}}


def _failed_status(pods: list[dict[str, Any]]) -> dict[str, Any]:
    from dtr_operator.status.compute import tfjob_status

    from support.tfjobs import TFJOB_UID

    cond = {"type": "Failed", "status": "True", "reason": "TFJobFailed", "message": "TFJob ml/mnist-cnn has failed"}
    tfjob = {"metadata": {"name": "mnist-cnn", "uid": TFJOB_UID}, "status": {"conditions": [cond]}}
    run = parse_run(make_run({"objectStore": STORE, "training": {"dataset": DATASET}}, uid="u-1", generation=1))
    return tfjob_status(run, tfjob, pods, {}, "t")


@pytest.mark.parametrize(("code", "reason"), [
    (exits.OBJECT_STORE_KEYS, "ObjectStoreKeysRefused"), (exits.OBJECT_STORE_NO_BUCKET, "BucketNotFound"),
    (exits.OBJECT_STORE_NO_DATA, "DatasetNotFound"), (exits.OBJECT_STORE_REFUSED, "ObjectStoreRefused"),
    (exits.OBJECT_STORE_UNREACHABLE, "ObjectStoreUnreachable"),
])  # fmt: skip
def test_each_preflight_exit_fails_the_run_with_its_reason_and_the_workers_line(code: int, reason: str):
    pods = [_worker_pod(0, code, f"dtr_trainer[worker-0]: error: {KEYS_LINE}\n"), _worker_pod(1, exits.PEER_LOST)]
    status = _failed_status(pods)
    assert (status["phase"], status["reason"]) == ("Failed", reason)
    assert status["message"] == f"{KEYS_LINE} (worker mnist-cnn-worker-0, exit code {code})"


def test_a_preflight_exit_before_the_kill_at_the_backoff_limit_still_names_the_cause():
    pods = [_worker_pod(0, exits.OBJECT_STORE_UNREACHABLE, "", where="lastState"), _worker_pod(1, 143)]
    status = _failed_status(pods)
    assert status["reason"] == "ObjectStoreUnreachable"
    assert status["message"].startswith("the trainer's check of its object store failed (worker mnist-cnn-worker-0")


def test_only_the_permanent_preflight_exits_end_the_restarts():
    from dtr_operator.status.pods import restart_cannot_help

    permanent = (exits.OBJECT_STORE_KEYS, exits.OBJECT_STORE_NO_BUCKET, exits.OBJECT_STORE_NO_DATA,
                 exits.OBJECT_STORE_REFUSED)  # fmt: skip
    assert all(restart_cannot_help(code) and not exits.is_retryable(code) for code in permanent)
    assert exits.is_retryable(exits.OBJECT_STORE_UNREACHABLE)
    assert not restart_cannot_help(exits.OBJECT_STORE_UNREACHABLE)
    assert set(exits.OBJECT_STORE_CODES) == {20, 21, 22, 23, exits.OBJECT_STORE_UNREACHABLE}


def test_every_preflight_reason_is_a_failed_warning():
    from dtr_operator import reasons

    names = set(reasons.OBJECT_STORE_FAILURES.values())
    declared = {r.name: r for r in reasons.REASONS}
    assert all((declared[n].phase, declared[n].warning) == (reasons.FAILED, True) for n in names) and len(names) == 5


def test_a_kept_run_with_an_object_store_parses_as_the_whole_run():
    # The operator keeps a slim copy of each run (runtime/kept.py); the TFJob events parse it to mirror the status.
    from dtr_operator.runtime.kept import slim

    spec = {"objectStore": STORE, "training": {"dataset": DATASET}, "export": {"storageUri": "s3://models/digits"}}
    body = make_run({**spec, "podLabels": {"team": "ml"}}, uid="u-1")
    full, kept = parse_run(body), parse_run(slim(body))
    assert (kept.object_store, kept.storage_uri, kept.training) == (full.object_store, full.storage_uri, full.training)
