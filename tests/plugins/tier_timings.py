"""Where a tier's time goes, recorded by the tier itself (docs/cluster.md#what-ci-costs).

Loaded by tests/tiers.py through PYTEST_ADDOPTS (`-p tier_timings`); inert unless DTR_TIMINGS names a
directory. At the end of the session it writes DTR_TIMINGS/<DTR_TIER>.json:

- `seconds`: the whole pytest session, collection included;
- `modules`: each test module's seconds (setup, call and teardown of its tests), without
- `fixtures`: the set-up of session-, package- and module-scoped fixtures that took a second or more
  (a control plane, a node, an operator), under their own names, so a shared start is counted once
  and not in whichever module happened to come first;
- `slowest`: the SLOWEST tests of the tier, [node id, seconds] (set-up, call and teardown, shared
  fixtures aside), for the table's list of the slowest ten across tiers;
- `hungriest`: the tests of the tier that took the most CPU, [node id, CPU seconds], and each module's `cpu
  seconds`: the pytest process's own CPU and that of every process it waited for (getrusage's SELF and
  CHILDREN) over each test's set-up, call and teardown, a module-scoped fixture's in its first test's, the
  session's fixtures' teardown (a control plane reaped) apart. A node's pods are containerd's children, not
  the tier's: bench/cpu/accounting.py counts them.

Beside it, DTR_TIMINGS/<DTR_TIER>.tests.json: every test as [node id, its start (epoch seconds), seconds, CPU
seconds], for `bench/cpu/accounting.py report --tests`, which puts a node's pods' CPU under the test running then.

Python 3.9 compatible: the trainer tier loads it too.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

SHARED_SCOPES = ("session", "package", "module")
WORTH_A_ROW = 1.0  # seconds: shorter fixture set-ups stay in their module's figure
SLOWEST = 10


class TierTimings:
    def __init__(self, out: Path, tier: str) -> None:
        self.out = out
        self.tier = tier
        self.started = time.monotonic()
        self.modules: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.outcomes: dict[str, int] = defaultdict(int)
        self.fixtures: dict[str, float] = defaultdict(float)
        self.test_seconds: dict[str, float] = defaultdict(float)
        self._in_test: dict[str, float] = defaultdict(float)  # shared fixture set-up inside a test's reports
        self._test = ""
        self._in_module: dict[str, float] = defaultdict(float)  # fixture set-up seconds inside a module's reports
        self._module = ""
        self.test_cpu: dict[str, float] = defaultdict(float)
        self.module_cpu: dict[str, float] = defaultdict(float)
        self.session_cpu = 0.0  # the session-scoped fixtures' teardown, after the last test
        self.test_start: dict[str, float] = {}  # epoch seconds

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> Any:
        before = cpu_seconds()
        yield
        took = cpu_seconds() - before
        self.test_cpu[item.nodeid] += took
        self.module_cpu[module_of(item.nodeid)] += took

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: Any) -> Any:
        # After the last test, the session's fixtures end: a control plane reaped there brings its CPU to
        # RUSAGE_CHILDREN all at once. Theirs, not the last test's (it made one test of the integration tier 59 s).
        before = cpu_seconds()
        yield
        if nextitem is None:
            took = cpu_seconds() - before
            self.session_cpu += took
            self.test_cpu[item.nodeid] -= took
            self.module_cpu[module_of(item.nodeid)] -= took

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Any:
        t0 = time.monotonic()
        yield
        took = time.monotonic() - t0
        if fixturedef.scope in SHARED_SCOPES and took >= WORTH_A_ROW:
            self.fixtures[f"{fixturedef.argname} ({fixturedef.scope})"] += took
            self._in_module[self._module] += took
            self._in_test[self._test] += took

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self._module = module_of(nodeid)
        self._test = nodeid
        self.test_start.setdefault(nodeid, time.time())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = module_of(report.nodeid)
        self.modules[module] += report.duration
        self.test_seconds[report.nodeid] += report.duration
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.tests[module] += 1
            self.outcomes[report.outcome] += 1

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        modules = {m: round(max(0.0, s - self._in_module.get(m, 0.0)), 1) for m, s in self.modules.items()}
        doc = {
            "tier": self.tier,
            "seconds": round(time.monotonic() - self.started, 1),
            "exitstatus": int(exitstatus),
            "outcomes": dict(self.outcomes),
            "modules": {
                m: {
                    "seconds": modules[m],
                    "tests": self.tests.get(m, 0),
                    "cpu seconds": round(self.module_cpu.get(m, 0.0), 1),
                }
                for m in sorted(modules)
            },
            "fixtures": {f: round(s, 1) for f, s in sorted(self.fixtures.items())},
            "slowest": slowest(self.test_seconds, self._in_test),
            "hungriest": slowest(self.test_cpu, {}),
            "session teardown cpu seconds": round(self.session_cpu, 1),
        }
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"{self.tier}.json").write_text(json.dumps(doc, indent=1) + "\n")
        tests = [[t, round(at, 1), round(self.test_seconds.get(t, 0.0), 1), round(self.test_cpu.get(t, 0.0), 1)]
                 for t, at in self.test_start.items()]  # fmt: skip
        (self.out / f"{self.tier}.tests.json").write_text(json.dumps(tests) + "\n")


def slowest(seconds: dict[str, float], shared: dict[str, float], count: int = SLOWEST) -> list[list[Any]]:
    """The `count` slowest tests, [node id, seconds], without the shared fixtures' set-up they happened to pay."""
    own = {t: max(0.0, s - shared.get(t, 0.0)) for t, s in seconds.items()}
    return [[t, round(s, 1)] for t, s in sorted(own.items(), key=lambda ts: -ts[1])[:count]]


def cpu_seconds() -> float:
    """User and system CPU seconds of this process and of every child it has waited for, so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def module_of(nodeid: str) -> str:
    """The test file of a node id, without the directory pytest's rootdir happened to strip or keep."""
    return Path(nodeid.split("::", 1)[0]).name


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get("DTR_TIMINGS")
    if out:
        tier = os.environ.get("DTR_TIER") or "pytest"
        config.pluginmanager.register(TierTimings(Path(out), tier), "tier-timings-recorder")
