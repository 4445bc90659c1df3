"""The field table (fields.py) against what the operator builds: every field lands where the table says, and
the parts of the API the table does not generate agree with it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from dtr_operator import fields, schema
from dtr_operator.builders import build_pvc, build_tfjob, trainer_args
from dtr_operator.spec import parse_run

from support.runs import make_run

# A node affinity as a pod spec has it (the CRD's schema is the pod spec's, bounded).
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}}

# A value other than the default for every field with a destination: a field added to the table without one
# here fails test_every_destination_has_a_sample.
SAMPLES: dict[str, Any] = {
    "workers": 3,
    "image": "reg.example/trainer:2",
    "imagePullPolicy": "Never",
    "training.model": "batch_norm",
    "training.code.configMap": "my-code",
    "training.code.module": "acme.models.wine",
    "training.metric": "mae",
    "training.validateEvery": 3,
    "training.params": {"width": 64, "dropout": 0.25, "optimizer": "sgd", "residual": True},
    "training.dataset": "sets/d.npz",
    "training.datasetSource.url": "https://data.example/sets/wine.npz?sig=1",
    "training.datasetSource.sha256": "ab" * 32,
    "training.datasetSource.maxSize": "123456",  # bytes already: the trainer's flag takes bytes (test_builders)
    "training.datasetSource.timeoutSeconds": 600,
    "training.epochs": 7,
    "training.batchSizePerWorker": 16,
    "training.stepsPerEpoch": 11,
    "training.learningRate": 0.25,
    "training.seed": 7,
    "storage.claimName": "shared",
    "storage.size": "3Gi",
    "storage.storageClassName": "fast",
    "storage.accessMode": "ReadWriteMany",
    "export.modelName": "digits_v2",
    "export.storageUri": "s3://models/digits",
    "storage.backupUri": "s3://runs/backups/digits",
    "resources": {"limits": {"cpu": "2"}, "requests": {"memory": "1Gi"}},
    "restartPolicy": "ExitCode",
    "backoffLimit": 9,
    "activeDeadlineSeconds": 600,
    "ttlSecondsAfterFinished": 120,
    "suspend": True,
    "nodeSelector": {"pool": "gpu"},
    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": AFFINITY,
    "priorityClassName": "batch-low",
    "podLabels": {"team": "ml"},
    "podAnnotations": {"note": "n"},
    "queueName": "team-a",
    "workloadPriorityClass": "high",
    "schedulingPolicy.minAvailable": 2,
    "schedulingPolicy.queue": "q",
    "schedulingPolicy.priorityClass": "p",
    "schedulingPolicy.scheduleTimeoutSeconds": 30,
}


# spec.objectStore, for the fields that need one (an s3:// URI).
STORE = {"endpoint": "http://s3.example:8333", "credentialsSecret": "s3-keys"}


def _spec_with(path: str, value: Any) -> dict[str, Any]:
    """A spec with only the field at path (e.g. training.model) set."""
    spec: dict[str, Any] = {}
    *parents, name = path.split(".")
    target = spec
    for parent in parents:
        target = target.setdefault(parent, {})
    target[name] = value
    return spec


_SOURCE = {"training": {"datasetSource": {"url": "https://data.example/d.npz", "sha256": "cd" * 32}}}
# What a field needs beside it to be set at all (a default of a field inside an optional object).
COMPANIONS: dict[str, dict[str, Any]] = {
    "training.code.key": _spec_with("training.code.configMap", "my-code"),
    "training.datasetSource.url": _spec_with("training.datasetSource.sha256", "cd" * 32),
    "training.datasetSource.sha256": _spec_with("training.datasetSource.url", "https://data.example/d.npz"),
    "training.datasetSource.maxSize": _SOURCE,
    "training.datasetSource.timeoutSeconds": _SOURCE,
    "workloadPriorityClass": _spec_with("queueName", "team-a"),
    "export.storageUri": {"objectStore": STORE},
    "storage.backupUri": {"objectStore": STORE, "storage": {"volume": False},
                          "export": {"storageUri": "s3://models/digits"}},
    "objectStore.region": {"objectStore": STORE, "training": {"dataset": "s3://data/digits"}},
}


def _with(spec: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """spec and more merged, objects by their fields."""
    out = dict(spec)
    for key, value in more.items():
        out[key] = _with(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def _destinations() -> list[tuple[str, schema.Field]]:
    return [(path.removeprefix("spec."), f) for path, f in schema.walk(fields.SPEC) if f.to is not None]


def _resolve(obj: Any, path: str) -> Any:
    """obj at a To path: names and list indexes by ".", a [key] that may hold dots."""
    for key, name in re.findall(r"\[([^\]]+)\]|([^.\[\]]+)", path):
        part = key or name
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def _landed(f: schema.Field, run_doc: dict[str, Any]) -> Any:
    assert f.to is not None
    run = parse_run(run_doc)
    if f.to.kind == "trainer":
        args = trainer_args(run)
        return args[args.index(f.to.path) + 1]
    tfjob = build_tfjob(run)
    template = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    roots = {"tfjob": tfjob, "pod": template, "container": template["spec"]["containers"][0], "pvc": build_pvc(run)}
    return _resolve(roots[f.to.kind], f.to.path)


def test_every_destination_has_a_sample() -> None:
    assert sorted(SAMPLES) == sorted(path for path, _ in _destinations())


@pytest.mark.parametrize(("path", "f"), _destinations(), ids=[p for p, _ in _destinations()])
def test_every_field_lands_where_the_table_says(path: str, f: schema.Field) -> None:
    value = SAMPLES[path]
    assert value != f.default, f"{path}: the sample must differ from the default"
    landed = _landed(f, make_run(_with(COMPANIONS.get(path, {}), _spec_with(path, value))))
    if f.type == "params":
        assert json.loads(landed) == value, (path, landed)  # one JSON object (dtr_contract.params)
    elif f.to is not None and f.to.kind == "trainer":
        assert str(value) in landed, (path, landed)
    elif isinstance(value, dict) and f.type == "map":
        assert value.items() <= landed.items(), (path, landed)  # labels: the operator's are there too
    else:
        assert landed == value, (path, landed)


def test_a_default_is_a_value_the_field_accepts() -> None:
    """The schema's defaults and the operator's: set explicitly, each gives the run an empty spec gives (or the
    field's companions alone give)."""
    for path, f in schema.walk(fields.SPEC):
        if f.default is not None and f.type != "object":
            path = path.removeprefix("spec.")
            base = COMPANIONS.get(path, {})
            assert parse_run(make_run(_with(base, _spec_with(path, f.default)))) == parse_run(make_run(base)), path
