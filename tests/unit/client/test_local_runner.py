"""Pure decisions of `dtr run` (dtr_client.local.runner): restarts, outcome, the status it prints."""

import io
import json
import signal
import sys

import pytest
import yaml
from dtr_cli.command import run_command
from dtr_client.local import jobs, kubelet, source
from dtr_client.local import runner as r
from dtr_contract import exits
from dtr_operator import builders, reasons
from dtr_operator.spec import parse_run
from dtr_operator.status.compute import tfjob_status
from dtr_operator.status.pods import own_pods

RUN = """
apiVersion: distml.dev/v1alpha1
kind: DistTrainingRun
metadata: {name: digits}
spec: {workers: 2, training: {dataset: digits, epochs: 1}}
"""


@pytest.mark.parametrize(
    ("policy", "code", "again"),
    [
        ("OnFailure", 0, False), ("OnFailure", 1, True), ("OnFailure", 137, True),
        ("Always", 0, True),
        ("Never", 1, False), ("Never", 137, False),
        ("ExitCode", 0, False), ("ExitCode", 4, False), ("ExitCode", 127, False), ("ExitCode", 138, True),
        ("OnFailure", exits.USER_CODE, False), ("Always", exits.DIVERGED, False), ("OnFailure", exits.DIVERGED, False),
        ("OnFailure", exits.CODE_CHANGED, False), ("ExitCode", exits.CODE_CHANGED, False),
        ("OnFailure", exits.MODEL_NAME_OWNED, False), ("Always", exits.MODEL_NAME_OWNED, False),
    ],
)  # fmt: skip
def test_job_restarts(policy, code, again):
    assert jobs.job_restarts(policy, code) is again


@pytest.mark.parametrize(
    ("policy", "restarts", "limit", "past"),
    [
        ("OnFailure", 0, 3, False), ("OnFailure", 2, 3, False), ("OnFailure", 3, 3, True),
        ("OnFailure", 1, 0, True), ("OnFailure", 0, 0, False),
        ("Never", 9, 3, False), ("ExitCode", 9, 3, False),
    ],
)  # fmt: skip
def test_past_backoff_limit(policy, restarts, limit, past):
    assert jobs.past_backoff_limit(policy, restarts, limit) is past


@pytest.mark.parametrize(
    ("exits", "policy", "outcome"),
    [
        ({"worker-0": None, "worker-1": None}, "AllWorkers", None),
        ({"worker-0": 0, "worker-1": None}, "AllWorkers", None),
        ({"worker-0": 0, "worker-1": 0}, "AllWorkers", reasons.SUCCEEDED),
        ({"worker-0": 0, "worker-1": None}, "", reasons.SUCCEEDED),
        ({"worker-0": None, "worker-1": 0}, "", None),
        ({"worker-0": None, "worker-1": 137}, "AllWorkers", reasons.FAILED),
        ({"worker-0": 0, "worker-1": 3}, "", reasons.FAILED),
    ],
)
def test_job_outcome(exits, policy, outcome):
    assert jobs.job_outcome(exits, policy, "worker-0") == outcome


def test_load_run_errors_are_one_line_naming_the_problem():
    assert source.load_run(RUN, "f.yaml").name == "digits"
    with pytest.raises(source.RunError, match="not valid YAML"):
        source.load_run("a: [", "f.yaml")
    with pytest.raises(source.RunError, match=r"f\.yaml: apiVersion not set"):
        source.load_run("kind: Pod\n", "f.yaml")
    with pytest.raises(source.RunError, match=r"no DistTrainingRun in this file \(found Pod;"):
        source.load_run("apiVersion: v1\nkind: Pod\n", "f.yaml")
    with pytest.raises(source.RunError, match="one DistTrainingRun at a time; this file has 2"):
        source.load_run(RUN + "---" + RUN, "f.yaml")
    with pytest.raises(source.RunError,
                       match=r"f\.yaml: DistTrainingRun digits: spec\.workers: must be between 1 and 64, got 0"):
        source.load_run(RUN.replace("workers: 2", "workers: 0"), "f.yaml")
    with pytest.raises(source.RunError, match=r"f\.yaml: spec\.suspend is true: a suspended run trains nowhere"):
        source.load_run(RUN.replace("workers: 2,", "workers: 2, suspend: true,"), "f.yaml")



@pytest.mark.parametrize(
    ("exits", "policy", "end"),
    [
        ({"worker-0": 0, "worker-1": None}, "", ("Succeeded", "TFJobSucceeded", "TFJob ns/j successfully completed.")),
        ({"worker-0": 0, "worker-1": 3}, "AllWorkers",
         ("Failed", "TFJobFailed", "TFJob ns/j has failed because 1 Worker replica(s) failed.")),
        ({"worker-0": None, "worker-1": 0}, "", None),
    ],
)  # fmt: skip
def test_end_by_exits(exits, policy, end):
    assert jobs.end_by_exits(exits, policy, "Worker", "ns/j") == end


BACKOFF = ("Failed", "BackoffLimitExceeded", "TFJob ns/j has failed because it has reached the specified backoff limit")
DEADLINE = ("Failed", "DeadlineExceeded", "TFJob ns/j has failed because it was active longer than specified deadline")


@pytest.mark.parametrize(
    ("policy", "run_policy", "restarts", "elapsed", "end"),
    [
        ("OnFailure", {}, 5, 0.0, None), ("OnFailure", {}, 6, 0.0, BACKOFF),  # the training-operator's default 6
        ("OnFailure", {"backoffLimit": 2}, 2, 0.0, BACKOFF),
        ("Never", {}, 0, 0.0, None),
        ("Never", {"activeDeadlineSeconds": 60}, 0, 60.0, None),
        ("Never", {"activeDeadlineSeconds": 60}, 0, 60.5, DEADLINE),
    ],
)  # fmt: skip
def test_end_by_limits(policy, run_policy, restarts, elapsed, end):
    assert jobs.end_by_limits(policy, run_policy, restarts, elapsed, "ns/j") == end


def test_a_pod_a_local_process_cannot_play_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """translate.TranslateError (here: an env var from a Secret) from starting a worker: exit 2 and one line (the
    command's one way from an error to an exit code, dtr_cli.command)."""
    build_tfjob = builders.build_tfjob

    def with_a_secret(run, code_sha256=None, tracking_uri=""):
        tfjob = build_tfjob(run, code_sha256, tracking_uri)
        for container in tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]:
            container["env"].append({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
        return tfjob

    monkeypatch.setattr(r.builders, "build_tfjob", with_a_secret)
    (tmp_path / "run.yaml").write_text(RUN)
    code = run_command("run", lambda _: r.run_file(str(tmp_path / "run.yaml"), base_dir=tmp_path / "state",
                                                   python=sys.executable, out=io.StringIO(),
                                                   on_signal=lambda _s, _h: signal.SIG_DFL), None)  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err == "dtr run: env TOKEN: its valueFrom cannot be resolved without a cluster\n"

def _pods(states, tfjob):
    return [
        jobs.pod_view(
            f"digits-worker-{i}", "default", jobs.replica_labels("digits", "Worker", i),
            kubelet.pod_status([kubelet.container_status("tensorflow", "img", s, 0)], "t0", "t1", "127.0.0.1"), tfjob,
        )
        for i, s in enumerate(states)
    ]  # fmt: skip


def test_a_succeeded_local_job_reads_like_the_cluster_status():
    run = parse_run(yaml.safe_load(RUN))
    summary = {"loss": 0.2, "accuracy": 0.93, "epochs": 1, "examplesPerSecond": 100.0,
               "modelPath": "/mnt/dtr/models/digits/1", "modelVersion": 1}  # fmt: skip
    states = [
        kubelet.terminated(0, json.dumps(summary), "a", "b", "c"),
        kubelet.terminated(0, "", "a", "b", "c"),
    ]
    created = jobs.as_created(builders.build_tfjob(run), "local-uid")
    tfjob = jobs.tfjob_view(created, reasons.SUCCEEDED, "TFJobSucceeded", "done",
                            {"active": 0, "succeeded": 2, "failed": 0}, "t0", "t9")  # fmt: skip
    pods = _pods(states, tfjob)
    assert own_pods(run, tfjob, pods) == pods, "the pods dtr run makes are the TFJob's own to the operator's status"
    st = tfjob_status(run, tfjob, pods, {}, "t9")
    assert st["phase"] == "Succeeded" and st["reason"] == reasons.TRAINING_SUCCEEDED
    assert st["metrics"]["accuracy"] == 0.93
    assert st["model"] == {
        "path": "/mnt/dtr/models/digits/1",
        "claim": "digits-data",
        "version": 1,
        "storageUri": "pvc://digits-data/models/digits",
    }
    assert st["workersReady"] == "2/2" and st["completionTime"] == "t9"


def test_a_failed_local_job_names_the_worker():
    run = parse_run(yaml.safe_load(RUN))
    states = [kubelet.running("t"), kubelet.terminated(137, "killed", "a", "b", "c")]
    created = jobs.as_created(builders.build_tfjob(run), "local-uid")
    tfjob = jobs.tfjob_view(created, reasons.FAILED, "TFJobFailed", "1 Worker replica(s) failed.",
                            {"active": 1, "succeeded": 0, "failed": 1}, "t0", "t9")  # fmt: skip
    st = tfjob_status(run, tfjob, _pods(states, tfjob), {}, "t9")
    assert st["phase"] == "Failed"
    assert "digits-worker-1" in st["message"]
