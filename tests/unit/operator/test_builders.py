"""builders.py: the TFJob and PVC a run becomes, field by field."""

from __future__ import annotations

import pytest
from dtr_operator import builders as b
from dtr_operator.builders import (
    build_pvc,
    build_tfjob,
    children,
    is_owned_by,
    is_reusable_pvc,
    left_by_earlier_run,
    owner_reference,
    trainer_args,
)
from dtr_operator.spec import DEFAULT_TRAINER_IMAGE, parse_run

from support.runs import make_run

UID = "0b6e4a52-1111-2222-3333-444455556666"


def run_of(spec=None, **meta):
    return parse_run(make_run(spec or {}, uid=UID, **meta))


def worker(tfjob):
    return tfjob["spec"]["tfReplicaSpecs"]["Worker"]


def container(tfjob):
    (c,) = worker(tfjob)["template"]["spec"]["containers"]
    return c


def arg(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def test_tfjob_shape_for_defaults():
    job = build_tfjob(run_of())
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "TFJob"
    assert job["metadata"] == {
        "name": "mnist-cnn",
        "namespace": "ml",
        "labels": {"distml.dev/run": "mnist-cnn", "app.kubernetes.io/managed-by": "dtr-operator"},
    }
    assert list(job["spec"]["tfReplicaSpecs"]) == ["Worker"]
    assert worker(job)["replicas"] == 2
    assert worker(job)["restartPolicy"] == "OnFailure"
    assert job["spec"]["successPolicy"] == "AllWorkers"
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "backoffLimit": 3, "suspend": False}
    c = container(job)
    assert c["name"] == "tensorflow"
    assert c["image"] == DEFAULT_TRAINER_IMAGE and c["imagePullPolicy"] == "IfNotPresent"
    assert c["command"] == ["python", "-m", "dtr_trainer"]
    assert c["ports"] == [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}]
    assert c["volumeMounts"] == [{"name": "dtr-data", "mountPath": "/mnt/dtr"}, {"name": "tmp", "mountPath": "/tmp"}]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert "resources" not in c
    pod = worker(job)["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "dtr-data", "persistentVolumeClaim": {"claimName": "mnist-cnn-data"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
    ]
    assert worker(job)["template"]["metadata"]["labels"]["distml.dev/run"] == "mnist-cnn"


def test_pod_security_is_restricted_and_non_root():
    job = build_tfjob(run_of())
    pod = worker(job)["template"]["spec"]["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 1000 and pod["fsGroup"] == 1000
    assert pod["fsGroupChangePolicy"] == "OnRootMismatch"  # no recursive chown of a claim on every start (M4)
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(job)["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert worker(job)["template"]["spec"]["automountServiceAccountToken"] is False


def test_trainer_args_for_defaults_follow_the_contract():
    assert trainer_args(run_of()) == [
        "--model", "cnn",
        "--dataset", "mnist",
        "--epochs", "3",
        "--batch-size-per-worker", "64",
        "--learning-rate", "0.001",
        "--seed", "42",
        "--validate-every", "1",
        "--data-dir", "/mnt/dtr/data",
        "--export-dir", "/mnt/dtr/models/mnist-cnn",
        "--backup-dir", f"/mnt/dtr/backup/mnist-cnn/{UID}",
        "--tensorboard-dir", "/mnt/dtr/logs/mnist-cnn",
        "--log-dir", "/mnt/dtr/logs/mnist-cnn",
        "--termination-message-path", "/dev/termination-log",
    ]


SOURCE = {"url": "https://data.example/t.npz", "sha256": "ab" * 32}
# (spec, flag, expected value; None = flag absent)
ARGS = [
    ({"training": {"model": "batch_norm"}}, "--model", "batch_norm"),
    ({"training": {"dataset": "digits"}}, "--dataset", "digits"),
    ({"training": {"dataset": "mine/set.npz"}}, "--dataset", "mine/set.npz"),
    ({"training": {"epochs": 7}}, "--epochs", "7"),
    ({"training": {"batchSizePerWorker": 32}}, "--batch-size-per-worker", "32"),
    ({}, "--steps-per-epoch", None),
    ({"training": {"stepsPerEpoch": 50}}, "--steps-per-epoch", "50"),
    ({"training": {"learningRate": 0.0005}}, "--learning-rate", "0.0005"),
    ({"training": {"learningRate": 1e-05}}, "--learning-rate", "1e-05"),
    ({"training": {"seed": 7}}, "--seed", "7"),
    ({"training": {"validateEvery": 0}}, "--validate-every", "0"),
    ({}, "--params", None),
    ({"training": {"params": {"width": 64, "lr": 0.5, "deep": False, "opt": "sgd"}}}, "--params",
     '{"deep":false,"lr":0.5,"opt":"sgd","width":64}'),
    ({"export": {"modelName": "digits_v2"}}, "--export-dir", "/mnt/dtr/models/digits_v2"),
    # datasetSource's caps: the API's defaults, and a quantity as the bytes the trainer takes
    ({}, "--dataset-max-bytes", None),
    ({"training": {"datasetSource": SOURCE}}, "--dataset-max-bytes", str(2**30)),
    ({"training": {"datasetSource": SOURCE}}, "--dataset-timeout-seconds", "3600"),
    ({"training": {"datasetSource": {**SOURCE, "maxSize": "2.5Gi"}}}, "--dataset-max-bytes", str(5 * 2**29)),
    ({"training": {"datasetSource": {**SOURCE, "maxSize": "500M"}}}, "--dataset-max-bytes", "500000000"),
    ({"training": {"datasetSource": {**SOURCE, "maxSize": "1500m"}}}, "--dataset-max-bytes", "1"),  # down to bytes
    ({"training": {"datasetSource": {**SOURCE, "timeoutSeconds": 60}}}, "--dataset-timeout-seconds", "60"),
]


@pytest.mark.parametrize(("spec", "flag", "expected"), ARGS)
def test_trainer_args_follow_the_spec(spec, flag, expected):
    args = container(build_tfjob(run_of(spec)))["args"]
    assert arg(args, flag) == expected
    assert float(arg(args, "--learning-rate")) == run_of(spec).training.learning_rate


# (spec, function of the TFJob -> value, expected)
TFJOB_FIELDS = [
    ({"workers": 5}, lambda j: worker(j)["replicas"], 5),
    ({"image": "reg/t:2"}, lambda j: container(j)["image"], "reg/t:2"),
    ({"imagePullPolicy": "Never"}, lambda j: container(j)["imagePullPolicy"], "Never"),
    ({"restartPolicy": "Never"}, lambda j: worker(j)["restartPolicy"], "Never"),
    ({"restartPolicy": "ExitCode"}, lambda j: worker(j)["restartPolicy"], "ExitCode"),
    ({"backoffLimit": 0}, lambda j: j["spec"]["runPolicy"]["backoffLimit"], 0),
    ({"activeDeadlineSeconds": 900}, lambda j: j["spec"]["runPolicy"]["activeDeadlineSeconds"], 900),
    ({"ttlSecondsAfterFinished": 60}, lambda j: j["spec"]["runPolicy"]["ttlSecondsAfterFinished"], 60),
    ({}, lambda j: "activeDeadlineSeconds" in j["spec"]["runPolicy"], False),
    ({}, lambda j: "ttlSecondsAfterFinished" in j["spec"]["runPolicy"], False),
    (
        {"resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}}},
        lambda j: container(j)["resources"],
        {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}},
    ),
    (
        {"storage": {"claimName": "shared"}},
        lambda j: worker(j)["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "shared",
    ),
]


@pytest.mark.parametrize(("spec", "get", "expected"), TFJOB_FIELDS)
def test_tfjob_fields_follow_the_spec(spec, get, expected):
    assert get(build_tfjob(run_of(spec))) == expected


def test_pvc_for_defaults():
    assert build_pvc(run_of()) == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "mnist-cnn-data",
            "namespace": "ml",
            "labels": {"distml.dev/run": "mnist-cnn", "app.kubernetes.io/managed-by": "dtr-operator"},
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def test_pvc_follows_storage_settings():
    pvc = build_pvc(run_of({"storage": {"size": "5Gi", "storageClassName": "fast", "accessMode": "ReadWriteMany"}}))
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "5Gi"}},
        "storageClassName": "fast",
    }


def test_no_pvc_with_an_existing_claim():
    assert build_pvc(run_of({"storage": {"claimName": "shared"}})) is None


def test_builders_do_not_share_mutable_state():
    run = run_of({"resources": {"limits": {"cpu": "1"}}})
    job = build_tfjob(run)
    container(job)["resources"]["limits"]["cpu"] = "99"
    assert run.resources["limits"]["cpu"] == "1"
    assert container(build_tfjob(run))["resources"]["limits"]["cpu"] == "1"


def test_owner_reference_makes_the_run_the_controller():
    assert owner_reference(run_of()) == {
        "apiVersion": "distml.dev/v1alpha1",
        "kind": "DistTrainingRun",
        "name": "mnist-cnn",
        "uid": UID,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_a_run_without_uid_cannot_own():
    with pytest.raises(ValueError, match="no uid"):
        owner_reference(parse_run(make_run({})))


@pytest.mark.parametrize(("reclaim", "pvc_owned"), [("Retain", False), ("Delete", True)])
def test_children_owner_references(reclaim, pvc_owned):
    run = run_of({"storage": {"reclaimPolicy": reclaim}})
    pvc, job = children(run)
    assert is_owned_by(job, UID)
    assert job["metadata"]["ownerReferences"][0]["controller"] is True
    assert is_owned_by(pvc, UID) is pvc_owned
    assert ("ownerReferences" in pvc["metadata"]) is pvc_owned


def test_children_with_an_existing_claim_is_only_the_tfjob():
    pvc, job = children(run_of({"storage": {"claimName": "shared"}}))
    assert pvc is None and is_owned_by(job, UID)


def test_ownership_checks():
    run = run_of()
    mine = {"metadata": {"ownerReferences": [{"uid": UID}]}}
    foreign = {"metadata": {"ownerReferences": [{"uid": "other"}], "labels": {"distml.dev/run": "mnist-cnn"}}}
    bare = {"metadata": {}}
    retained = {"metadata": {"labels": {"distml.dev/run": "mnist-cnn"}}}
    other_run = {"metadata": {"labels": {"distml.dev/run": "another"}}}
    assert is_owned_by(mine, UID) and not is_owned_by(foreign, UID) and not is_owned_by(bare, UID)
    assert not is_owned_by(mine, None)
    assert is_reusable_pvc(mine, run) and is_reusable_pvc(retained, run)
    assert not is_reusable_pvc(foreign, run) and not is_reusable_pvc(bare, run)
    assert not is_reusable_pvc(other_run, run)


def test_objects_left_by_an_earlier_run_of_the_same_name():
    run = run_of()
    earlier = {"controller": True, "kind": "DistTrainingRun", "name": "mnist-cnn", "uid": "old-uid"}
    assert left_by_earlier_run({"metadata": {"ownerReferences": [earlier]}}, run)
    assert left_by_earlier_run({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, run)
    assert not left_by_earlier_run({"metadata": {"ownerReferences": [{**earlier, "uid": UID}]}}, run)
    assert not left_by_earlier_run({"metadata": {"ownerReferences": [{**earlier, "name": "other"}]}}, run)
    assert not left_by_earlier_run({"metadata": {"ownerReferences": [{**earlier, "kind": "Job"}]}}, run)
    assert not left_by_earlier_run({"metadata": {"labels": {"distml.dev/run": "mnist-cnn"}}}, run)


def test_backup_dir_is_per_run_object_so_a_recreated_run_starts_afresh():
    first = parse_run(make_run({}, uid="uid-1"))
    again = parse_run(make_run({}, uid="uid-2"))
    assert b.backup_dir(first) == "/mnt/dtr/backup/mnist-cnn/uid-1"
    assert b.backup_dir(again) != b.backup_dir(first)
    assert "/mnt/dtr/backup/mnist-cnn/uid-1" in b.trainer_args(first)
    assert b.backup_dir(parse_run(make_run({}))) == "/mnt/dtr/backup/mnist-cnn"  # no uid: dtr run, dtr render


# ---- placement, queue, gang, suspend (docs/scheduling.md) ---------------------------------------

PLACED = {
    "nodeSelector": {"pool": "gpu"},
    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    "priorityClassName": "batch-low",
    "podLabels": {"team": "ml"},
    "podAnnotations": {"sidecar.istio.io/inject": "false"},
}  # fmt: skip


def test_placement_reaches_every_worker_pod_and_our_labels_win():
    job = build_tfjob(run_of(PLACED))
    template = worker(job)["template"]
    pod = template["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["tolerations"] == PLACED["tolerations"]
    assert pod["affinity"] == PLACED["affinity"]
    assert pod["priorityClassName"] == "batch-low"
    assert template["metadata"]["labels"] == {"team": "ml", **b.run_labels(run_of(PLACED))}
    assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}


def test_no_placement_adds_nothing_to_the_pod():
    pod = worker(build_tfjob(run_of()))["template"]
    assert not {"nodeSelector", "tolerations", "affinity", "priorityClassName"} & set(pod["spec"])
    assert "annotations" not in pod["metadata"]


def test_a_queued_run_is_labelled_for_kueue_and_created_suspended():
    job = build_tfjob(run_of({"queueName": "team-a"}))
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert "kueue.x-k8s.io/queue-name" not in worker(job)["template"]["metadata"]["labels"]


def test_a_suspended_run_creates_its_tfjob_suspended():
    assert build_tfjob(run_of({"suspend": True}))["spec"]["runPolicy"]["suspend"] is True


def test_gang_scheduling_goes_to_the_run_policy():
    gang = {"minAvailable": 2, "queue": "research", "priorityClass": "high", "scheduleTimeoutSeconds": 120}
    assert build_tfjob(run_of({"schedulingPolicy": gang}))["spec"]["runPolicy"]["schedulingPolicy"] == gang
    assert build_tfjob(run_of({"schedulingPolicy": {"minAvailable": 1}}))["spec"]["runPolicy"]["schedulingPolicy"] == {
        "minAvailable": 1}  # fmt: skip
