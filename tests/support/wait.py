"""Waiting for a cluster to get somewhere: the one polling loop of every tier.

`poll` returns what it saw (falsy on timeout) for callers that decide themselves what a timeout means;
`wait_for` fails the test naming what it waited for; `wait_status` waits for a run's status to hold
given values, whichever client reads it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


# Without an interval of the caller's: every QUICK seconds for the first PATIENT seconds (what happens at once is
# seen at once), then every second. The tiers' waits poll a run, its pods or its log for minutes, several at once on
# two cores: each read is the API server's CPU too, four a second for most of a run's life until 2026-12-07.
QUICK, PATIENT, SLOW = 0.25, 5.0, 1.0


def poll(probe: Callable[[], T], timeout: float, interval: float | None = None) -> T:
    """probe() until it returns something truthy or `timeout` seconds pass; its last result either way."""
    start = time.monotonic()
    while True:
        got = probe()
        waited = time.monotonic() - start
        if got or waited > timeout:
            return got
        time.sleep(interval if interval is not None else QUICK if waited < PATIENT else SLOW)


def wait_for(probe: Callable[[], T], what: str, timeout: float = 60, interval: float | None = None) -> T:
    """Poll until probe() returns something truthy; fail the test naming `what` otherwise."""
    got = poll(probe, timeout, interval)
    if not got:
        pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}", pytrace=False)
    return got


def wait_status(
    read: Callable[[], Mapping[str, Any]], what: str, timeout: float = 60, **expected: Any
) -> dict[str, Any]:
    """Until the status `read` returns holds every `expected` key at its value; fails with the last one seen."""
    last: dict[str, Any] = {}

    def probe() -> dict[str, Any] | None:
        last.clear()
        last.update(read())
        return dict(last) if all(last.get(k) == v for k, v in expected.items()) else None

    got = poll(probe, timeout)
    if not got:
        pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} {expected} (last: {last})", pytrace=False)
    return got
