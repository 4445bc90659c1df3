"""A worker that is not the chief waits for the chief's port to answer before it creates the strategy.

MultiWorkerMirroredStrategy connects every worker to the coordination service, which the chief starts inside its
own strategy creation. A connection attempt that finds nothing listening there is retried by gRPC after its
backoff: 1 s, then 1.6 times longer each time (up to 2 minutes). A worker that started 0.4 s before the chief met
it after 1.05 s, and the chief waited for it in turn; after polling the port every 50 ms the same meeting took
0.1 s from the chief's arrival (docs/performance.md#the-trainers-time-outside-its-epochs). The polls grow from
50 ms to at most a second apart (a pod's name that is not in DNS yet costs a lookup per poll). Bounded: after
WAIT_SECONDS the strategy is created anyway, and TensorFlow's own retries and timeouts apply as before.
"""

from __future__ import annotations

import socket
import time
from typing import Callable

WAIT_SECONDS = 300.0
POLL_SECONDS = 0.05  # the first pause; each next one 1.5 times longer, up to MAX_POLL_SECONDS
MAX_POLL_SECONDS = 1.0


def answers(address: str, timeout: float = 1.0) -> bool:
    """Does something accept a TCP connection at "host:port"? (An unresolved name, as a pod's not yet in DNS: no.)"""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except (OSError, ValueError):
        return False
    return True


def wait_for(address: str, seconds: float = WAIT_SECONDS, probe: Callable[[str], bool] = answers,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> bool:
    """Poll `address` until it answers (True) or `seconds` have passed (False)."""
    deadline, pause = clock() + seconds, POLL_SECONDS
    while not probe(address):
        if clock() >= deadline:
            return False
        sleep(pause)
        pause = min(pause * 1.5, MAX_POLL_SECONDS)
    return True
