"""`dtr run`'s workers on loopback only (local/netns.py, the review's L9): a port bound on every interface, as
TensorFlow's gRPC server binds it, is reachable on loopback inside the namespace and not on the machine's own
non-loopback address; without the namespace it is (so the test can tell)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

# A child that (maybe) isolates itself, binds 0.0.0.0 as TF does, proves loopback works, then waits.
CHILD = """
import socket, sys
from dtr_operator.local import netns
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
