"""The DistTrainingRun CRD on the real API server: what it refuses (with the field named), what it
defaults, that spec is immutable, and what `kubectl get` / `kubectl explain` show. No operator runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.cluster import Cluster
from support.runs import run_doc

SOURCE = {"url": "https://h/d.npz", "sha256": "a" * 64}
_STORE = {"endpoint": "http://s3.example:8333", "credentialsSecret": "s3-keys"}
_NO_VOLUME = {"objectStore": _STORE, "training": {"dataset": "s3://data/x"}, "export": {"storageUri": "s3://m/x"},
              "storage": {"volume": False, "backupUri": "s3://runs/backups/x"}}  # fmt: skip
# (id, name, spec, words the API server's answer must contain: the field, then the reason)
REJECTED = [
    ("name-uppercase", "Mnist", {}, ["metadata.name", "DNS-1035"]),
    ("name-starts-with-digit", "1mnist", {}, ["metadata.name", "DNS-1035"]),
    ("name-too-long", "a" * 53, {}, ["metadata.name", "at most 52"]),
    ("workers-zero", "r", {"workers": 0}, ["spec.workers", "greater than or equal to 1"]),
    ("workers-too-many", "r", {"workers": 65}, ["spec.workers", "less than or equal to 64"]),
    ("workers-string", "r", {"workers": "two"}, ["spec.workers", "integer"]),
    ("pull-policy", "r", {"imagePullPolicy": "Sometimes"}, ["spec.imagePullPolicy", "Unsupported value"]),
    ("image-empty", "r", {"image": ""}, ["spec.image", "at least 1"]),
    ("model", "r", {"training": {"model": "resnet"}}, ["spec.training.model", "Unsupported value"]),
    ("dataset-unknown", "r", {"training": {"dataset": "imagenet"}}, ["spec.training.dataset", ".npz"]),
    ("dataset-absolute", "r", {"training": {"dataset": "/etc/x.npz"}}, ["spec.training.dataset", "leading '/'"]),
    ("dataset-escape", "r", {"training": {"dataset": "a/../../x.npz"}}, ["spec.training.dataset", "'..'"]),
    ("epochs-zero", "r", {"training": {"epochs": 0}}, ["spec.training.epochs", "greater than or equal to 1"]),
    ("epochs-high", "r", {"training": {"epochs": 1001}}, ["spec.training.epochs", "less than or equal to 1000"]),
    ("batch-zero", "r", {"training": {"batchSizePerWorker": 0}}, ["spec.training.batchSizePerWorker", "1"]),
    ("steps-zero", "r", {"training": {"stepsPerEpoch": 0}}, ["spec.training.stepsPerEpoch", "1"]),
    ("lr-zero", "r", {"training": {"learningRate": 0}}, ["spec.training.learningRate", "greater than 0"]),
    ("lr-high", "r", {"training": {"learningRate": 11}}, ["spec.training.learningRate", "less than or equal to 10"]),
    ("seed-negative", "r", {"training": {"seed": -1}}, ["spec.training.seed", "greater than or equal to 0"]),
    ("claim-and-size", "r", {"storage": {"claimName": "c", "size": "1Gi"}}, ["spec.storage.size", "claimName"]),
    (
        "claim-and-class",
        "r",
        {"storage": {"claimName": "c", "storageClassName": "fast"}},
        ["spec.storage.storageClassName", "claimName"],
    ),
    (
        "claim-and-delete",
        "r",
        {"storage": {"claimName": "c", "reclaimPolicy": "Delete"}},
        ["spec.storage.reclaimPolicy", "never deletes"],
    ),
    ("claim-name-shape", "r", {"storage": {"claimName": "Bad_Claim"}}, ["spec.storage.claimName", "PVC name"]),
    ("size-not-quantity", "r", {"storage": {"size": "lots"}}, ["spec.storage.size", "quantity"]),
    ("size-zero", "r", {"storage": {"size": "0"}}, ["spec.storage.size", "positive"]),
    ("size-negative", "r", {"storage": {"size": "-1Gi"}}, ["spec.storage.size", "positive"]),
    ("access-mode", "r", {"storage": {"accessMode": "ReadOnlyMany"}}, ["spec.storage.accessMode", "Unsupported"]),
    ("reclaim-policy", "r", {"storage": {"reclaimPolicy": "Recycle"}}, ["spec.storage.reclaimPolicy", "Unsupported"]),
    ("model-name-escape", "r", {"export": {"modelName": "../etc"}}, ["spec.export.modelName", "directory name"]),
    ("model-name-slash", "r", {"export": {"modelName": "a/b"}}, ["spec.export.modelName", "directory name"]),
    ("publisher-shape", "r", {"export": {"allowedPublishers": ["Bob"]}}, ["spec.export.allowedPublishers[0]", "a-z"]),
    ("publishers-many", "r", {"export": {"allowedPublishers": [f"r{i}" for i in range(17)]}},
     ["spec.export.allowedPublishers", "must have at most 16 items"]),
    ("resources-quantity", "r", {"resources": {"limits": {"cpu": "two"}}}, ["spec.resources.limits.cpu", "match"]),
    ("restart-policy", "r", {"restartPolicy": "Always"}, ["spec.restartPolicy", "Unsupported value"]),
    ("backoff-negative", "r", {"backoffLimit": -1}, ["spec.backoffLimit", "greater than or equal to 0"]),
    ("deadline-zero", "r", {"activeDeadlineSeconds": 0}, ["spec.activeDeadlineSeconds", "greater than or equal to 1"]),
    ("ttl-negative", "r", {"ttlSecondsAfterFinished": -1}, ["spec.ttlSecondsAfterFinished", "greater than or equal"]),
    ("ttl-int32", "r", {"ttlSecondsAfterFinished": 2**31}, ["spec.ttlSecondsAfterFinished", "int32"]),
    ("unknown-field", "r", {"replicas": 2}, ['unknown field "spec.replicas"']),
    ("code-empty", "r", {"training": {"code": {}}}, ["spec.training.code", "exactly one of configMap"]),
    ("code-both", "r", {"training": {"code": {"configMap": "c", "module": "m"}}},
     ["spec.training.code", "exactly one of configMap"]),
    ("code-key-with-module", "r", {"training": {"code": {"module": "m", "key": "m.py"}}},
     ["spec.training.code.key", "cannot be set with spec.training.code.module"]),
    ("code-key-not-py", "r", {"training": {"code": {"configMap": "c", "key": "m.sh"}}},
     ["spec.training.code.key", "naming a Python file"]),
    ("code-key-path", "r", {"training": {"code": {"configMap": "c", "key": "a/m.py"}}},
     ["spec.training.code.key", "naming a Python file"]),
    ("code-configmap-name", "r", {"training": {"code": {"configMap": "My_Code"}}},
     ["spec.training.code.configMap", "ConfigMap name"]),
    ("code-module-name", "r", {"training": {"code": {"module": "acme-models.wine"}}},
     ["spec.training.code.module", "Python module name"]),
    ("code-unknown", "r", {"training": {"code": {"configMap": "c", "file": "x.py"}}},
     ['unknown field "spec.training.code.file"']),
    ("source-http", "r", {"training": {"datasetSource": {"url": "http://h/d.npz", "sha256": "a" * 64}}},
     ["spec.training.datasetSource.url", "https:// URL"]),
    ("source-credentials", "r", {"training": {"datasetSource": {"url": "https://u:p@h/d.npz", "sha256": "a" * 64}}},
     ["spec.training.datasetSource.url", "without credentials"]),
    ("source-no-file", "r", {"training": {"datasetSource": {"url": "https://h/", "sha256": "a" * 64}}},
     ["spec.training.datasetSource.url", "file name"]),
    ("source-no-digest", "r", {"training": {"datasetSource": {"url": "https://h/d.npz"}}},
     ["spec.training.datasetSource", "both url and sha256"]),
    ("source-cap-zero", "r", {"training": {"datasetSource": {**SOURCE, "maxSize": "0"}}},
     ["spec.training.datasetSource.maxSize", "from 1 (byte) to 1Ti"]),
    ("source-cap-high", "r", {"training": {"datasetSource": {**SOURCE, "maxSize": "1025Gi"}}},
     ["spec.training.datasetSource.maxSize", "from 1 (byte) to 1Ti"]),
    ("source-cap-words", "r", {"training": {"datasetSource": {**SOURCE, "maxSize": "lots"}}},
     ["spec.training.datasetSource.maxSize", "quantity"]),
    ("source-timeout-short", "r", {"training": {"datasetSource": {**SOURCE, "timeoutSeconds": 59}}},
     ["spec.training.datasetSource.timeoutSeconds", "greater than or equal to 60"]),
    ("source-timeout-long", "r", {"training": {"datasetSource": {**SOURCE, "timeoutSeconds": 86401}}},
     ["spec.training.datasetSource.timeoutSeconds", "less than or equal to 86400"]),
    ("source-digest-shape", "r", {"training": {"datasetSource": {"url": "https://h/d.npz", "sha256": "A" * 64}}},
     ["spec.training.datasetSource.sha256", "hex digits"]),
    ("metric-shape", "r", {"training": {"metric": "val loss"}}, ["spec.training.metric", "metric name"]),
    ("dataset-dir-without-code", "r", {"training": {"dataset": "tables/wine"}}, ["spec.training.dataset", ".npz"]),
    ("dataset-escape-with-code", "r", {"training": {"code": {"module": "m"}, "dataset": "../wine"}},
     ["spec.training.dataset", "'..'"]),
    ("dataset-absolute-with-code", "r", {"training": {"code": {"configMap": "c"}, "dataset": "/data/wine.csv"}},
     ["spec.training.dataset", "leading '/'"]),
    ("unknown-nested-field", "r", {"training": {"optimizer": "sgd"}}, ['unknown field "spec.training.optimizer"']),
    # An object store (docs/object-storage.md): the CEL rules of fields_objectstore.py, as the parser words them.
    ("s3-without-store", "r", {"training": {"dataset": "s3://data/x"}}, ["spec.objectStore", "is required"]),
    ("uri-without-store", "r", {"export": {"storageUri": "s3://models/x"}}, ["spec.objectStore", "is required"]),
    ("store-without-s3", "r", {"objectStore": _STORE}, ["spec.objectStore", "is only for a run"]),
    ("uri-and-model-name", "r", {"objectStore": _STORE, "export": {"storageUri": "s3://models/x", "modelName": "m"}},
     ["spec.export.modelName", "cannot be set with spec.export.storageUri"]),
    ("endpoint-path", "r", {"objectStore": {**_STORE, "endpoint": "http://h/x"}, "training": {"dataset": "s3://d/x"}},
     ["spec.objectStore.endpoint", "scheme://host[:port]"]),
    ("endpoint-userinfo", "r", {"objectStore": {**_STORE, "endpoint": "http://k:s@h"},
                                "training": {"dataset": "s3://data/x"}}, ["spec.objectStore.endpoint", "no path"]),
    ("store-no-secret", "r", {"objectStore": {"endpoint": "http://h"}, "training": {"dataset": "s3://data/x"}},
     ["spec.objectStore", "both endpoint and credentialsSecret"]),
    ("s3-dot-segment", "r", {"objectStore": _STORE, "training": {"dataset": "s3://data/a/../b"}},
     ["spec.training.dataset", "s3://"]),
    ("uri-dot-segment", "r", {"objectStore": _STORE, "export": {"storageUri": "s3://models/./x"}},
     ["spec.export.storageUri", "segment"]),
    ("uri-trailing-slash", "r", {"objectStore": _STORE, "export": {"storageUri": "s3://models/x/"}},
     ["spec.export.storageUri", "should match"]),
    # A run with no volume (fields_storage.py).
    ("no-volume-no-backup", "r", {**_NO_VOLUME, "storage": {"volume": False}},
     ["spec.storage.backupUri", "go together"]),
    ("backup-with-volume", "r", {**_NO_VOLUME, "storage": {"backupUri": "s3://runs/b"}},
     ["spec.storage.backupUri", "go together"]),
    ("no-volume-claim", "r", {**_NO_VOLUME, "storage": {**_NO_VOLUME["storage"], "claimName": "c"}},
     ["spec.storage.volume", "are for a volume"]),
    ("no-volume-model-on-volume", "r", {k: v for k, v in _NO_VOLUME.items() if k != "export"},
     ["spec.storage.volume", "needs spec.export.storageUri"]),
    ("no-volume-npz", "r", {**_NO_VOLUME, "training": {"dataset": "d/x.npz"}},
     ["spec.storage.volume", "an s3:// URI or one of mnist"]),
    ("backup-dot-segment", "r", {**_NO_VOLUME, "storage": {"volume": False, "backupUri": "s3://runs/a/../b"}},
     ["spec.storage.backupUri", "segment"]),
]


@pytest.mark.parametrize(("name", "spec", "words"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_the_api_server_rejects_with_the_field_named(
    control_plane: Cluster, namespace: str, name: str, spec: dict[str, Any], words: list[str]
) -> None:
    proc = control_plane.create(run_doc(name, namespace, spec), check=False)
    assert proc.returncode != 0, f"accepted: {spec}"
    for word in words:
        assert word in proc.stderr, proc.stderr
    # Nothing was stored.
    assert control_plane.kubectl("get", "dtr", "-n", namespace, "-o", "name").stdout.strip() == ""


def test_defaults_are_filled_in_by_the_api_server(control_plane: Cluster, namespace: str) -> None:
    control_plane.create(run_doc("defaults", namespace, None))
    spec = control_plane.kubectl_json("get", "dtr", "defaults", "-n", namespace)["spec"]
    assert spec == {
        "workers": 2,
        "imagePullPolicy": "IfNotPresent",
        "training": {
            "model": "cnn", "dataset": "mnist", "epochs": 3, "batchSizePerWorker": 64,
            "learningRate": 0.001, "seed": 42, "validateEvery": 1,
        },
        "storage": {"accessMode": "ReadWriteOnce", "reclaimPolicy": "Retain"},
        "export": {},
        "restartPolicy": "OnFailure",
        "backoffLimit": 3,
        "suspend": False,
        "watchdog": {"enabled": True, "stallFactor": 5, "minStallSeconds": 600, "onStall": "Report", "maxRestarts": 3},
        "disruption": {"resume": True, "maxResumes": 3, "waitSeconds": 900, "protect": False,
                       "saveOnStop": False},
    }  # fmt: skip


def test_nulls_are_dropped_and_defaulted_like_dtr_render_does(control_plane: Cluster, namespace: str) -> None:
    from dtr_operator.spec import parse_run

    doc = run_doc("nulls", namespace, {"workers": None, "training": {"epochs": None}, "restartPolicy": None})
    control_plane.create(doc)
    stored = control_plane.kubectl_json("get", "dtr", "nulls", "-n", namespace)
    assert stored["spec"]["workers"] == 2 and stored["spec"]["training"]["epochs"] == 3
    assert stored["spec"]["restartPolicy"] == "OnFailure"
    assert parse_run(doc) == parse_run({**stored, "metadata": doc["metadata"]})


def test_longest_valid_name_and_relative_npz_are_accepted(control_plane: Cluster, namespace: str) -> None:
    name = "a" * 52
    spec = {"workers": 64, "training": {"dataset": "sets/my-data_v1.2.npz"}, "storage": {"claimName": "shared"}}
    control_plane.create(run_doc(name, namespace, spec))
    assert control_plane.kubectl_json("get", "dtr", name, "-n", namespace)["spec"]["workers"] == 64


def test_a_dataset_source_is_accepted_and_reaches_the_trainer(control_plane: Cluster, namespace: str) -> None:
    from dtr_contract import flags
    from dtr_operator.builders import trainer_args
    from dtr_operator.spec import parse_run

    source = {"url": "https://data.example/sets/wine.npz?X-Amz-Signature=ab12", "sha256": "0f" * 32}
    control_plane.create(run_doc("fetched", namespace, {"training": {"datasetSource": source}}))
    stored = control_plane.kubectl_json("get", "dtr", "fetched", "-n", namespace)
    # The caps are the API server's defaults (dtr_contract.disk), as the parser's.
    assert stored["spec"]["training"]["datasetSource"] == {**source, "maxSize": "1Gi", "timeoutSeconds": 3600}
    args = trainer_args(parse_run(stored))
    assert args[args.index(flags.DATASET_URL) + 1] == source["url"] and flags.DATASET not in args
    assert args[args.index(flags.DATASET_MAX_BYTES) + 1] == str(2**30)
    control_plane.create(run_doc("capped", namespace,
                                 {"training": {"datasetSource": {**source, "maxSize": "1Ti", "timeoutSeconds": 60}}}))
    capped = trainer_args(parse_run(control_plane.kubectl_json("get", "dtr", "capped", "-n", namespace)))
    assert capped[capped.index(flags.DATASET_MAX_BYTES) + 1] == str(2**40)  # the bound itself is accepted


def test_allowed_publishers_are_accepted_and_reach_the_trainer(control_plane: Cluster, namespace: str) -> None:
    from dtr_contract import flags
    from dtr_operator.builders import effective_spec, trainer_args
    from dtr_operator.spec import parse_run

    spec = {"export": {"modelName": "team", "allowedPublishers": ["bob", "c" * 52]}}
    doc = run_doc("owner", namespace, spec)
    control_plane.create(doc)
    stored = control_plane.kubectl_json("get", "dtr", "owner", "-n", namespace)
    assert stored["spec"]["export"] == spec["export"]
    run = parse_run({**stored, "metadata": doc["metadata"]})
    assert run == parse_run(doc) and effective_spec(run)["export"] == spec["export"]
    args = trainer_args(run)
    assert args[args.index(flags.ALLOWED_PUBLISHERS) + 1] == f"bob,{'c' * 52}"


def test_an_object_store_is_accepted_and_stored_as_the_parser_admits_it(control_plane: Cluster, namespace: str):
    from dtr_operator.builders import effective_spec
    from dtr_operator.spec import parse_run

    specs = {
        "s3-data": {"objectStore": {**_STORE, "caConfigMap": "my-ca"}, "training": {"dataset": "s3://data/digits/"}},
        "s3-model": {"objectStore": {**_STORE, "endpoint": "https://[fd00::1]:9000", "region": "eu-west-3"},
                     "export": {"storageUri": "s3://models/a=1/digits"}},
        "s3-code": {"objectStore": _STORE, "training": {"code": {"module": "m"}, "dataset": "s3://data/x.csv"}},
    }  # fmt: skip
    for name, spec in specs.items():
        doc = run_doc(name, namespace, spec)
        control_plane.create(doc)
        stored = control_plane.kubectl_json("get", "dtr", name, "-n", namespace)
        assert "region" not in spec["objectStore"] or stored["spec"]["objectStore"] == spec["objectStore"]
        run = parse_run({**stored, "metadata": doc["metadata"]})
        assert run == parse_run(doc)
        control_plane.create(run_doc(f"{name}-again", namespace, effective_spec(run)))  # what the lineage records


def test_code_and_metric_are_accepted_as_the_parser_admits_them(control_plane: Cluster, namespace: str) -> None:
    from dtr_operator.spec import parse_run

    specs = {
        "file": {"training": {"code": {"configMap": "wine-code", "key": "wine_v2.py"}, "dataset": "tables/wine.csv",
                              "metric": "auc"}},
        "default-key": {"training": {"code": {"configMap": "wine-code"}, "dataset": "wine/"}},
        "module": {"image": "reg.example/acme:1", "training": {"code": {"module": "acme.models.wine"},
                                                                "dataset": "shards/train-0.tfrecord"}},
    }  # fmt: skip
    for name, spec in specs.items():
        doc = run_doc(name, namespace, spec)
        control_plane.create(doc)
        stored = control_plane.kubectl_json("get", "dtr", name, "-n", namespace)
        assert stored["spec"]["training"]["code"] == spec["training"]["code"], "no key defaulted beside a module"
        assert parse_run({**stored, "metadata": doc["metadata"]}) == parse_run(doc)
    proc = control_plane.kubectl("patch", "dtr", "file", "-n", namespace, "--type=merge", "-p",
                                 json.dumps({"spec": {"training": {"code": {"configMap": "other"}}}}),
                                 check=False)  # fmt: skip
    assert proc.returncode != 0 and "spec.training is immutable" in proc.stderr, proc.stderr


def test_spec_is_immutable_but_metadata_and_status_are_not(control_plane: Cluster, namespace: str) -> None:
    control_plane.create(run_doc("frozen", namespace, {"workers": 2}))
    k = control_plane.kubectl
    proc = k("patch", "dtr", "frozen", "-n", namespace, "--type=merge", "-p", '{"spec":{"workers":3}}', check=False)
    assert proc.returncode != 0
    assert "spec.workers is immutable (only spec.suspend can change): create a new DistTrainingRun" in proc.stderr
    k("label", "dtr", "frozen", "-n", namespace, "team=ml")
    status = {"status": {"phase": "Running", "workersReady": "2/2", "kopf": {"progress": {}}}}
    k("patch", "dtr", "frozen", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    got = control_plane.kubectl_json("get", "dtr", "frozen", "-n", namespace)
    assert got["spec"]["workers"] == 2
    assert got["status"]["phase"] == "Running"
    assert got["status"]["kopf"] == {"progress": {}}  # kept, not pruned


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"image": "other:1"}, "spec.image"),  # unset at creation: setting it later is a change too
        ({"training": {"epochs": 9}}, "spec.training"),
        ({"nodeSelector": {"pool": "gpu"}}, "spec.nodeSelector"),
        ({"tolerations": [{"key": "k", "operator": "Exists"}]}, "spec.tolerations"),
        ({"affinity": {"nodeAffinity": {}}}, "spec.affinity"),
        ({"podLabels": {"team": "ml"}}, "spec.podLabels"),
        ({"queueName": "q"}, "spec.queueName"),
        ({"schedulingPolicy": {"minAvailable": 1}}, "spec.schedulingPolicy"),
        ({"storage": {"size": "2Gi"}}, "spec.storage"),
    ],
)
def test_every_spec_field_but_suspend_is_immutable_and_the_message_names_it(
    control_plane: Cluster, namespace: str, change: dict[str, Any], field: str
) -> None:
    name = "f-" + field.split(".")[1].lower()[:20]
    control_plane.create(run_doc(name, namespace, {"workers": 2}))
    k = control_plane.kubectl
    proc = k("patch", "dtr", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": change}), check=False)
    assert proc.returncode != 0, f"{change} was accepted"
    assert f"{field} is immutable" in proc.stderr, proc.stderr
    for suspend in (True, False):
        k("patch", "dtr", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": {"suspend": suspend}}))
        assert control_plane.kubectl_json("get", "dtr", name, "-n", namespace)["spec"]["suspend"] is suspend


def test_a_queued_run_cannot_be_suspended_by_its_spec(control_plane: Cluster, namespace: str) -> None:
    proc = control_plane.kubectl("apply", "-n", namespace, "-f", "-", check=False, input=json.dumps(
        run_doc("qs", namespace, {"queueName": "team-a", "suspend": True})))  # fmt: skip
    assert proc.returncode != 0
    assert "spec.suspend cannot be true with spec.queueName" in proc.stderr, proc.stderr


def test_status_cannot_be_written_through_the_main_resource(control_plane: Cluster, namespace: str) -> None:
    control_plane.create(run_doc("sub", namespace, {}))
    control_plane.kubectl(
        "patch", "dtr", "sub", "-n", namespace, "--type=merge", "-p", '{"status":{"phase":"Succeeded"}}'
    )
    assert "status" not in control_plane.kubectl_json("get", "dtr", "sub", "-n", namespace)


def test_kubectl_get_names_and_columns(control_plane: Cluster, namespace: str) -> None:
    control_plane.create(run_doc("cols", namespace, {}))
    status = {
        "status": {
            "phase": "Succeeded",
            "workersReady": "2/2",
            "progress": {"epoch": 3, "epochs": 3, "epochsDone": "3/3", "estimatedRemainingSeconds": 0},
            "metrics": {"accuracy": 0.975, "loss": 0.08, "epochs": 3},
            "headline": "accuracy=0.9750",
            "model": {"path": "/mnt/dtr/models/cols/1"},
            "message": "accuracy 0.9750, model exported",
        }
    }
    control_plane.kubectl(
        "patch", "dtr", "cols", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
    for resource in ("distrainingruns", "dtr", "disttrainingruns", "disttrainingrun", "disttrainingruns.distml.dev"):
        lines = control_plane.kubectl("get", resource, "-n", namespace).stdout.splitlines()
        header = ["NAME", "PHASE", "WORKERS", "PROGRESS", "ACCURACY", "MODEL", "METRIC", "AGE"]
        assert lines[0].split() == header, resource
        row = lines[1].split()
        want = ["cols", "Succeeded", "2/2", "3/3", "0.975", "/mnt/dtr/models/cols/1", "accuracy=0.9750"]
        assert row[:7] == want, resource
    wide = control_plane.kubectl("get", "dtr", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-2:] == ["ETA(S)", "MESSAGE"] and "accuracy 0.9750, model exported" in wide[1]
    assert wide[1].split()[8] == "0", wide


def test_a_regression_run_shows_its_headline_and_an_empty_accuracy(control_plane: Cluster, namespace: str) -> None:
    """status.metrics takes any metric by name (numbers only); ACCURACY is empty, METRIC says the headline."""
    control_plane.create(run_doc("reg", namespace, {"training": {"code": {"configMap": "reg-code"}, "metric": "mae"}}))
    status = {"status": {"phase": "Succeeded", "workersReady": "2/2", "headline": "mae=0.4172",
                         "metrics": {"loss": 0.31, "mae": 0.4172, "mean_squared_error": 0.31, "epochs": 4},
                         "code": {"configMap": "reg-code", "key": "model.py", "sha256": "ab" * 32},
                         "model": {"path": "/mnt/dtr/models/reg/1"}}}  # fmt: skip
    k = control_plane.kubectl
    k("patch", "dtr", "reg", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    got = control_plane.kubectl_json("get", "dtr", "reg", "-n", namespace)["status"]
    assert got["metrics"] == status["status"]["metrics"] and got["code"] == status["status"]["code"]
    columns = k("get", "dtr", "reg", "-n", namespace, "-o",
                "custom-columns=ACC:.status.metrics.accuracy,METRIC:.status.headline").stdout.split()  # fmt: skip
    assert columns == ["ACC", "METRIC", "<none>", "mae=0.4172"]
    row = k("get", "dtr", "reg", "-n", namespace, "--no-headers").stdout.split()
    assert row[:5] == ["reg", "Succeeded", "2/2", "/mnt/dtr/models/reg/1", "mae=0.4172"], row  # empty cells vanish
    bad = {"status": {"metrics": {"mae": "low"}}}
    proc = k("patch", "dtr", "reg", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(bad),
             check=False)  # fmt: skip
    assert proc.returncode != 0 and "status.metrics.mae" in proc.stderr, proc.stderr


def test_kubectl_explain_describes_every_level(control_plane: Cluster) -> None:
    out = control_plane.kubectl("explain", "disttrainingrun.spec.training").stdout
    for field in ("model", "code", "dataset", "epochs", "batchSizePerWorker", "stepsPerEpoch", "learningRate", "seed",
                  "metric"):
        assert field in out
    code = control_plane.kubectl("explain", "disttrainingrun.spec.training.code.configMap").stdout
    assert "1 MiB" in code and "CodeNotFound" in code
    assert "METRIC column" in control_plane.kubectl("explain", "disttrainingrun.spec.training.metric").stdout
    assert "digits" in out
    storage = control_plane.kubectl("explain", "disttrainingrun.spec.storage.reclaimPolicy").stdout
    assert "Retain" in storage and "keeps it (and the model on it)" in storage
