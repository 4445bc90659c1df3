"""dtr logs: which worker pods, several workers' logs merged in time order, and the shell against the fake API
(support.fake_kube)."""

from __future__ import annotations

import io

import pytest
from dtr_cli.cli import main
from dtr_client import logs
from dtr_operator.api import JOB_NAME_LABEL

from support.fake_kube import FakeKube


def pod(name, index):
    labels = {JOB_NAME_LABEL: "r", "training.kubeflow.org/replica-index": str(index)}
    return {"metadata": {"name": name, "labels": labels}}


PODS = [pod("r-worker-1", 1), pod("r-worker-0", 0), {"metadata": {"name": "stray", "labels": {JOB_NAME_LABEL: "r"}}}]


def test_workers_by_index_and_one_worker():
    assert logs.select_workers(PODS, None) == [(0, "r-worker-0"), (1, "r-worker-1")]
    assert logs.select_workers(PODS, 1) == [(1, "r-worker-1")]
    assert logs.select_workers(PODS, 5) == []


def test_merged_in_time_order_with_prefixes():
    w0 = "2026-11-30T18:00:01.5Z epoch 1/2 begin\n2026-11-30T18:00:03.25Z epoch 1/2 end\n"
    w1 = "2026-11-30T18:00:01.123456789Z epoch 1/2 begin\n2026-11-30T18:00:02Z traced\n"
    assert logs.merged([(0, w0), (1, w1)]) == [
        "[worker-1] epoch 1/2 begin",
        "[worker-0] epoch 1/2 begin",
        "[worker-1] traced",
        "[worker-0] epoch 1/2 end",
    ]


def test_a_line_without_a_time_stays_after_the_line_before_it():
    w0 = "2026-11-30T18:00:05Z first\ncontinued without a stamp\n"
    w1 = "2026-11-30T18:00:06Z later\n"
    assert logs.merged([(1, w1), (0, w0)]) == ["[worker-0] first", "[worker-0] continued without a stamp",
                                               "[worker-1] later"]  # fmt: skip


def api(run, pods, texts):
    """Namespace ns: the run (if any), its pods, and their logs by (pod, previous)."""
    kube = FakeKube("ns")
    if run is not None:
        kube.put({"metadata": {"name": "r"}, **run}, "DistTrainingRun")
    for p in pods:
        kube.put(p, "Pod")
    for (name, previous), text in texts.items():
        kube.set_log(name, text, previous=previous)
    return kube


def asked_with_times(kube):
    """Every log read asked for the kubelet's timestamps (the merge orders by them)."""
    return all(a["timestamps"] is True for a in kube.succeeded("pod_log"))


def test_show_merges_and_says_which_worker_has_no_previous_container(capsys):
    kube = api({"status": {"tfJob": "r"}}, PODS,
               {("r-worker-1", True): "2026-11-30T18:00:01Z before the kill\n"})  # fmt: skip
    out = io.StringIO()
    logs.show(kube, "ns", "r", None, True, None, out)
    assert out.getvalue() == "[worker-1] before the kill\n"
    assert "worker 0 (r-worker-0): no previous container" in capsys.readouterr().err
    assert asked_with_times(kube) and len(kube.succeeded("pod_log")) == 2


def test_no_run_and_no_pods_are_one_line_each():
    with pytest.raises(logs.LogsError, match="no DistTrainingRun r in namespace ns"):
        logs.show(api(None, [], {}), "ns", "r", None, False, None, io.StringIO())
    with pytest.raises(logs.LogsError, match="/mnt/dtr/logs/"):
        logs.show(api({"status": {"tfJob": "r"}}, [], {}), "ns", "r", None, False, None, io.StringIO())


def test_follow_and_previous_together_are_refused(capsys):
    assert main(["logs", "r", "-f", "--previous"]) == 2
    assert "cannot be followed" in capsys.readouterr().err


def test_a_container_the_kubelet_removed_is_a_note_not_a_log_line(capsys):
    gone = "unable to retrieve container logs for containerd://259e4d2f\n"
    kube = api({"status": {"tfJob": "r"}}, PODS, {("r-worker-1", True): gone})
    out = io.StringIO()
    logs.show(kube, "ns", "r", 1, True, None, out)
    assert out.getvalue() == "" and asked_with_times(kube)
    assert "no longer has this container's log" in capsys.readouterr().err


def test_follow_says_which_worker_cannot_be_followed_and_fails(capsys):
    out = io.StringIO()
    kube = api({"status": {"tfJob": "r"}}, PODS, {("r-worker-0", False): "epoch 1/2 begin\n"})  # worker-1 starts
    assert logs.follow(kube, "ns", "r", None, None, out) is False
    assert out.getvalue() == "[worker-0] epoch 1/2 begin\n"
    err = capsys.readouterr().err
    assert "worker 1 (r-worker-1): cannot follow its log: container" in err and "Traceback" not in err


# ---- hostile runs and log lines (security review L7) ---------------------------------------------


def test_the_pods_are_selected_by_the_runs_name_not_by_its_status():
    run = {"metadata": {"name": "r"}, "status": {"tfJob": "x,app.kubernetes.io/name!=y"}}
    out = io.StringIO()
    kube = api(run, PODS, {("r-worker-0", False): "2026-11-30T18:00:01Z hello\n"})
    logs.show(kube, "ns", "r", 0, False, None, out)
    assert out.getvalue() == "[worker-0] hello\n"
    assert [a["job"] for a in kube.succeeded("list_job_pods")] == ["r"]


@pytest.mark.parametrize("name", ["r,app=x", "r x", "R", "a" * 64, "-r", "r\x1b[2J"])
def test_a_name_that_is_not_a_label_value_selects_nothing(name):
    with pytest.raises(logs.LogsError, match="is not a DNS label"):
        logs.job_name({"metadata": {"name": name}}, "r")
    assert logs.job_name({"metadata": {"name": "mnist-cnn"}}, "ignored") == "mnist-cnn"
    assert logs.job_name({"status": {"tfJob": "x"}}, "asked") == "asked"  # no metadata: the name it was got by


ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b1A\x1b[31mred\x1b[0m\x08over\u202eevil"


def test_terminal_escapes_in_log_lines_are_made_harmless():
    [line] = logs.merged([(0, f"2026-11-30T18:00:01Z {ESCAPES} end")])
    assert not any(c in line for c in "\x1b\x07\x9b\x08\u202e")
    assert line.startswith("[worker-0] ") and "red" in line and line.endswith("evil end")


def test_followed_log_lines_are_made_harmless_too():
    out = io.StringIO()
    kube = api({}, PODS[1:2], {("r-worker-0", False): f"epoch 1/2 {ESCAPES}\n"})
    assert logs.follow(kube, "ns", "r", None, None, out) is True
    assert out.getvalue().startswith("[worker-0] epoch 1/2 ") and "\x1b" not in out.getvalue()
    assert "\x9b" not in out.getvalue() and out.getvalue().count("\n") == 1
