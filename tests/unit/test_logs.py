"""dtr logs' pure parts: which worker pods, and several workers' logs merged in time order."""

from __future__ import annotations

import io

import pytest
from dtr_cli.cli import main
from dtr_client import logs


def pod(name, index):
    return {"metadata": {"name": name, "labels": {"training.kubeflow.org/replica-index": str(index)}}}


PODS = [pod("r-worker-1", 1), pod("r-worker-0", 0), {"metadata": {"name": "stray", "labels": {}}}]


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


class FakeKube:
    def __init__(self, run, pods, texts):
        self.run, self.pods, self.texts = run, pods, texts

    def get_run(self, namespace, name):
        return self.run

    def list_job_pods(self, namespace, job):
        assert job == "r"
        return self.pods

    def pod_log(self, namespace, pod, container, **kwargs):
        assert container == "tensorflow" and kwargs["timestamps"] is True
        return self.texts.get((pod, kwargs["previous"]))


def test_show_merges_and_says_which_worker_has_no_previous_container(capsys):
    kube = FakeKube({"status": {"tfJob": "r"}}, PODS,
                    {("r-worker-1", True): "2026-11-30T18:00:01Z before the kill\n"})  # fmt: skip
    out = io.StringIO()
    logs.show(kube, "ns", "r", None, True, None, out)
    assert out.getvalue() == "[worker-1] before the kill\n"
    assert "worker 0 (r-worker-0): no previous container" in capsys.readouterr().err


def test_no_run_and_no_pods_are_one_line_each():
    with pytest.raises(logs.LogsError, match="no DistTrainingRun r in namespace ns"):
        logs.show(FakeKube(None, [], {}), "ns", "r", None, False, None, io.StringIO())
    with pytest.raises(logs.LogsError, match="/mnt/dtr/logs/"):
        logs.show(FakeKube({"status": {"tfJob": "r"}}, [], {}), "ns", "r", None, False, None, io.StringIO())


def test_follow_and_previous_together_are_refused(capsys):
    assert main(["logs", "r", "-f", "--previous"]) == 2
    assert "cannot be followed" in capsys.readouterr().err


def test_a_container_the_kubelet_removed_is_a_note_not_a_log_line(capsys):
    gone = "unable to retrieve container logs for containerd://259e4d2f\n"
    kube = FakeKube({"status": {"tfJob": "r"}}, PODS, {("r-worker-1", True): gone})
    out = io.StringIO()
    logs.show(kube, "ns", "r", 1, True, None, out)
    assert out.getvalue() == ""
    assert "no longer has this container's log" in capsys.readouterr().err


class FollowKube(FakeKube):
    def follow_pod_log(self, namespace, pod, container, tail):
        from dtr_operator.kube import ApiError

        if pod == "r-worker-1":
            raise ApiError(400, "BadRequest", 'container "tensorflow" in pod "r-worker-1" is waiting to start')
        yield "epoch 1/2 begin"


def test_follow_says_which_worker_cannot_be_followed_and_fails(capsys):
    out = io.StringIO()
    assert logs.follow(FollowKube({"status": {"tfJob": "r"}}, PODS, {}), "ns", "r", None, None, out) is False
    assert out.getvalue() == "[worker-0] epoch 1/2 begin\n"
    err = capsys.readouterr().err
    assert "worker 1 (r-worker-1): cannot follow its log: container" in err and "Traceback" not in err


# ---- hostile runs and log lines (security review L7) ---------------------------------------------


def test_the_pods_are_selected_by_the_runs_name_not_by_its_status():
    run = {"metadata": {"name": "r"}, "status": {"tfJob": "x,app.kubernetes.io/name!=y"}}
    out = io.StringIO()
    logs.show(FakeKube(run, PODS, {("r-worker-0", False): "2026-11-30T18:00:01Z hello\n"}), "ns", "r", 0, False,
              None, out)  # fmt: skip
    assert out.getvalue() == "[worker-0] hello\n"  # FakeKube.list_job_pods asserts the job name "r"


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
    class Escaping(FollowKube):
        def follow_pod_log(self, namespace, pod, container, tail):
            yield f"epoch 1/2 {ESCAPES}"

    out = io.StringIO()
    assert logs.follow(Escaping({}, PODS[1:2], {}), "ns", "r", None, None, out) is True
    assert out.getvalue().startswith("[worker-0] epoch 1/2 ") and "\x1b" not in out.getvalue()
    assert "\x9b" not in out.getvalue() and out.getvalue().count("\n") == 1
