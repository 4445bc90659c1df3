"""Pure kubelet decisions for `dtr run` (dtr_client.local.kubelet)."""

import pytest
from dtr_client.local import kubelet as k


@pytest.mark.parametrize(
    ("returncode", "code"), [(0, 0), (1, 1), (138, 138), (-9, 137), (-15, 143)]
)
def test_exit_code_of(returncode, code):
    assert k.exit_code_of(returncode) == code


@pytest.mark.parametrize(
    ("policy", "code", "restart"),
    [
        ("Always", 0, True),
        ("Always", 1, True),
        ("OnFailure", 0, False),
        ("OnFailure", 1, True),
        ("OnFailure", 137, True),
        ("Never", 0, False),
        ("Never", 137, False),
    ],
)
def test_restarts(policy, code, restart):
    assert k.restarts(policy, code) is restart


def test_backoff_doubles_and_is_capped():
    assert [k.backoff_seconds(n) for n in range(6)] == [1, 2, 4, 8, 10, 10]


@pytest.mark.parametrize(
    ("file_text", "code", "policy", "expected"),
    [
        ('{"accuracy": 0.9}', 0, "FallbackToLogsOnError", '{"accuracy": 0.9}'),
        ("", 0, "FallbackToLogsOnError", ""),  # success: no fallback
        ("", 3, "FallbackToLogsOnError", "line2\nbad TF_CONFIG"),
        ("  \n", 3, "FallbackToLogsOnError", "line2\nbad TF_CONFIG"),
        ("", 3, "File", ""),
        ("why", 3, "FallbackToLogsOnError", "why"),  # the file wins when written
    ],
)
def test_termination_message(file_text, code, policy, expected):
    logs = "line1\nline2\nbad TF_CONFIG\n"
    assert (
        k.termination_message(
            file_text, "line2\nbad TF_CONFIG\n" if code else logs, code, policy
        )
        == expected
    )


def test_termination_message_limits():
    assert len(k.termination_message("x" * 10000, "", 0, "File")) == k.MAX_MESSAGE_BYTES
    logs = "\n".join(f"line {i}" for i in range(200))
    tail = k.termination_message("", logs, 1, "FallbackToLogsOnError")
    assert tail.split("\n")[0] == "line 120" and tail.endswith("line 199")
    big = k.log_tail("y" * 5000)
    assert len(big) == k.FALLBACK_BYTES


def test_terminated_state():
    ok = k.terminated(0, "", "t0", "t1", "id")["terminated"]
    assert ok == {
        "exitCode": 0,
        "reason": "Completed",
        "startedAt": "t0",
        "finishedAt": "t1",
        "containerID": "id",
    }
    killed = k.terminated(137, "oops", "t0", "t1", "id")["terminated"]
    assert (killed["reason"], killed["signal"], killed["message"]) == (
        "Error",
        9,
        "oops",
    )


@pytest.mark.parametrize(
    ("state", "phase"),
    [
        (k.waiting("ContainerCreating"), "Pending"),
        (k.running("t"), "Running"),
        (k.waiting("CrashLoopBackOff", "back-off"), "Running"),
        (k.terminated(0, "", "a", "b", "c"), "Succeeded"),
        (k.terminated(2, "", "a", "b", "c"), "Failed"),
    ],
)
def test_phase_of(state, phase):
    assert k.phase_of(state) == phase
    status = k.pod_status(
        [k.container_status("tensorflow", "img", state, 0)], "t0", "t1", "127.0.0.1"
    )
    assert status["phase"] == phase
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == ("True" if "running" in state else "False")


def test_pod_status_after_a_restart_carries_the_last_state_and_count():
    last = k.terminated(138, "peer lost", "a", "b", "id/0")
    cs = k.container_status("tensorflow", "img", k.running("c"), 1, last, "id/1")
    status = k.pod_status([cs], "t0", "t1", "127.0.0.1")
    got = status["containerStatuses"][0]
    assert (
        got["restartCount"] == 1
        and got["lastState"] == last
        and got["containerID"] == "id/1"
    )
    assert got["ready"] is True and status["podIP"] == "127.0.0.1"
