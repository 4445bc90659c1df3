"""tests/shards.py: one tier as several pytest sessions at once, their timings merged into the tier's one file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.repo import REPO
from unit.ci.test_tiers import tiers

SHARDS = REPO / "tests" / "shards.py"


def _shards_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dtr_shards", SHARDS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


shards = _shards_module()


def test_the_integration_step_runs_every_integration_module_once_in_two_sessions() -> None:
    step = next(s for s in tiers.STEPS if s.name == "integration")
    assert step.argv[:2] == (tiers.OP_PYTHON, "tests/shards.py")
    first, second = shards.split_args(list(step.argv[2:]))
    assert step.sessions == 2
    modules = {f"tests/integration/{p.name}" for p in (REPO / "tests" / "integration").glob("test_*.py")}
    assert first[0] == "tests/integration" and {f"--ignore={m}" for m in second} == set(first[1:])
    assert set(second) < modules and len(second) == len(set(second))


def test_empty_shards_are_refused() -> None:
    assert shards.split_args(["a", "--", "b", "c"]) == [["a"], ["b", "c"]]
    for bad in ([], ["a", "--"], ["--", "b"]):
        with pytest.raises(SystemExit):
            shards.split_args(bad)


def test_the_shards_timings_add_up_and_keep_the_first_failure() -> None:
    one = {"exitstatus": 0, "outcomes": {"passed": 2}, "modules": {"test_a.py": {"seconds": 3.0, "tests": 2}},
           "fixtures": {"control_plane (session)": 10.0}, "slowest": [["a::x", 2.0], ["a::y", 1.0]]}
    two = {"exitstatus": 1, "outcomes": {"passed": 1, "failed": 1}, "modules": {"test_b.py": {"seconds": 5.0,
           "tests": 2}}, "fixtures": {"control_plane (session)": 12.5}, "slowest": [["b::z", 4.0]]}  # fmt: skip
    doc = shards.merge_timings("integration", [one, two], 61.04)
    assert doc["tier"] == "integration" and doc["seconds"] == 61.0 and doc["exitstatus"] == 1
    assert doc["outcomes"] == {"passed": 3, "failed": 1}
    assert doc["modules"] == {"test_a.py": {"seconds": 3.0, "tests": 2}, "test_b.py": {"seconds": 5.0, "tests": 2}}
    assert doc["fixtures"] == {"control_plane (session)": 22.5}, "two control planes started: both counted"
    assert doc["slowest"] == [["b::z", 4.0], ["a::x", 2.0], ["a::y", 1.0]]
    assert doc["hungriest"] == []


def test_the_shards_cpu_adds_up_by_module_and_their_hungriest_tests_merge() -> None:
    one = {"modules": {"test_a.py": {"seconds": 3.0, "tests": 2, "cpu seconds": 1.5}}, "hungriest": [["a::x", 1.0]]}
    two = {"modules": {"test_a.py": {"seconds": 1.0, "tests": 1, "cpu seconds": 0.75}}, "hungriest": [["a::y", 2.0]]}
    doc = shards.merge_timings("integration", [one, two], 10.0)
    assert doc["modules"]["test_a.py"] == {"seconds": 4.0, "tests": 3, "cpu seconds": 2.2}
    assert doc["hungriest"] == [["a::y", 2.0], ["a::x", 1.0]]


# Each session's test waits for the other's to have started: one after the other, the first would time out.
MEET = """import pathlib, time
def test_{me}():
    here = pathlib.Path(__file__).parent
    (here / "{me}.started").touch()
    deadline = time.monotonic() + 60
    while not (here / "{other}.started").exists():
        assert time.monotonic() < deadline, "the other session never started while this one ran"
        time.sleep(0.05)
"""


def test_two_sessions_run_at_once_and_leave_one_timings_file_and_the_failures_exit_code(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text(MEET.format(me="a", other="b"))
    (tmp_path / "test_b.py").write_text(MEET.format(me="b", other="a") + "def test_c():\n    assert False\n")
    out = tmp_path / "timings"
    env = {**os.environ, "DTR_TIMINGS": str(out), "DTR_TIER": "demo", "PYTHONPATH": str(REPO / "tests" / "plugins"),
           "PYTEST_ADDOPTS": "-p tier_timings -p no:cacheprovider"}  # fmt: skip
    proc = subprocess.run([sys.executable, str(SHARDS), str(tmp_path / "test_a.py"), "--", str(tmp_path / "test_b.py")],
                          env=env, capture_output=True, text=True, timeout=180, check=False)  # fmt: skip
    assert proc.returncode == 1, proc.stdout
    assert "---- shard 1/2" in proc.stdout and "---- shard 2/2" in proc.stdout, proc.stdout
    assert "1 failed, 1 passed" in proc.stdout and proc.stdout.count(" passed") == 2, proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["demo.json", "demo.tests.json"], "the shards' files merged"
    assert len(json.loads((out / "demo.tests.json").read_text())) == 3, "every test of both shards, each once"
    doc = json.loads((out / "demo.json").read_text())
    assert doc["outcomes"] == {"passed": 2, "failed": 1} and doc["exitstatus"] == 1
    assert set(doc["modules"]) == {"test_a.py", "test_b.py"}
