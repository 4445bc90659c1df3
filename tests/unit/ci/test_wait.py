"""support/wait.py's one polling loop: quick at first, then once a second, unless the caller names an interval."""

import pytest

from support import wait


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A clock that moves only when the loop sleeps; the sleeps it was asked for."""
    now, sleeps = [0.0], []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(wait.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(wait.time, "sleep", sleep)
    return sleeps


def test_a_long_wait_polls_quickly_for_its_first_seconds_then_once_a_second(clock: list[float]) -> None:
    assert not wait.poll(lambda: None, timeout=20)
    quick = [s for s in clock if s == wait.QUICK]
    assert len(quick) == wait.PATIENT / wait.QUICK and clock[len(quick) :] == [wait.SLOW] * (len(clock) - len(quick))
    assert len(clock) < 20 / wait.QUICK / 2


def test_an_interval_of_the_callers_holds_for_the_whole_wait(clock: list[float]) -> None:
    assert not wait.poll(lambda: None, timeout=10, interval=0.5)
    assert set(clock) == {0.5}


def test_what_the_probe_returns_ends_the_wait(clock: list[float]) -> None:
    seen = iter([None, None, "there"])
    assert wait.wait_for(lambda: next(seen), "it") == "there" and clock == [wait.QUICK, wait.QUICK]
