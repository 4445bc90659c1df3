"""The operator's half of the operator-trainer contract, as JSON on stdout (run with the operator's
Python 3.11): its model and dataset lists, its training defaults, and, for runs covering every
model, dataset kind and optional flag, the trainer command line `builders.trainer_args` makes with
the values it stands for, and the container's env (the run's identity for the lineage file); and for a run's own
code, a file (with the digest the operator recorded) or a module, the command line; and for spec.export, the
command line with the runs it lets publish under its model name.
tests/trainer/test_contract.py parses each with the trainer's own parser.
"""

import dataclasses
import itertools
import json

from dtr_contract import layout
from dtr_operator import api, builders, spec


def case(training: dict) -> dict:
    run = spec.parse_run({"apiVersion": api.API_VERSION, "kind": api.KIND,
                          "metadata": {"name": "contract", "namespace": "ns", "uid": "contract-uid"},
                          "spec": {"training": training}})
    (container,) = builders.build_tfjob(run)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return {"argv": builders.trainer_args(run), "training": dataclasses.asdict(run.training),
            "export_dir": builders.export_dir(run), "logs_dir": builders.logs_dir(run),
            "env": {e["name"]: e["value"] for e in container["env"]}, "image": run.image}


def trial_env() -> dict:
    """A sweep's trial (observe.trial_run's labels): the container's env, which names the sweep and the index."""
    labels = {api.SWEEP_LABEL: "lr", api.TRIAL_LABEL: "3"}
    run = spec.parse_run({"apiVersion": api.API_VERSION, "kind": api.KIND,
                          "metadata": {"name": "lr-3", "namespace": "ns", "uid": "trial-uid", "labels": labels}})
    (container,) = builders.build_tfjob(run)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def code_case(code: dict, sha256: str) -> dict:
    """A run of its own code, its command line made with the digest the operator recorded (status.code)."""
    run = spec.parse_run({"apiVersion": api.API_VERSION, "kind": api.KIND,
                          "metadata": {"name": "contract", "namespace": "ns", "uid": "contract-uid"},
                          "spec": {"training": {"code": code, "dataset": "tables/wine"}}})
    return {"argv": builders.trainer_args(run, sha256), "sha256": sha256,
            "file": layout.code_file(run.code.file_key) if run.code.file_key else None,
            "module": run.code.module}


def export_case(export: dict) -> dict:
    """A run's spec.export: the command line, and whom it lets publish under its model name (allowedPublishers)."""
    run = spec.parse_run({"apiVersion": api.API_VERSION, "kind": api.KIND,
                          "metadata": {"name": "contract", "namespace": "ns"}, "spec": {"export": export}})
    return {"argv": builders.trainer_args(run), "publishers": list(run.allowed_publishers or ()),
            "export_dir": builders.export_dir(run)}


datasets = [*spec.BUILTIN_DATASETS, "shards/train.npz"]
cases = [case({"model": m, "dataset": d}) for m, d in itertools.product(spec.MODELS, datasets)]
cases += [
    case({"epochs": 1000, "batchSizePerWorker": 4096, "stepsPerEpoch": 1_000_000, "learningRate": 10, "seed": 0}),
    case({"epochs": 1, "batchSizePerWorker": 1, "stepsPerEpoch": 1, "learningRate": 1e-07, "seed": 2**31 - 1}),
    case({"learningRate": 0.1 + 0.2}),  # a float whose shortest repr has 17 digits
    case({"datasetSource": {"url": "https://data.example/sets/wine.npz?sig=a%2Fb", "sha256": "0f" * 32}}),
]
print(json.dumps({
    "models": list(spec.MODELS),
    "datasets": list(spec.BUILTIN_DATASETS),
    "defaults": dataclasses.asdict(spec.TrainingSpec()),
    "cases": cases,
    "trial_env": trial_env(),
    "code_cases": [code_case({"configMap": "wine-code", "key": "wine.py"}, "ab" * 32),
                   code_case({"module": "acme.wine"}, "cd" * 32)],
    "export_cases": [export_case({}), export_case({"modelName": "team", "allowedPublishers": ["b", "c-2"]}),
                     export_case({"allowedPublishers": [f"r{i}" for i in range(16)]})],
}))
