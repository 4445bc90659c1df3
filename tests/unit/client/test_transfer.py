"""dtr data put / dtr model get, the pure part (transfer.py): the pod, the paths on the volume, where the pod
may run, how its start is judged, the versions, the final checks, progress."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time

import pytest
from dtr_client import transfer as tr
from dtr_contract import layout
from dtr_operator.spec import SpecError

from support.runs import make_run

# ---- paths


def test_dest_defaults_to_the_trainers_data_dir():
    assert tr.in_pod(tr.default_dest()) == layout.data_dir()


@pytest.mark.parametrize(("dest", "relative"), [
    ("data", "data"), ("data/sets/", "data/sets"), ("./data//x", "data/x"), ("a/../b", "b"), (".", ""), ("", ""),
    (f"{layout.MOUNT_PATH}/data/x", "data/x"),
])  # fmt: skip
def test_dest_is_a_normal_path_relative_to_the_volume(dest, relative):
    assert tr.volume_path(dest) == relative


@pytest.mark.parametrize(("dest", "why"), [
    ("/etc", "must be a path on the volume relative to its root"), ("..", "leaves the volume"),
    ("data/../../x", "leaves the volume"), (f"{layout.MOUNT_PATH}/../x", "leaves the volume"),
    ("a\0b", "must be a path on the volume"),
])  # fmt: skip
def test_dest_outside_the_volume_is_refused(dest, why):
    with pytest.raises(tr.TransferError, match=why):
        tr.volume_path(dest)


# ---- the pod


def test_the_pod_is_restricted_labelled_and_mounts_the_claim():
    pod = tr.pod_manifest("ml", "dtr-put-c-abc", "c", "img:1", False, "put data/x")
    spec = pod["spec"]
    assert pod["metadata"]["labels"] == tr.LABELS
    assert pod["metadata"]["annotations"] == {tr.CLAIM_ANNOTATION: "c", tr.WHAT_ANNOTATION: "put data/x"}
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                       "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    [container] = spec["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
        "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}  # fmt: skip
    assert container["resources"]["limits"] and container["resources"]["requests"]
    assert container["image"] == "img:1" and container["command"][:2] == ["python", "-c"]
    assert {"name": tr.VOLUME, "mountPath": layout.MOUNT_PATH, "readOnly": False} in container["volumeMounts"]
    assert {"name": tr.VOLUME, "persistentVolumeClaim": {"claimName": "c", "readOnly": False}} in spec["volumes"]
    assert "affinity" not in spec
    compile(container["command"][2], "idle", "exec")


def test_model_get_mounts_read_only_and_can_be_pinned_to_a_node():
    spec = tr.pod_manifest("ml", "p", "c", "img", True, "get", node="node-1")["spec"]
    assert spec["containers"][0]["volumeMounts"][0]["readOnly"] is True
    assert spec["volumes"][0]["persistentVolumeClaim"]["readOnly"] is True
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]


def test_pod_names_are_dtrs_and_fit_a_dns_label():
    assert tr.pod_name("put", "wine-data", "a1b2c3") == "dtr-put-wine-data-a1b2c3"
    long = tr.pod_name("get", "x" * 60 + ".-y", "a1b2c3")
    assert len(long) <= 63 and long.startswith("dtr-get-x") and long.endswith("x-a1b2c3")


def test_the_exec_command_carries_the_programs_size_and_digest():
    argv = tr.command(b"print(1)\n", "receive", "/mnt/dtr/data")
    assert argv[:3] == ["python", "-c", tr.BOOTSTRAP]
    assert argv[3:5] == ["9", hashlib.sha256(b"print(1)\n").hexdigest()]
    assert argv[5:] == ["receive", layout.MOUNT_PATH, "/mnt/dtr/data", tr.HEARTBEAT]


# ---- where the pod runs


def pod(name, claim, node="", phase="Running"):
    return {"metadata": {"name": name}, "spec": {"nodeName": node, "volumes": [
        {"name": "v", "persistentVolumeClaim": {"claimName": claim}}]}, "status": {"phase": phase}}  # fmt: skip


def pvc(modes, name="c"):
    return {"metadata": {"name": name}, "spec": {"accessModes": modes}}


def test_the_claims_users_are_the_unfinished_pods_that_mount_it():
    pods = [pod("w1", "c", "n1"), pod("done", "c", "n2", "Succeeded"), pod("other", "d", "n3"), pod("new", "c")]
    assert tr.claim_users(pods, "c") == [("new", ""), ("w1", "n1")]


def test_a_readwriteonce_claim_in_use_pins_the_pod_to_its_node():
    assert tr.placement(pvc(["ReadWriteOnce"]), [("w0", "n1"), ("w1", "n1")]) == "n1"
    assert tr.placement(pvc(["ReadWriteOnce"]), []) is None
    assert tr.placement(pvc(["ReadWriteOnce"]), [("w0", "")]) is None, "not placed yet: let the scheduler choose"
    assert tr.placement(pvc(["ReadWriteMany"]), [("w0", "n1")]) is None
    with pytest.raises(tr.TransferError, match="claim c is ReadWriteOncePod and pod w0 uses it"):
        tr.placement(pvc(["ReadWriteOncePod"]), [("w0", "n1")])


# ---- the pod starting


def status(phase="Pending", state=None, conditions=()):
    statuses = [{"name": tr.CONTAINER, "state": state}] if state else []
    return {"status": {"phase": phase, "containerStatuses": statuses, "conditions": list(conditions)}}


def test_the_pods_start_as_seen_in_its_status():
    assert tr.pod_start(status("Running", {"running": {}})) == (tr.READY, "running")
    assert tr.pod_start(status()) == (tr.WAITING, "Pending")
    assert tr.pod_start(status(state={"waiting": {"reason": "ContainerCreating"}})) == (tr.WAITING, "ContainerCreating")
    unscheduled = {"type": "PodScheduled", "status": "False", "message": "0/1 nodes are available"}
    assert tr.pod_start(status(conditions=[unscheduled])) == (tr.WAITING, "not scheduled: 0/1 nodes are available")
    pull = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "nope:1"'}}
    assert tr.pod_start(status(state=pull)) == (tr.FAILED, 'ImagePullBackOff: Back-off pulling image "nope:1"')
    assert tr.pod_start(status("Succeeded", {"terminated": {"reason": "Completed"}}))[0] == tr.FAILED


def test_events_in_one_line_latest_last_repeats_once():
    events = [
        {"reason": "Scheduled", "message": "assigned", "lastTimestamp": "2026-01-01T00:00:01Z"},
        {"reason": "FailedMount", "message": "Multi-Attach error\n for volume",
         "lastTimestamp": "2026-01-01T00:00:05Z"},
        {"reason": "Pulled", "message": "present", "lastTimestamp": "2026-01-01T00:00:02Z"},
        {"reason": "Scheduled", "message": "assigned", "lastTimestamp": "2026-01-01T00:00:03Z"},
    ]
    assert tr.events_summary(events) == (
        "Pulled: present; Scheduled: assigned; FailedMount: Multi-Attach error for volume")
    assert tr.events_summary(events, last=1) == "FailedMount: Multi-Attach error for volume"
    assert tr.events_summary(events, besides="not scheduled: assigned") == (
        "Pulled: present; FailedMount: Multi-Attach error for volume"), "not what the caller says already"


def test_a_start_timeout_says_what_the_pod_waits_for_its_events_and_its_node():
    message = tr.start_timeout("dtr-put-c-1", 120.0, "ContainerCreating", "FailedMount: x", "n1")
    assert message == ("the transfer pod dtr-put-c-1 did not start in 120 s (it must run on node n1, where the "
                       "ReadWriteOnce claim is in use): ContainerCreating; events: FailedMount: x")  # fmt: skip
    assert "\n" not in message


# ---- the exec's end


def test_exit_status_from_the_status_channel():
    assert tr.exit_status(b'{"metadata":{},"status":"Success"}') == (0, "")
    failure = {"status": "Failure", "reason": "NonZeroExitCode",
               "message": "command terminated with non-zero exit code",
               "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}  # fmt: skip
    assert tr.exit_status(json.dumps(failure).encode()) == (3, "command terminated with non-zero exit code")
    assert tr.exit_status(b'{"status":"Failure","message":"container not found"}') == (-1, "container not found")
    assert tr.exit_status(b"garbage") == (-1, "garbage")


def test_the_programs_own_error_line_wins():
    assert tr.program_error(3, "x", "warning\nerror: no such file\n") == "no such file"
    assert tr.program_error(1, "x", "Traceback\nKeyError: 'a'\n") == (
        "the copy in the pod failed (exit code 1): KeyError: 'a'")
    assert tr.program_error(-1, "container not found", "") == "cannot run the copy: container not found"


# ---- versions


def test_the_exported_version_from_the_status_or_another_beside_it():
    run = make_run({"storage": {"claimName": "shared"}}, name="r")
    run["status"] = {"model": {"path": layout.version_dir(layout.export_dir("m"), 3), "claim": "shared", "version": 3}}
    base = layout.in_volume(layout.export_dir("m"))
    assert tr.model_source(run, None) == tr.ModelSource("shared", base, 3)
    assert tr.model_source(run, 1) == tr.ModelSource("shared", base, 1)
    assert tr.version_path(tr.ModelSource("shared", base, 1), 1) == layout.in_volume(
        layout.version_dir(layout.export_dir("m"), 1))


def test_a_run_without_an_exported_version_looks_where_the_operator_would_put_it():
    run = make_run({"export": {"modelName": "together"}}, name="r")
    assert tr.model_source(run, None) == tr.ModelSource("r-data", layout.in_volume(layout.export_dir("together")),
                                                        None)  # fmt: skip
    with pytest.raises(SpecError):
        tr.model_source(make_run({"workers": "two"}), None)


def test_the_version_chosen_among_the_numbered_directories():
    assert tr.choose_version(["1", "10", "2", ".dtr-x", "notes"], None, "here") == 10
    assert tr.choose_version(["1", "2"], 1, "here") == 1
    with pytest.raises(tr.TransferError, match=r"no version 5 in here \(there: 1, 2\)"):
        tr.choose_version(["2", "1"], 5, "here")
    with pytest.raises(tr.TransferError, match="no exported version in here yet"):
        tr.choose_version(["x"], None, "here")


# ---- checks and progress


def test_the_pods_account_must_match_what_was_sent():
    sent = {"a": "1" * 64, "b/c": "2" * 64}
    assert tr.account_mismatch(sent, {"files": dict(sent), "bytes": 3}) is None
    assert tr.account_mismatch(sent, {"files": {"a": "1" * 64, "b/c": "3" * 64}}) == (
        f"SHA-256 mismatch for b/c: local {'2' * 64}, in the pod {'3' * 64}")
    assert tr.account_mismatch(sent, {"files": {"a": "1" * 64}}) == f"SHA-256 mismatch for b/c: local {'2' * 64}, " \
                                                                     "in the pod nothing"  # fmt: skip
    assert tr.account_mismatch({}, {"files": {"x": "1"}}) == "the pod wrote x, which was not sent"


def test_bytes_for_people():
    assert [tr.human_bytes(n) for n in (0, 1023, 1024, 5 * 1024**2 + 1, 3 * 1024**4)] == [
        "0 B", "1023 B", "1.0 KiB", "5.0 MiB", "3072.0 GiB"]


def test_progress_is_quiet_at_first_then_throttled():
    p = tr.Progress("put x", total=4 * 1024**2)
    assert p.add(0, 100.0) is None, "the clock starts at the first bytes (not while the pod starts)"
    assert p.add(1024**2, 100.5) is None, "a copy shorter than a second says nothing"
    assert p.add(1024**2, 101.0) == "put x: 2.0 MiB of 4.0 MiB (50%), 2.0 MiB/s"
    assert p.add(1024**2, 101.2) is None, "at most every half second"
    assert p.add(1024**2, 102.0) == "put x: 4.0 MiB of 4.0 MiB (100%), 2.0 MiB/s"
    assert p.showed
    assert tr.Progress("get").line(1.0) == "get: 0 B of 0 B, 0 B/s"


def test_the_pods_idle_process_ends_without_a_copy_and_on_sigterm(tmp_path):
    """Run as it runs in the pod (PID 1 there; here it also sees the host's processes, so SIGTERM waits out
    its grace for them)."""
    heartbeat = tmp_path / "heartbeat"
    script = tr.IDLE.replace(repr(tr.HEARTBEAT), repr(str(heartbeat))).replace(f"> {tr.IDLE_SECONDS}", "> 1")
    assert script.count(repr(str(heartbeat))) == 1 and "> 1:\n" in script
    idle = subprocess.Popen([sys.executable, "-c", script])
    stopped = subprocess.Popen([sys.executable, "-c", tr.IDLE])
    time.sleep(0.5)
    t0 = time.monotonic()
    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait(10) == 0 and time.monotonic() - t0 < tr.GRACE_SECONDS
    assert idle.wait(10) == 0, "no heartbeat for longer than the idle limit"
