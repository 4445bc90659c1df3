"""Property tests of the pure core: whatever a run file holds, parsing either says which field is
wrong or yields manifests the cluster can take; whatever a TFJob reports, the status is well formed."""

from __future__ import annotations

import dataclasses
import json
import re

from dtr_operator.builders import build_pvc, build_tfjob, children, effective_spec
from dtr_operator.spec import RunSpec, SpecError, parse_run
from dtr_operator.status.compute import next_status, tfjob_status
from dtr_operator.status.state import MAX_MESSAGE
from hypothesis import given, settings
from hypothesis import strategies as st

from support.runs import make_run

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
FIELDS = (
    "metadata.name", "spec.workers", "spec.image", "spec.imagePullPolicy", "spec.training",
    "spec.storage", "spec.export", "spec.resources", "spec.restartPolicy", "spec.backoffLimit",
    "spec.activeDeadlineSeconds", "spec.ttlSecondsAfterFinished", "spec.",
)  # fmt: skip

anything = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(-1, 20), st.text(max_size=12))
names = st.one_of(st.from_regex(r"[a-z][-a-z0-9]{0,55}[a-z0-9]", fullmatch=True), st.text(max_size=60))


def maybe(strategy):
    return st.one_of(strategy, anything)


training = st.fixed_dictionaries(
    {},
    optional={
        "model": maybe(st.sampled_from(["cnn", "dropout", "batch_norm"])),
        "dataset": maybe(st.sampled_from(["mnist", "digits", "a/b.npz", "../x.npz", "/x.npz", "x.csv"])),
        "epochs": maybe(st.integers(0, 1001)),
        "batchSizePerWorker": maybe(st.integers(0, 5000)),
        "stepsPerEpoch": maybe(st.integers(0, 10)),
        "learningRate": maybe(st.floats(0, 11, allow_nan=False)),
        "seed": maybe(st.integers(-1, 2**31)),
        "code": maybe(st.fixed_dictionaries({}, optional={
            "configMap": maybe(st.sampled_from(["wine-code", "Bad_Name"])),
            "key": maybe(st.sampled_from(["wine.py", "x.txt", "../x.py"])),
            "module": maybe(st.sampled_from(["acme.wine", "acme-wine"]))})),
        "metric": maybe(st.sampled_from(["mae", "val loss", "auc"])),
    },
)
storage = st.fixed_dictionaries(
    {},
    optional={
        "claimName": maybe(st.sampled_from(["shared", "Bad_Name", "x.y"])),
        "size": maybe(st.sampled_from(["1Gi", "500Mi", "0", "-1Gi", "lots", "1.5G"])),
        "storageClassName": maybe(st.just("fast")),
        "accessMode": maybe(st.sampled_from(["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"])),
        "reclaimPolicy": maybe(st.sampled_from(["Retain", "Delete", "Recycle"])),
    },
)
specs = st.fixed_dictionaries(
    {},
    optional={
        "workers": maybe(st.integers(0, 70)),
        "image": maybe(st.just("reg/t:1")),
        "imagePullPolicy": maybe(st.sampled_from(["Always", "IfNotPresent", "Never", "Sometimes"])),
        "training": maybe(training),
        "storage": maybe(storage),
        "export": maybe(
            st.fixed_dictionaries({}, optional={"modelName": maybe(st.sampled_from(["m", "../m", "a_b"]))})
        ),
        "resources": maybe(st.fixed_dictionaries({}, optional={"limits": maybe(st.just({"cpu": "1"}))})),
        "restartPolicy": maybe(st.sampled_from(["Never", "OnFailure", "ExitCode", "Always"])),
        "backoffLimit": maybe(st.integers(-1, 101)),
        "activeDeadlineSeconds": maybe(st.integers(0, 10)),
        "ttlSecondsAfterFinished": maybe(st.integers(55, 70)),
        "suspend": maybe(st.booleans()),
        "nodeSelector": maybe(st.dictionaries(st.sampled_from(["pool", "kubernetes.io/arch", "bad key"]),
                                              st.sampled_from(["gpu", "", "x" * 64]), max_size=3)),
        "tolerations": maybe(st.lists(st.fixed_dictionaries({}, optional={
            "key": maybe(st.just("gpu")), "operator": maybe(st.sampled_from(["Exists", "Equal", "Maybe"])),
            "value": maybe(st.sampled_from(["", "v"])), "effect": maybe(st.sampled_from(["NoSchedule", "NoExecute"])),
            "tolerationSeconds": maybe(st.integers(0, 60))}), max_size=3)),
        "affinity": maybe(st.fixed_dictionaries({}, optional={"nodeAffinity": maybe(st.sampled_from(
            [{"preferredDuringSchedulingIgnoredDuringExecution": []}, {"x": [1]}]))})),
        "priorityClassName": maybe(st.sampled_from(["low", "Bad_Name"])),
        "podLabels": maybe(st.dictionaries(st.sampled_from(["team", "distml.dev/run", "a/b"]),
                                           st.sampled_from(["ml", "not ok"]), max_size=2)),
        "podAnnotations": maybe(st.dictionaries(st.sampled_from(["note", "/x"]), st.just("v"), max_size=2)),
        "queueName": maybe(st.sampled_from(["team-a", "Bad_Q"])),
        "schedulingPolicy": maybe(st.fixed_dictionaries({}, optional={
            "minAvailable": maybe(st.integers(0, 3)), "queue": maybe(st.just("q"))})),
    },
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(name=names, spec=specs)
def test_a_run_is_either_refused_with_its_field_named_or_buildable(name, spec):
    try:
        run = parse_run(make_run(spec, name=name, uid="u-1"))
    except SpecError as err:
        assert err.errors, err
        for message in err.errors:  # every one found, each naming its field
            assert message.startswith(FIELDS), message
            assert "\n" not in message
        assert "\n" not in str(err)  # a status message is one line
        return
    assert isinstance(run, RunSpec)
    job = build_tfjob(run)
    json.dumps(job)  # serialisable as the API wants it
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == run.workers
    for index in range(run.workers):
        pod = f"{job['metadata']['name']}-worker-{index}"
        assert len(pod) <= 63 and DNS_LABEL.fullmatch(pod), pod
    (container,) = worker["template"]["spec"]["containers"]
    assert all(isinstance(a, str) for a in container["args"])
    export = container["args"][container["args"].index("--export-dir") + 1]
    assert export.startswith("/mnt/dtr/models/") and ".." not in export.split("/")
    pvc, owned_job = children(run)
    assert owned_job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert (pvc is None) == (build_pvc(run) is None) == (run.storage.claim_name is not None)
    # What the pods are told the run was (lineage) reads back as the same run.
    assert parse_run(make_run(effective_spec(run), name=name, uid="u-1")) == dataclasses.replace(run, suspend=False)


conditions = st.lists(
    st.fixed_dictionaries({
        "type": st.sampled_from(["Created", "Running", "Restarting", "Succeeded", "Suspended", "Failed", "Other"]),
        "status": st.sampled_from(["True", "False", "Unknown"]),
        "reason": st.text(max_size=10),
        "message": st.text(max_size=50),
    }),
    max_size=6,
)  # fmt: skip
counts = st.fixed_dictionaries({}, optional={k: st.integers(0, 64) for k in ("active", "succeeded", "failed")})
messages = st.one_of(st.none(), st.text(max_size=80),
                     st.builds(json.dumps, st.dictionaries(st.text(max_size=8), anything)))


@settings(max_examples=150, deadline=None)
@given(conds=conditions, worker=counts, chief_message=messages)
def test_any_tfjob_report_gives_a_well_formed_status(conds, worker, chief_message):
    run = parse_run(make_run({}, uid="u-1", generation=1))
    tfjob = {"metadata": {"name": "mnist-cnn"}, "status": {"conditions": conds, "replicaStatuses": {"Worker": worker}}}
    pod = {
        "metadata": {"name": "mnist-cnn-worker-0", "labels": {
            "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "0"}},
        "status": {"containerStatuses": [{"name": "tensorflow", "state": {"terminated": {
            "exitCode": 0, "message": chief_message}}}]},
    }  # fmt: skip
    first = tfjob_status(run, tfjob, [pod], {}, "2026-01-01T00:00:00Z")
    assert first["phase"] in ("Pending", "Running", "Succeeded", "Failed")
    assert re.fullmatch(r"\d+/2", first["workersReady"])
    assert len(first["message"]) <= MAX_MESSAGE and "\n" not in first["message"]
    assert [c["type"] for c in first["conditions"]] == ["Created", "Running", "Suspended", "Succeeded", "Failed"]
    assert sum(c["status"] == "True" for c in first["conditions"][1:]) <= 1
    json.dumps(first)
    # The same report later changes nothing; a finished run accepts no further change.
    again = tfjob_status(run, tfjob, [pod], first, "2026-01-01T00:05:00Z")
    assert next_status(first, again) is None
    if first["phase"] in ("Succeeded", "Failed"):
        assert next_status(first, tfjob_status(run, {"status": {}}, [], first, "x")) is None
