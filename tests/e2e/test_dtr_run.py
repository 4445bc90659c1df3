"""`dtr run examples/digits.yaml` end to end: the README's "run the main job", no cluster, offline."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.runs import digits_run, saved_models
from support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]


def test_dtr_run_digits_example_trains_exports_and_prints_the_final_status(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "DTR_RUN_DIR": str(tmp_path / ".dtr")}
    env.pop("KUBECONFIG", None)  # no cluster involved
    proc = subprocess.run(
        [sys.executable, "-m", "dtr_cli", "run", "examples/digits.yaml"],
        check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n{out[-3000:]}\n{proc.stderr[-2000:]}"
    )

    # logs streamed per replica, with epoch progress
    assert "[worker-0] " in out and "[worker-1] " in out
    assert "[dtr] epoch 8/8 done" in out

    # the final status, as the cluster would report it, printed as YAML
    block = out[out.index("\nstatus:\n") + 1 :].split("\n[dtr] ")[0]
    status = yaml.safe_load(block)["status"]
    assert status["phase"] == "Succeeded"
    assert status["workers"] == {"active": 0, "succeeded": 2, "failed": 0}
    assert status["model"] == {
        "path": "/mnt/dtr/models/digits-cnn/1",
        "claim": "digits-cnn-data",
        "version": 1,
        "storageUri": "pvc://digits-cnn-data/models/digits-cnn",
    }

    summary = json.loads(
        next(
            ln.split("] ", 1)[1]
            for ln in out.splitlines()
            if ln.startswith("[worker-0] {")
        )
    )
    assert status["metrics"]["accuracy"] == summary["accuracy"]
    assert status["metrics"]["accuracy"] >= 0.9  # real data, real training

    volume = tmp_path / ".dtr" / "volumes" / "digits-cnn-data"
    assert saved_models(volume) == [volume / "models" / "digits-cnn" / "1"], (
        "exactly one model on the volume"
    )
    assert f"[dtr] model on disk: {volume}/models/digits-cnn/1" in out


def test_dtr_run_restarts_a_killed_worker_which_resumes_from_its_backup_and_no_worker_is_reachable_from_the_network(
    tmp_path: Path,
) -> None:
    """A worker SIGKILLed after epoch 2: dtr run restarts it (OnFailure) and it resumes from the backup. While the
    run trains, TF's gRPC server, which binds every interface whatever TF_CONFIG says, answers on no address of
    this machine: dtr run puts the workers on a loopback of their own (docs/local.md#network). Two runs of their
    own until 2026-12-07 (39.9 and 17.8 CPU s in CI's warm run of ef45771)."""
    run = digits_run("heal-local", epochs=5, steps=30, restart="OnFailure", backoff=8)
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump(run))
    out_file = tmp_path / "out.log"
    env = {**os.environ, "DTR_RUN_DIR": str(tmp_path / ".dtr")}
    with open(out_file, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dtr_cli", "run", str(run_file)],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: "[dtr] epoch 1/5 done" in out_file.read_text(), "the first epoch", timeout=600,
                 interval=0.2)  # fmt: skip
        open_network = "[dtr] warning: the workers' TensorFlow port is open" in out_file.read_text()
        if not open_network:
            assert_unreachable_from_the_network(trainer_pids(str(tmp_path), "heal-local-worker-0"))
        wait_for(lambda: "[worker-1] dtr_trainer[worker-1]: epoch 2/5 end" in out_file.read_text(),
                 "worker-1 to finish epoch 2", timeout=600, interval=0.2)  # fmt: skip
        pids = trainer_pids(str(tmp_path), "heal-local-worker-1")
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)
        code = proc.wait(600)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = out_file.read_text()
    assert code == 0, out[-3000:]
    assert "[dtr] worker-1 exited with code 137; restarting" in out
    assert "[worker-1] dtr_trainer[worker-1]: resumed from backup at epoch 3/5" in out
    assert "\n  phase: Succeeded\n" in out
    volume = tmp_path / ".dtr" / "volumes" / "heal-local-data"
    assert saved_models(volume) == [volume / "models" / "heal-local" / "1"]
    if open_network:  # the restart is proved; the network part cannot be here
        pytest.skip("this system refuses a private network namespace (dtr run warned): the port was open")


def trainer_pids(marker: str, hostname: str) -> list[int]:
    """Live trainer processes with marker in their command line and HOSTNAME=hostname."""
    out = []
    entry = f"HOSTNAME={hostname}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            found = marker.encode() in (d / "cmdline").read_bytes() and entry in (
                d / "environ"
            ).read_bytes().split(b"\0")
        except OSError:
            continue
        if found:
            out.append(int(d.name))
    return out


def test_dtr_run_of_data_that_cannot_load_ends_with_the_cause_and_the_worker(tmp_path: Path) -> None:
    # examples/mnist.yaml offline: each worker exits 5 ("cannot download mnist"), OnFailure restarts it,
    # and the kill at the backoff limit (143) must not replace that cause in the final status.
    env = {**os.environ, "DTR_RUN_DIR": str(tmp_path / ".dtr"),
           # offline, even on a machine that is not
           "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    env.pop("KUBECONFIG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "dtr_cli", "run", "examples/mnist.yaml"],
        check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 1, f"exit {proc.returncode}\n{out[-3000:]}\n{proc.stderr[-2000:]}"
    status = yaml.safe_load(out[out.index("\nstatus:\n") + 1 :].split("\n[dtr] ")[0])["status"]
    assert status["phase"] == "Failed" and status["reason"] == "BackoffLimitExceeded", status
    assert "worker mnist-cnn-worker-0 exited with code 5: " in status["message"], status["message"]
    assert "cannot download mnist: use --dataset digits or synthetic" in status["message"], status["message"]
    assert "code 143" not in status["message"], status["message"]


def _listening_ports(pid: int) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets listening in the process's network namespace, IPv4 and IPv6 (an
    address as /proc/<pid>/net/tcp* writes it: all zeros for every interface)."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in (Path(f"/proc/{pid}/net/{table}").read_text().splitlines())[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":  # LISTEN
                address, port = local.rsplit(":", 1)
                found.add((address, int(port, 16)))
    return found


def _own_address() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.123", 9))  # sends nothing: picks the address this machine reaches others from
        return s.getsockname()[0]


def assert_unreachable_from_the_network(chief_pids: list[int]) -> None:
    """The chief's TensorFlow port, listening on every interface, answers on loopback only: not on the address this
    machine reaches others from (a network namespace of its own, not the machine's)."""
    [chief] = chief_pids
    ports = {port for host, port in _listening_ports(chief) if not host.strip("0")}  # 0.0.0.0 or [::]
    assert ports, "TF's server listens on every interface"
    assert os.readlink(f"/proc/{chief}/ns/net") != os.readlink("/proc/self/ns/net")
    address = _own_address()
    for port in ports:
        with pytest.raises(OSError):
            socket.create_connection((address, port), timeout=3).close()
