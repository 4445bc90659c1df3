"""progress_schedule.py: when the operator next reads a Running run's chief log (pure; milliseconds). The runs
simulated here are bench/progress/schedule.py's, which computes the requests per run per minute from the same code."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dtr_operator import progress_schedule as ps
from dtr_operator import watchdog
from dtr_operator.spec import WatchdogSpec

from bench.progress import schedule as sim

T0 = sim.T0
INTERVAL = 5.0
WATCH = WatchdogSpec()  # the defaults: 5 x the mean, at least 600 s


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def secs(when: datetime) -> float:
    return (when - T0).total_seconds()


def running(ends: list[float] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """A run whose workers started at T0, whose chief logged these epoch ends (seconds after T0)."""
    status = sim.running_status()
    for epoch, end in enumerate(ends, start=1):
        status = watchdog.with_epoch(status, epoch, watchdog.format_time(at(end)))
    return status


def due(status: dict[str, Any], last_read: float | None, watch: WatchdogSpec = WATCH, interval: float = INTERVAL,
        first_seen: float = 0.0, spread: float = 0.0) -> float:  # fmt: skip
    last = None if last_read is None else at(last_read)
    return secs(ps.next_read(status, watch, last, at(first_seen), interval, spread))


# ---- a run not read yet --------------------------------------------------------------------------------------------


def test_a_run_not_read_yet_is_read_within_its_first_interval_at_its_own_offset():
    assert due(running(), None, first_seen=100, spread=0.0) == 100
    assert due(running(), None, first_seen=100, spread=0.5) == 102.5
    assert ps.offset("u-1") == ps.offset("u-1") and 0 <= ps.offset("u-1") < 1


def test_a_thousand_runs_seen_at_once_are_read_spread_over_the_interval():
    firsts = [due(running(), None, spread=ps.offset(f"uid-{i}")) for i in range(1000)]
    assert all(0 <= t < INTERVAL for t in firsts)
    per_tenth = Counter(int(t / INTERVAL * 10) for t in firsts)
    assert len(per_tenth) == 10 and max(per_tenth.values()) <= 130, per_tenth  # 100 each on average


# ---- before the epochs' length is known ----------------------------------------------------------------------------


def test_before_the_first_epoch_every_interval_then_a_tenth_of_its_age_at_most_max_wait():
    status = running()
    assert due(status, 10) == 15
    assert due(status, 49) == 54, "ten intervals into the epoch, still every interval"
    assert due(status, 100) == 110, "then a tenth of its age: its end shows at most 10% late"
    assert due(status, 590, watch=WatchdogSpec(min_stall_seconds=3600)) == 590 + 59
    assert due(status, 700, watch=WatchdogSpec(min_stall_seconds=3600)) == 700 + ps.MAX_WAIT


def test_the_second_epoch_is_read_as_the_first_from_the_first_ones_end():
    # The first epoch's 50 s hold the data load and the tracing: no measure of the second.
    status = running([50])
    assert due(status, 52) == 57
    assert due(status, 50 + 200) == 50 + 200 + 20


# ---- with a mean: at the expected end ------------------------------------------------------------------------------


def test_after_a_timed_epoch_the_next_read_is_the_expected_end_plus_the_margin():
    status = running([50, 110])  # one timed epoch: 60 s
    assert due(status, 111) == 110 + 60 + ps.MARGIN, "one read an epoch when it ends on time"


def test_a_read_that_finds_no_new_epoch_is_retried_a_step_later_then_by_its_lateness():
    status = running([50, 110])
    assert due(status, 171) == 176, "a step (the interval) after the miss"
    assert due(status, 170 + 100) == 270 + 10, "100 s late: a tenth of the lateness"
    assert due(status, 170 + 2000, watch=WatchdogSpec(enabled=False)) == 2170 + ps.MAX_WAIT


def test_short_epochs_are_retried_a_quarter_epoch_apart_and_shorter_than_the_interval_every_interval():
    ten = running([15, 25])  # 10 s epochs
    assert due(ten, 26) == 36 and due(ten, 36) == 38.5, "a quarter of 10 s: a late epoch shows 2.5 s late"
    three = running([15, 18])  # 3 s epochs: shorter than the interval, read every interval as before
    assert due(three, 19) == 24 and due(three, 24) == 29


def test_long_epochs_are_read_from_before_their_expected_end_and_at_least_every_max_wait():
    status = running([900, 1500])  # 600 s epochs: from 25 s before the end (5% less a step)
    lead = ps.LEAD * 600 - INTERVAL
    assert due(status, 1500 + 540) == 1500 + 600 + ps.MARGIN - lead
    assert due(status, 1501) == 1501 + ps.MAX_WAIT, "a minute at most between reads"
    assert ps.step(600, INTERVAL) == INTERVAL and ps.step(10, INTERVAL) == 2.5 and ps.step(3, INTERVAL) == INTERVAL


def test_an_interval_longer_than_max_wait_is_kept():
    assert due(running([50, 110]), 111, interval=120) == 231


def test_a_run_being_restarted_by_the_watchdog_is_read_every_interval():
    status = {**running([50, 110]), "watchdog": {**running([50, 110])["watchdog"], "restarting": True}}
    assert due(status, 111) == 116


def test_a_run_without_a_start_time_is_read_every_interval():
    assert due({"phase": "Running"}, 10) == 15


# ---- the watchdog's deadline ---------------------------------------------------------------------------------------


def test_the_watchdogs_deadline_is_read_when_it_passes():
    fast = WatchdogSpec(min_stall_seconds=60)
    assert due(running(), 58, watch=fast) == 61, "the floor from the start, 60 s, read 1 s after it passes"
    assert due(running([900, 1500]), 1501, watch=WatchdogSpec(stall_factor=2, min_stall_seconds=10)) == 1501 + 60
    assert due(running([50, 60]), 61, watch=WatchdogSpec(stall_factor=2, min_stall_seconds=10)) == 71
    assert due(running(), 300, watch=fast) == 330, "past it (stalled): by its age, no deadline left"


@pytest.mark.parametrize("min_stall", [10, 25, 60, 600])
@pytest.mark.parametrize("lengths", [[30.0] * 3, [200.0, 60.0, 60.0], [15.0, 10.0, 10.0, 10.0]])
def test_a_run_that_stops_finishing_epochs_is_flagged_within_a_second_or_two_of_its_deadline(min_stall, lengths):
    watch = WatchdogSpec(min_stall_seconds=min_stall)
    ends = sim.epoch_ends(lengths)
    status, last, flagged = running(), None, None
    while flagged is None:
        when = ps.next_read(status, watch, last, T0, INTERVAL, 0.0)
        assert last is None or when > last, "never a read at or before the last one"
        done = sum(1 for end in ends if end <= secs(when))
        if done and done != watchdog.record_of(status).get("lastEpoch"):
            status = watchdog.with_epoch(status, done, watchdog.format_time(at(ends[done - 1])))
        verdict = watchdog.check(watch, status, watchdog.format_time(when))
        if isinstance(verdict, watchdog.Stalled):
            flagged = (when - verdict.since).total_seconds()
        last = when
    assert 0 <= flagged <= ps.WATCHDOG_MARGIN + 1, flagged


# ---- runs simulated end to end (bench/progress/schedule.py) --------------------------------------------------------


@pytest.mark.parametrize(("epochs", "seconds"), [(8, 10.0), (8, 60.0), (6, 9.0), (8, 600.0), (100, 60.0)])
@pytest.mark.parametrize("jitter", [0.0, 0.05])
def test_every_epoch_shows_within_a_tenth_of_its_length_and_once_the_mean_is_known_within_a_step(epochs, seconds,
                                                                                                 jitter):  # fmt: skip
    lengths = sim.lengths_of(epochs, seconds, jitter)
    run = sim.simulate(lengths, sim.schedule_plan())
    assert sorted(run.shown) == list(range(1, epochs + 1)), "no epoch skipped"
    unknown = {e: d for e, d in run.shown.items() if e <= 2 and d > max(INTERVAL, ps.BACKOFF * lengths[e - 1] * 1.1)}
    assert not unknown, unknown
    # Known: a step after the expected end (+ the margin), or, for an epoch shorter than the mean by more than the
    # lead covers, that much more.
    lead = max(0.0, ps.LEAD * seconds - ps.step(seconds, INTERVAL))
    bound = ps.step(seconds, INTERVAL) + ps.MARGIN + max(0.0, jitter * seconds * 1.05 - lead)
    late = {e: d for e, d in run.shown.items() if e >= 3 and d > bound}
    assert not late, (bound, late)


def test_steady_epochs_cost_one_read_each_and_fewer_reads_than_every_interval():
    lengths = sim.lengths_of(100, 60.0)
    run, before = sim.simulate(lengths, sim.schedule_plan()), sim.simulate(lengths, sim.every_interval())
    second_shown = next(i for i, r in enumerate(run.reads) if r >= sim.epoch_ends(lengths)[1])
    assert len(run.reads[second_shown + 1 :]) == 98, "one read per epoch after the first two"
    assert run.per_minute(len(run.reads)) < before.per_minute(len(before.reads)) / 5


def test_the_figure_script_writes_what_it_says(tmp_path):
    result = sim.compute()
    assert {c["case"] for c in result["cases"]} >= {"10 s epochs", "60 s epochs", "bench-progress"}
    for c in result["cases"]:
        assert c["after"]["reads_per_minute"] <= c["before"]["reads_per_minute"] * 1.0001, c["case"]
    assert "requests/s for 1000 running runs" in sim.markdown(result)


def test_the_clock_is_utc():
    assert T0.tzinfo == UTC
