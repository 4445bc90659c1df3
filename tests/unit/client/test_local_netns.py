"""`dtr run`'s workers on loopback only (local/netns.py, the review's L9): a port bound on every interface, as
TensorFlow's gRPC server binds it, is reachable on loopback inside the namespace and not on the machine's own
non-loopback address; without the namespace it is (so the test can tell)."""

from __future__ import annotations

import io
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dtr_cli.command import run_command
from dtr_client.local import runner

from support.runs import digits_run

# A child that (maybe) isolates itself, binds 0.0.0.0 as TF does, proves loopback works, then waits.
CHILD = """
import socket, sys
from dtr_client.local import netns
why = netns.isolate() if sys.argv[1] == "isolate" else "not asked"
server = socket.socket()
server.bind(("0.0.0.0", 0))
server.listen()
port = server.getsockname()[1]
socket.create_connection(("127.0.0.1", port), timeout=5).close()
print(port, why, flush=True)
sys.stdin.read()
"""


def _own_address() -> str:
    """The address this machine reaches others from (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.123", 9))
        except OSError:
            return ""
        return s.getsockname()[0]


def _reachable(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=3).close()
    except OSError:
        return False
    return True


def _serve(mode: str) -> tuple[subprocess.Popen[str], int, str]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)  # fmt: skip
    assert child.stdout is not None
    port, why = child.stdout.readline().split(" ", 1)
    return child, int(port), why.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="network namespaces are Linux's")
@pytest.mark.parametrize("mode", ["isolate", "host"])
def test_a_port_on_every_interface_is_reachable_from_the_network_only_without_the_namespace(mode: str) -> None:
    address = _own_address()
    if not address or address.startswith("127."):
        pytest.skip("this machine has no non-loopback IPv4 address to try")
    child, port, why = _serve(mode)
    try:
        if mode == "isolate" and why != "None":
            pytest.skip(f"this system refuses a private network namespace: {why} (dtr run warns)")
        assert _reachable(address, port) is (mode == "host")
    finally:
        child.communicate("")


def _secret_env(build_tfjob):
    """builders.build_tfjob with an env var from a Secret: a pod `dtr run` refuses when it starts the workers."""

    def build(run, code_sha256=None, tracking_uri=""):
        tfjob = build_tfjob(run, code_sha256, tracking_uri)
        for container in tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]:
            container["env"].append({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
        return tfjob

    return build


def test_dtr_run_readies_the_network_once_after_the_input_is_good_and_prints_its_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def network() -> str:
        calls.append("network")
        return "[dtr] warning: W"

    def run(path: Path) -> int:
        return run_command("run", lambda _: runner.run_file(str(path), base_dir=tmp_path / "state",
                                                            python=sys.executable, out=io.StringIO(),
                                                            on_signal=lambda _s, _h: signal.SIG_DFL,
                                                            network=network), None)  # fmt: skip

    assert run(tmp_path / "missing.yaml") == 2 and calls == [], "bad input: the network is left alone"
    monkeypatch.setattr(runner.builders, "build_tfjob", _secret_env(runner.builders.build_tfjob))
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(digits_run("net")))
    assert run(tmp_path / "run.yaml") == 2 and calls == ["network"]
    assert capsys.readouterr().err.count("[dtr] warning: W\n") == 1
