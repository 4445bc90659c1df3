"""Loopback ports for TF_CONFIG addresses (the one piece of I/O the translation needs).

Ports come from below the kernel's ephemeral range: a port picked there cannot be taken in the
meantime by the source port of some outgoing connection (TF's own gRPC clients, the API client)
between the moment it is allocated and the moment the worker binds it.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterable, MutableMapping

LOW, HIGH = 20000, 32000  # Linux's default ephemeral range starts at 32768


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def allocate(addresses: Iterable[str], ports: MutableMapping[str, int], rng: random.Random | None = None) -> None:
    """Give each address without a port a free one (in place), distinct from every port handed out."""
    rng = rng or random.Random()
    taken = set(ports.values())
    for addr in addresses:
        if addr in ports:
            continue
        for _ in range(1000):
            port = rng.randrange(LOW, HIGH)
            if port not in taken and port_is_free(port):
                ports[addr] = port
                taken.add(port)
                break
        else:
            raise RuntimeError(f"no free loopback port in {LOW}..{HIGH} for {addr}")
