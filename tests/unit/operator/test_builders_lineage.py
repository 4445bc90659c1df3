"""builders: what the trainer's lineage file needs from the operator (the DTR_RUN_* env) and the worker logs' flag."""

from __future__ import annotations

import json

from dtr_operator.builders import build_tfjob, effective_spec, trainer_args, trainer_env
from dtr_operator.spec import parse_run
from hypothesis import given
from hypothesis import strategies as st

from support.runs import make_run

UID = "0b6e4a52-1111-2222-3333-444455556666"


def env_of(run) -> dict[str, str]:
    (c,) = build_tfjob(run)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in c["env"]}


def test_the_pod_says_which_run_it_trains_for():
    run = parse_run(make_run({"image": "reg/t:2", "training": {"dataset": "digits"}}, uid=UID))
    env = env_of(run)
    assert env == {
        "PYTHONUNBUFFERED": "1",
        "DTR_RUN_NAME": "mnist-cnn",
        "DTR_RUN_UID": UID,
        "DTR_RUN_NAMESPACE": "ml",
        "DTR_RUN_SPEC": env["DTR_RUN_SPEC"],
        "DTR_TRAINER_IMAGE": "reg/t:2",
    }
    assert " " not in env["DTR_RUN_SPEC"]  # compact
    assert json.loads(env["DTR_RUN_SPEC"]) == {
        "workers": 2,
        "image": "reg/t:2",
        "imagePullPolicy": "IfNotPresent",
        "training": {"model": "cnn", "dataset": "digits", "epochs": 3, "batchSizePerWorker": 64,
                     "learningRate": 0.001, "seed": 42, "validateEvery": 1},
        "storage": {"size": "1Gi", "accessMode": "ReadWriteOnce", "reclaimPolicy": "Retain", "volume": True},
        "export": {"modelName": "mnist-cnn"},
        "restartPolicy": "OnFailure",
        "backoffLimit": 3,
        "watchdog": {"enabled": True, "stallFactor": 5, "minStallSeconds": 600, "onStall": "Report", "maxRestarts": 3},
        "disruption": {"resume": True, "maxResumes": 3, "waitSeconds": 900, "protect": False,
                       "saveOnStop": False},
    }


def test_a_run_without_uid_has_no_uid_variable():
    """dtr render / dtr run read runs from files: no uid, so no DTR_RUN_UID (the lineage says null)."""
    names = [e["name"] for e in trainer_env(parse_run(make_run({})))]
    assert "DTR_RUN_UID" not in names and "DTR_RUN_NAME" in names


def test_a_sweeps_trial_names_its_sweep_and_index_and_a_run_labelled_half_way_names_none():
    trial = make_run({}, labels={"distml.dev/sweep": "lr", "distml.dev/trial": "3"})
    env = env_of(parse_run(trial))
    assert (env["DTR_RUN_SWEEP"], env["DTR_RUN_TRIAL"]) == ("lr", "3")
    for labels in ({"distml.dev/sweep": "lr"}, {"distml.dev/sweep": "lr", "distml.dev/trial": "x"}, {}):
        assert "DTR_RUN_SWEEP" not in env_of(parse_run(make_run({}, labels=labels))), labels


def test_a_claimed_volume_spec_has_no_size():
    spec = effective_spec(parse_run(make_run({"storage": {"claimName": "shared"}})))
    assert spec["storage"] == {"claimName": "shared", "accessMode": "ReadWriteOnce", "reclaimPolicy": "Retain",
                               "volume": True}


def test_worker_logs_go_beside_tensorboards_on_the_volume():
    args = trainer_args(parse_run(make_run({})))
    assert args[args.index("--log-dir") + 1] == "/mnt/dtr/logs/mnist-cnn" == args[args.index("--tensorboard-dir") + 1]


valid_specs = st.fixed_dictionaries({}, optional={
    "workers": st.integers(1, 64),
    "image": st.sampled_from(["reg/t:1", "localhost/distml/trainer:0.2.0"]),
    "imagePullPolicy": st.sampled_from(["Always", "IfNotPresent", "Never"]),
    "training": st.fixed_dictionaries({}, optional={
        "model": st.sampled_from(["cnn", "dropout", "batch_norm"]),
        "dataset": st.sampled_from(["mnist", "digits", "a/b.npz"]),
        "epochs": st.integers(1, 1000),
        "batchSizePerWorker": st.integers(1, 4096),
        "stepsPerEpoch": st.integers(1, 1_000_000),
        "learningRate": st.floats(1e-9, 10),
        "seed": st.integers(0, 2**31 - 1),
        "validateEvery": st.integers(0, 1000),
        "params": st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
                                  st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
                                  | st.booleans() | st.text(max_size=8), max_size=4),
    }),
    "storage": st.one_of(
        st.fixed_dictionaries({}, optional={"size": st.sampled_from(["1Gi", "500Mi"]),
                                            "storageClassName": st.just("fast"),
                                            "accessMode": st.sampled_from(["ReadWriteOnce", "ReadWriteMany"]),
                                            "reclaimPolicy": st.sampled_from(["Retain", "Delete"])}),
        st.fixed_dictionaries({"claimName": st.just("shared")},
                              optional={"accessMode": st.sampled_from(["ReadWriteOnce", "ReadWriteMany"])}),
    ),
    "export": st.fixed_dictionaries({}, optional={"modelName": st.sampled_from(["m", "a_b.c"])}),
    "resources": st.fixed_dictionaries({}, optional={"limits": st.just({"cpu": "1"}),
                                                     "requests": st.just({"memory": "1Gi", "cpu": 2})}),
    "restartPolicy": st.sampled_from(["Never", "OnFailure", "ExitCode"]),
    "backoffLimit": st.integers(0, 100),
    "activeDeadlineSeconds": st.integers(1, 10**6),
    "ttlSecondsAfterFinished": st.integers(60, 10**6),
})


@given(spec=valid_specs)
def test_the_spec_in_the_env_is_the_run_the_operator_parsed(spec):
    """Nothing lost: the JSON the trainer records parses back to the same RunSpec."""
    run = parse_run(make_run(spec, uid=UID))
    recorded = json.loads(env_of(run)["DTR_RUN_SPEC"])
    assert parse_run(make_run(recorded, uid=UID)) == run
