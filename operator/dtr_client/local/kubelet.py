"""What a kubelet would decide and report for a container played by a local process (pure).

`dtr run` (`runner.py`) keeps the clock and the processes; these functions turn "the process is in
this state" into the restart decision and the pod status a kubelet would write, so the status
`dtr run` prints reads as it would on a real node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# kubelet: terminationMessagePath content up to 4096 bytes; the log fallback is the last 80 lines,
# at most 2048 bytes (pkg/kubelet/kuberuntime/kuberuntime_container.go).
MAX_MESSAGE_BYTES = 4096
FALLBACK_LINES = 80
FALLBACK_BYTES = 2048

# The kubelet's crash-loop back-off starts at 10 s and doubles to 5 min; a local dev node and tests
# want quick restarts, so here it starts at 1 s and doubles to 10 s (documented in docs/local.md).
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 10.0


def exit_code_of(returncode: int) -> int:
    """Popen's -N for "killed by signal N" is 128+N in a container's status, as runtimes report it."""
    return 128 - returncode if returncode < 0 else returncode


def restarts(restart_policy: str, exit_code: int) -> bool:
    """Does the kubelet start the container again? Always: yes; OnFailure: on a non-zero exit; Never: no."""
    if restart_policy == "Always":
        return True
    if restart_policy == "OnFailure":
        return exit_code != 0
    return False


def backoff_seconds(restart_count: int) -> float:
    """Wait before restart number restart_count+1 (crash-loop back-off, shortened)."""
    return min(BACKOFF_BASE_SECONDS * 2 ** max(restart_count, 0), BACKOFF_CAP_SECONDS)


def log_tail(text: str, lines: int = FALLBACK_LINES, max_bytes: int = FALLBACK_BYTES) -> str:
    tail = "\n".join(text.rstrip("\n").split("\n")[-lines:]) if text else ""
    data = tail.encode()
    return data[-max_bytes:].decode(errors="ignore") if len(data) > max_bytes else tail


def termination_message(file_text: str, log_text: str, exit_code: int, policy: str) -> str:
    """The message in state.terminated: the termination-message file, or with FallbackToLogsOnError
    the tail of the log when the file is empty and the container failed."""
    message = file_text.encode()[:MAX_MESSAGE_BYTES].decode(errors="ignore")
    if not message.strip() and exit_code != 0 and policy == "FallbackToLogsOnError":
        return log_tail(log_text)
    return message


def waiting(reason: str, message: str | None = None) -> dict[str, Any]:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def running(started_at: str) -> dict[str, Any]:
    return {"running": {"startedAt": started_at}}


def terminated(exit_code: int, message: str, started_at: str, finished_at: str, container_id: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": started_at,
        "finishedAt": finished_at,
        "containerID": container_id,
    }
    if exit_code > 128:
        body["signal"] = exit_code - 128
    if message:
        body["message"] = message
    return {"terminated": body}


def container_status(
    name: str,
    image: str,
    state: Mapping[str, Any],
    restart_count: int,
    last_state: Mapping[str, Any] | None = None,
    container_id: str | None = None,
) -> dict[str, Any]:
    is_running = "running" in state
    status: dict[str, Any] = {
        "name": name,
        "image": image,
        "imageID": "",
        "state": dict(state),
        "lastState": dict(last_state or {}),
        "ready": is_running,
        "started": is_running,
        "restartCount": restart_count,
    }
    if container_id:
        status["containerID"] = container_id
    return status


def phase_of(state: Mapping[str, Any]) -> str:
    """Pod phase for a one-container pod in this state. A container waiting in crash-loop back-off
    keeps the pod Running (it ran and will run again); terminated is passed only when final."""
    if "running" in state:
        return "Running"
    if "terminated" in state:
        return "Succeeded" if state["terminated"]["exitCode"] == 0 else "Failed"
    if state.get("waiting", {}).get("reason") == "CrashLoopBackOff":
        return "Running"
    return "Pending"


def pod_status(
    statuses: Sequence[Mapping[str, Any]], start_time: str, now: str, host_ip: str, message: str | None = None
) -> dict[str, Any]:
    """The pod's status as a kubelet writes it: phase, conditions, IPs and the container statuses."""
    phase = _pod_phase([s["state"] for s in statuses])
    ready = phase == "Running" and all(s["ready"] for s in statuses)
    sandbox = phase != "Pending"

    def cond(kind: str, ok: bool) -> dict[str, Any]:
        return {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": now}

    status: dict[str, Any] = {
        "phase": phase,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": host_ip,
        "podIPs": [{"ip": host_ip}],
        "startTime": start_time,
        "conditions": [
            cond("PodReadyToStartContainers", sandbox),
            cond("Initialized", True),
            cond("Ready", ready),
            cond("ContainersReady", ready),
            cond("PodScheduled", True),
        ],
        "containerStatuses": [dict(s) for s in statuses],
    }
    if message:
        status["message"] = message
    return status


def _pod_phase(states: Sequence[Mapping[str, Any]]) -> str:
    phases = [phase_of(s) for s in states]
    if any(p == "Pending" for p in phases):
        return "Pending"
    if any(p == "Running" for p in phases):
        return "Running"
    return "Failed" if any(p == "Failed" for p in phases) else "Succeeded"
