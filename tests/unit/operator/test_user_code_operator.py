"""A run's own code on the operator's side (docs/own-model.md): the spec fields, what the builders make of them,
the decisions about the code's ConfigMap, the status from a summary with the model's own metrics, and the
reason of a failure in the user's code. Pure, no API (milliseconds); the integration tier runs the same against a
real API server (tests/integration/test_operator_user_code.py)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from dtr_contract import exits, flags, layout
from dtr_operator import settings as cfg
from dtr_operator.builders import (
    CODE_FILE_MODE,
    build_tfjob,
    children,
    effective_spec,
    pinned_code_sha256,
    trainer_args,
)
from dtr_operator.kube import ApiError
from dtr_operator.reconcile.decide import UNREAD, Create, Observed, Record, Sync, decide
from dtr_operator.spec import SpecError, parse_run
from dtr_operator.status.code import code_status, configmap_content
from dtr_operator.status.compute import tfjob_status
from dtr_operator.status.pods import restart_cannot_help

from support.fake_kube import FakeKube
from support.reconciler import reconciler, status_writes
from support.runs import make_run
from support.tfjobs import TFJOB_UID, controlled_by

SOURCE = "def build_model(ctx):\n    ...\n"
SHA = hashlib.sha256(SOURCE.encode()).hexdigest()
FILE_RUN = {"training": {"code": {"configMap": "wine-code", "key": "wine.py"}, "dataset": "wine", "metric": "auc"}}
MODULE_RUN = {"image": "reg.example/acme:1", "training": {"code": {"module": "acme.wine"}}}


def parsed(spec: dict[str, Any], **meta: Any) -> Any:
    return parse_run(make_run(spec, **{"uid": "u-1", "generation": 1, **meta}))


def configmap(data: dict[str, str] | None = None, binary: dict[str, str] | None = None) -> dict[str, Any]:
    cm: dict[str, Any] = {"metadata": {"name": "wine-code", "namespace": "ml"}}
    if data is not None:
        cm["data"] = data
    if binary is not None:
        cm["binaryData"] = binary
    return cm


# ---- the spec ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("training", "words"), [
    ({"code": {}}, "spec.training.code: must set exactly one of configMap"),
    ({"code": {"configMap": "c", "module": "m"}}, "spec.training.code: must set exactly one of configMap"),
    ({"code": {"module": "m", "key": "m.py"}}, "spec.training.code.key: cannot be set with spec.training.code.module"),
    ({"code": {"configMap": "c", "key": "m.txt"}}, "spec.training.code.key: must be a ConfigMap key naming a Python"),
    ({"code": {"configMap": "c", "key": "../m.py"}}, "spec.training.code.key: must be a ConfigMap key"),
    ({"code": {"configMap": "Bad_Name"}}, "spec.training.code.configMap: must be a ConfigMap name"),
    ({"code": {"module": "acme-models"}}, "spec.training.code.module: must be a Python module name"),
    ({"code": {"module": "acme..m"}}, "spec.training.code.module: must be a Python module name"),
    ({"metric": "1st"}, "spec.training.metric: must be a metric name"),
    ({"metric": "val loss"}, "spec.training.metric: must be a metric name"),
    # Without code the dataset rule is as strict as before; with code, still relative and inside the volume.
    ({"dataset": "tables/wine"}, "spec.training.dataset: must be mnist"),
    ({"dataset": "wine.csv"}, "spec.training.dataset: must be mnist"),
    ({"code": {"module": "m"}, "dataset": "/etc/passwd"}, "spec.training.dataset: must be"),
    ({"code": {"module": "m"}, "dataset": "a/../../etc"}, "spec.training.dataset: must be"),
    ({"code": {"module": "m"}, "dataset": "a b"}, "spec.training.dataset: must be"),
])  # fmt: skip
def test_code_and_metric_are_refused_with_the_field_named(training: dict[str, Any], words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_run(make_run({"training": training}))
    assert words in str(err.value)


@pytest.mark.parametrize("dataset", ["wine", "tables/wine.csv", "records/", "shards/train-0.tfrecord", "mnist"])
def test_with_code_the_dataset_is_any_relative_path(dataset: str) -> None:
    run = parse_run(make_run({"training": {"code": {"module": "m"}, "dataset": dataset}}))
    assert run.training.dataset == dataset


def test_code_parses_to_its_part_and_round_trips_through_the_effective_spec() -> None:
    run = parsed(FILE_RUN)
    assert (run.code.config_map, run.code.file_key, run.code.module, run.training.metric) == (
        "wine-code", "wine.py", None, "auc")  # fmt: skip
    assert parse_run(make_run({"training": {"code": {"configMap": "c"}}})).code.file_key == "model.py"
    module = parsed(MODULE_RUN)
    assert module.code.module == "acme.wine" and module.code.file_key is None
    for run in (parsed(FILE_RUN), module, parsed({})):
        spec = effective_spec(run)
        assert parse_run({**make_run(spec, uid="u-1", generation=1)}) == run
    assert "code" not in effective_spec(parsed({}))["training"]
    assert effective_spec(module)["training"]["code"] == {"module": "acme.wine"}  # no key beside a module


# ---- the builders -----------------------------------------------------------------------------


def _template(run: Any) -> dict[str, Any]:
    return build_tfjob(run)["spec"]["tfReplicaSpecs"]["Worker"]["template"]


def test_a_file_in_a_configmap_is_mounted_read_only_and_named_with_code_not_model() -> None:
    run = parsed(FILE_RUN)
    args = trainer_args(run)
    assert args[:4] == [flags.CODE, layout.code_file("wine.py"), flags.METRIC, "auc"]
    assert flags.MODEL not in args and flags.CODE_MODULE not in args
    pod = _template(run)
    volume = pod["spec"]["volumes"][-1]
    assert volume["configMap"] == {"name": "wine-code", "items": [{"key": "wine.py", "path": "wine.py",
                                                                   "mode": CODE_FILE_MODE}],
                                   "defaultMode": CODE_FILE_MODE}  # fmt: skip
    assert CODE_FILE_MODE == 0o444
    (container,) = pod["spec"]["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert mount == {"name": volume["name"], "mountPath": layout.CODE_DIR, "readOnly": True}
    assert args[1].startswith(layout.CODE_DIR + "/")


def test_the_files_recorded_digest_goes_to_every_worker_and_is_read_back_from_the_tfjob() -> None:
    run = parsed(FILE_RUN)
    assert trainer_args(run, SHA)[:4] == [flags.CODE, layout.code_file("wine.py"), flags.CODE_SHA256, SHA]
    _, tfjob = children(run, SHA)
    (container,) = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert container["args"] == trainer_args(run, SHA) and pinned_code_sha256(tfjob) == SHA
    assert flags.CODE_SHA256 not in trainer_args(run) and pinned_code_sha256(build_tfjob(run)) is None
    # Only a file is pinned: a module is its image's (spec.image, --allowed-images), a built-in the trainer's.
    assert flags.CODE_SHA256 not in trainer_args(parsed(MODULE_RUN), SHA)
    assert flags.CODE_SHA256 not in trainer_args(parsed({}), SHA)
    assert pinned_code_sha256({"spec": {"tfReplicaSpecs": {"Worker": None}}}) is None
    assert pinned_code_sha256({}) is None


def test_a_module_in_the_image_is_named_with_code_module_and_mounts_nothing() -> None:
    run = parsed(MODULE_RUN)
    args = trainer_args(run)
    assert args[:2] == [flags.CODE_MODULE, "acme.wine"] and flags.MODEL not in args and flags.CODE not in args
    pod = _template(run)
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["dtr-data", "tmp"]
    assert pod["spec"]["containers"][0]["image"] == "reg.example/acme:1"


def test_a_built_in_model_keeps_its_command_line() -> None:
    args = trainer_args(parsed({"training": {"model": "dropout"}}))
    assert args[:2] == [flags.MODEL, "dropout"]
    assert not {flags.CODE, flags.CODE_MODULE, flags.METRIC} & set(args)
    assert trainer_args(parsed({"training": {"metric": "loss"}}))[:4] == [flags.MODEL, "cnn", flags.METRIC, "loss"]


# ---- decide: the code's ConfigMap -------------------------------------------------------------

CODE_RUN = parsed(FILE_RUN)
CREATED = {"conditions": [{"type": "Created", "status": "True"}]}
RECORD = {"configMap": "wine-code", "key": "wine.py", "sha256": SHA}


def _reason(action: Any) -> tuple[str, bool, str]:
    assert isinstance(action, Record), action
    return action.state.reason, action.retry, action.state.message


@pytest.mark.parametrize("cm", [configmap({"model.py": SOURCE, "team_secret_plan.py": "x"}), configmap(),
                                configmap(binary={"x.py": "!!"}), None])
def test_a_missing_configmap_or_key_is_waited_for_naming_nothing_it_holds(cm: dict[str, Any] | None) -> None:
    """Named: the ConfigMap, the key, and how to make them; nothing else. A run may name any ConfigMap of its
    namespace, its author perhaps one who may not read it (review R13): the message is the same whether the ConfigMap
    is missing or lacks the key, and lists none of its keys."""
    reason, retry, message = _reason(decide(CODE_RUN, {}, Observed(None, config_map=cm)))
    assert (reason, retry) == ("CodeNotFound", True)
    assert message == ("waiting for ConfigMap wine-code (spec.training.code.configMap) in namespace ml with the key "
                       "wine.py (spec.training.code.key): not found, or it has no key wine.py; create it (`dtr submit "
                       "FILE.py` does), or fix the run; checked again with backoff")  # fmt: skip
    assert not {"model.py", "team_secret_plan.py", "x.py", "no keys"} & set(message.replace(",", " ").split())


def test_once_the_configmap_is_there_the_children_are_created_with_the_codes_digest() -> None:
    assert decide(CODE_RUN, {}, Observed(None, config_map=configmap({"wine.py": SOURCE}))) == Create(True, RECORD)
    encoded = base64.b64encode(SOURCE.encode()).decode()
    assert decide(CODE_RUN, {}, Observed(None, config_map=configmap(binary={"wine.py": encoded}))) == Create(
        True, RECORD)  # fmt: skip


def test_a_run_without_a_configmap_to_read_decides_as_before() -> None:
    assert decide(parsed(MODULE_RUN), {}, Observed(None)) == Create(pvc=True)
    assert decide(parsed(MODULE_RUN), {"code": RECORD}, Observed(None)) == Create(pvc=True)


def test_a_tfjob_made_after_status_code_was_recorded_carries_that_digest() -> None:
    """The ConfigMap is not read again once status.code says it: a TFJob made then (a status that says the code
    but not that the TFJob was created) is made with the recorded digest, never with none."""
    assert decide(CODE_RUN, {"code": RECORD}, Observed(None, config_map=UNREAD)) == Create(True, RECORD)
    for other in ({**RECORD, "key": "other.py"}, {**RECORD, "configMap": "other"}, {**RECORD, "sha256": None}, "x"):
        assert decide(CODE_RUN, {"code": other}, Observed(None, config_map=UNREAD)) == Create(pvc=True)


def test_our_tfjob_is_mirrored_with_the_code_when_the_status_lacked_it() -> None:
    tfjob = {"metadata": {"name": "mnist-cnn", "ownerReferences": [{"uid": "u-1", "controller": True}]}}
    assert decide(CODE_RUN, CREATED, Observed(tfjob, config_map=configmap({"wine.py": SOURCE}))) == Sync(tfjob, RECORD)
    assert decide(CODE_RUN, CREATED, Observed(tfjob)) == Sync(tfjob)


def test_the_digest_a_tfjob_pins_is_the_one_recorded_whatever_the_configmap_holds_now() -> None:
    """The status write after the create was lost, and the ConfigMap replaced since: status.code says what the
    workers check (and so what can run), not what the ConfigMap holds now."""
    _, tfjob = children(CODE_RUN, SHA)
    replaced = configmap({"wine.py": "print('other code')\n"})
    assert decide(CODE_RUN, CREATED, Observed(tfjob, config_map=replaced)) == Sync(tfjob, RECORD)
    assert decide(CODE_RUN, CREATED, Observed(tfjob, config_map=None)) == Sync(tfjob, RECORD)


def test_code_sent_with_a_run_is_refused_when_the_operator_disallows_it() -> None:
    refusal = cfg.Settings(user_code="disallowed").code_refusal("wine-code")
    assert refusal is not None and "--user-code=disallowed" in refusal and "DTR_USER_CODE" in refusal
    reason, retry, message = _reason(decide(CODE_RUN, {}, Observed(None, config_map=None), code_refusal=refusal))
    assert (reason, retry, message) == ("UserCodeNotAllowed", False, refusal)
    assert cfg.Settings(user_code="disallowed").code_refusal(None) is None  # a module: --allowed-images' call
    assert cfg.Settings().code_refusal("wine-code") is None


def test_the_user_code_setting_from_flag_and_env() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    cfg.add_arguments(parser)
    assert cfg.from_env({}).user_code == "allowed"
    assert cfg.from_env({"DTR_USER_CODE": "disallowed"}).user_code == "disallowed"
    with pytest.raises(cfg.SettingsError, match="DTR_USER_CODE: must be allowed or disallowed"):
        cfg.from_env({"DTR_USER_CODE": "off"})
    args = parser.parse_args(["--user-code", "disallowed"])
    assert cfg.from_args(args, {}).user_code == "disallowed"
    assert cfg.from_args(parser.parse_args([]), {"DTR_USER_CODE": "disallowed"}).user_code == "disallowed"
    with pytest.raises(SystemExit):
        parser.parse_args(["--user-code", "maybe"])


# ---- the shell: status.code recorded, the ConfigMap read only when it matters -------------------


def _api(config_map: dict[str, Any] | None) -> FakeKube:
    """The run, and its ConfigMap (or none yet)."""
    kube = FakeKube()
    kube.put(make_run(FILE_RUN, uid="u-1", generation=1, resourceVersion="1"))
    if config_map is not None:
        kube.put(config_map, "ConfigMap")
    return kube


def _run(kube: FakeKube) -> dict[str, Any]:
    """The run as the operator reads it for an attempt."""
    body = kube.stored("DistTrainingRun", "mnist-cnn")
    assert body is not None
    return body


def _reads(kube: FakeKube) -> list[str]:
    return [args["name"] for args in kube.succeeded("get_configmap")]


def test_the_operator_waits_for_the_configmap_then_records_its_digest_with_the_created_tfjob() -> None:
    kube = _api(None)
    rec, _ = reconciler(kube, code_refusal=lambda _cm: None)
    assert rec.reconcile_run(_run(kube)) == 5.0 and kube.stored("TFJob", "mnist-cnn") is None
    assert status_writes(kube)[-1]["reason"] == "CodeNotFound"
    kube.put(configmap({"wine.py": SOURCE}), "ConfigMap")
    assert rec.reconcile_run(_run(kube), retry=1) is None and kube.stored("TFJob", "mnist-cnn") is not None
    assert status_writes(kube)[-1]["code"] == RECORD and status_writes(kube)[-1]["reason"] == "TFJobSubmitted"
    reads = len(_reads(kube))
    assert reads == 2
    created = [{"type": "Created", "status": "True", "lastTransitionTime": "t"}]
    kube.put({**_run(kube), "status": {"phase": "Pending", "code": RECORD, "conditions": created}})
    rec.reconcile_run(_run(kube))
    assert len(_reads(kube)) == reads, "status.code recorded: the ConfigMap is not read again"


def _args(tfjob: dict[str, Any] | None) -> list[str]:
    assert tfjob is not None
    return tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]


def test_the_tfjob_is_created_with_the_digest_the_status_records() -> None:
    kube = _api(configmap({"wine.py": SOURCE}))
    rec, _ = reconciler(kube)
    assert rec.reconcile_run(_run(kube)) is None
    args = _args(kube.stored("TFJob", "mnist-cnn"))
    assert args[args.index(flags.CODE_SHA256) + 1] == SHA == status_writes(kube)[-1]["code"]["sha256"]


def test_a_lost_status_write_is_caught_up_with_the_tfjobs_digest_not_a_replaced_configmaps() -> None:
    kube = _api(configmap({"wine.py": SOURCE}))
    rec, _ = reconciler(kube)
    down = [True]
    kube.fail("patch_run_status", ApiError(503, "ServiceUnavailable", "etcd is down"), None, lambda _: down[0])
    rec.reconcile_run(_run(kube))
    assert kube.stored("TFJob", "mnist-cnn") is not None and "code" not in (_run(kube).get("status") or {})
    down[0] = False
    kube.put(configmap({"wine.py": "import os; os.system('evil')\n"}), "ConfigMap")  # deleted and created again
    assert rec.reconcile_run(_run(kube)) is None
    assert status_writes(kube)[-1]["code"] == RECORD
    assert _args(kube.stored("TFJob", "mnist-cnn"))[3] == SHA


def test_a_refused_run_never_reads_its_configmap() -> None:
    kube = _api(configmap({"wine.py": SOURCE}))
    rec, _ = reconciler(kube, code_refusal=lambda _cm: "turned off")
    assert rec.reconcile_run(_run(kube)) is None
    assert _reads(kube) == [] and kube.stored("TFJob", "mnist-cnn") is None
    assert status_writes(kube)[-1]["reason"] == "UserCodeNotAllowed"


# ---- the status from the chief's summary and from a failure in the user's code ----------------

RUN = parsed({"workers": 2})


def _pod(index: int, exit_code: int | None, message: str | None = None, last_exit: int | None = None,
         last_message: str | None = None) -> dict[str, Any]:  # fmt: skip
    cs: dict[str, Any] = {"name": "tensorflow", "state": {}, "lastState": {}}
    if exit_code is not None:
        cs["state"] = {"terminated": {"exitCode": exit_code, "message": message}}
    if last_exit is not None:
        cs["lastState"] = {"terminated": {"exitCode": last_exit, "message": last_message}}
    labels = {"training.kubeflow.org/job-name": "mnist-cnn", "training.kubeflow.org/replica-type": "worker",
              "training.kubeflow.org/replica-index": str(index)}  # fmt: skip
    return {"metadata": {"name": f"mnist-cnn-worker-{index}", "labels": labels, "ownerReferences": controlled_by()},
            "status": {"containerStatuses": [cs]}}  # fmt: skip


def _tfjob(condition: str, **conds: Any) -> dict[str, Any]:
    cond = {"type": condition, "status": "True", "reason": f"TFJob{condition}", "message": conds.get("message", "")}
    return {"metadata": {"name": "mnist-cnn", "uid": TFJOB_UID}, "status": {"conditions": [cond]}}


REGRESSION = {"loss": 0.31, "epochs": 4, "examplesPerSecond": 812.5, "modelPath": "/mnt/dtr/models/mnist-cnn/1",
              "modelVersion": 1, "metric": "mae", "metrics": {"loss": 0.31, "mae": 0.4172, "mse": 0.31}}  # fmt: skip


def test_a_regression_models_metrics_and_headline_reach_the_status() -> None:
    status = tfjob_status(RUN, _tfjob("Succeeded"), [_pod(0, 0, json.dumps(REGRESSION)), _pod(1, 0)], {}, "t")
    assert (status["phase"], status["reason"]) == ("Succeeded", "TrainingSucceeded")
    assert status["metrics"] == {"loss": 0.31, "mae": 0.4172, "mse": 0.31, "epochs": 4, "examplesPerSecond": 812.5}
    assert "accuracy" not in status["metrics"], "no accuracy: the ACCURACY column stays empty"
    assert status["headline"] == "mae=0.4172"
    assert status["message"] == "mae 0.4172, model exported to /mnt/dtr/models/mnist-cnn/1"


def test_a_classifier_without_a_named_metric_headlines_accuracy_as_before() -> None:
    first_format = {"loss": 0.07, "accuracy": 0.98, "epochs": 3, "examplesPerSecond": 5400,
                    "modelPath": "/mnt/dtr/models/mnist-cnn/1", "modelVersion": 1}  # fmt: skip
    status = tfjob_status(RUN, _tfjob("Succeeded"), [_pod(0, 0, json.dumps(first_format))], {}, "t")
    assert status["headline"] == "accuracy=0.9800" and status["metrics"]["accuracy"] == 0.98
    assert status["message"].startswith("accuracy 0.9800, ")


USER_LINE = "wine.py:12 in load_data: ValueError: could not convert string to float: 'alcohol'"


def test_a_failure_in_the_users_code_is_its_own_reason_with_the_one_line() -> None:
    message = f"dtr_trainer[worker-0]: error: {USER_LINE}\n"
    pods = [_pod(0, 143, "", last_exit=exits.USER_CODE, last_message=message),
            _pod(1, exits.PEER_LOST, "lost a peer")]  # fmt: skip
    job = _tfjob("Failed", message="TFJob ml/mnist-cnn has failed because it has reached the specified backoff limit")
    status = tfjob_status(RUN, job, pods, {}, "t")
    assert (status["phase"], status["reason"]) == ("Failed", "UserCodeError")
    assert status["message"] == f"{USER_LINE} (worker mnist-cnn-worker-0, exit code {exits.USER_CODE})"


CHANGED_LINE = (f"wine.py: the code changed: its sha256 is {'ab' * 32}, not {SHA} as recorded ({flags.CODE_SHA256}, "
                "the run's status.code); none of it ran. Its ConfigMap was replaced after the run started: create a "
                "new run to train it")  # fmt: skip


def test_code_that_is_not_the_recorded_code_is_its_own_reason_with_both_digests() -> None:
    pods = [_pod(0, exits.CODE_CHANGED, f"dtr_trainer[worker-0]: error: {CHANGED_LINE}\n"),
            _pod(1, 143, "", last_exit=exits.USER_CODE, last_message="dtr_trainer[worker-1]: error: old.py:1: x")]
    job = _tfjob("Failed", message="TFJob ml/mnist-cnn has failed because 1 Worker replica(s) failed.")
    status = tfjob_status(RUN, job, pods, {}, "t")
    assert (status["phase"], status["reason"]) == ("Failed", "CodeChanged")
    assert status["message"] == f"{CHANGED_LINE} (worker mnist-cnn-worker-0, exit code {exits.CODE_CHANGED})"
    assert len(status["message"]) <= 400, "both digests and the worker fit a status message whole"
    assert restart_cannot_help(exits.CODE_CHANGED) and not exits.is_retryable(exits.CODE_CHANGED)


def test_another_failure_keeps_the_tfjobs_reason() -> None:
    job = _tfjob("Failed", message="TFJob ml/mnist-cnn has failed because 1 Worker replica(s) failed.")
    status = tfjob_status(RUN, job, [_pod(0, 4, "bad data")], {}, "t")
    assert status["reason"] == "TFJobFailed" and "exited with code 4: bad data" in status["message"]


def test_status_code_is_the_files_sha256_as_sha256sum_prints_it() -> None:
    assert code_status("c", "k.py", SOURCE.encode()) == {"configMap": "c", "key": "k.py", "sha256": SHA}
    assert configmap_content(configmap({"k.py": "é"}), "k.py") == "é".encode()
    assert configmap_content(configmap(binary={"k.py": "not base64!"}), "k.py") is None
    assert configmap_content(None, "k.py") is None
