"""tests/tiers.py (`make test`) and tests/plugins/tier_timings.py: the steps, the budget check, the record."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from support.repo import REPO


def _load_tiers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dtr_tiers", REPO / "tests" / "tiers.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


tiers = _load_tiers()


def run_doc(**seconds: float) -> dict:
    return {"warm": True, "seconds": sum(seconds.values()), "tiers": {},
            "steps": [{"name": name.replace("_", " "), "seconds": s, "rc": 0} for name, s in seconds.items()]}


def test_every_step_is_a_make_target_or_a_command_of_ours_and_every_tier_has_a_budget() -> None:
    targets = set(re.findall(r"^([a-zA-Z0-9_-]+):", (REPO / "Makefile").read_text(), re.MULTILINE))
    names = [s.name for s in tiers.STEPS]
    assert len(names) == len(set(names))
    for step in tiers.STEPS:
        if step.argv[0] == "make":
            assert step.argv[-1] in targets, step
        else:
            assert step.argv[0] == tiers.OP_PYTHON, step
            module = step.argv[2] if step.argv[1] == "-m" else None  # pytest, or a module of this repository
            script = step.argv[1] if module is None else module.replace(".", "/") + ".py"
            assert module == "pytest" or (REPO / script).is_file(), step
        assert step.tier == (step.budget is not None), f"{step.name}: a tier has a budget, a build has none"
        for name in step.after:
            assert name in names, f"{step.name} waits for {name}, which is no step"
            other = next(s for s in tiers.STEPS if s.name == name)
            assert other.side != step.side or names.index(name) < names.index(step.name), (
                step, "waits for a later step")


def test_the_node_tiers_wait_for_the_node_start() -> None:
    names = [s.name for s in tiers.STEPS]
    node_start = next(s for s in tiers.STEPS if s.name == "node start")

    def waits_for(step: tiers.Step, name: str) -> bool:
        if name in step.after or (step.side == node_start.side and names.index(step.name) > names.index(name)):
            return True
        return any(waits_for(next(s for s in tiers.STEPS if s.name == a), name) for a in step.after)

    for step in (s for s in tiers.STEPS if s.node):
        assert waits_for(step, "node start"), step


def test_the_multinode_tier_waits_for_the_s3_servers_build_and_fails_rather_than_skips_without_it() -> None:
    step = next(s for s in tiers.STEPS if s.name == "multinode")
    assert {"multinode start", "s3 build"} <= set(step.after)
    env = tiers.step_env(step, shared_node=False, shared_cluster=True)
    assert env["DTR_S3_REQUIRED"] == "1" and env["DTR_CLUSTER_DIR"] == str(tiers.CLUSTER_DIR)
    assert "DTR_S3_REQUIRED" not in tiers.step_env(next(s for s in tiers.STEPS if s.name == "node"), True, True) \
        or os.environ.get("DTR_S3_REQUIRED")  # fmt: skip


def lanes_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, side_build: float) -> dict[str, str]:
    """A small run of real commands: the main lane waits for a side-lane build, an `either` step of the side
    lane could run meanwhile. Returns each step's lane."""
    monkeypatch.setattr(tiers, "TIMINGS", tmp_path)
    sleep = lambda seconds: ("sleep", str(seconds))  # noqa: E731
    steps = [tiers.Step("compile", sleep(0.1), "main's own work"),
             tiers.Step("tier", sleep(0.1), "needs the build", after=("build", "either")),
             tiers.Step("build", sleep(side_build), "the side lane's build", side=True),
             tiers.Step("either", sleep(0.5), "either lane", side=True, either=True, after=("compile",)),
             tiers.Step("next", sleep(0.1), "after it", side=True, after=("either",))]
    run = tiers.Run(steps)
    tiers.run_lanes(run)
    assert all(r.rc == 0 for r in run.results.values()) and len(run.results) == len(steps)
    order = sorted(run.results.values(), key=lambda r: steps.index(r.step))
    return {r.step.name: "side" if r.side else "main" for r in order}


def test_an_either_step_is_run_by_the_lane_that_would_otherwise_wait(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # cold: the side lane builds long, the main lane, waiting for it, takes the step
    assert lanes_ran(tmp_path, monkeypatch, side_build=3)["either"] == "main"
    # warm: the side lane reaches it first
    assert lanes_ran(tmp_path, monkeypatch, side_build=0)["either"] == "side"


def test_a_warm_tier_over_one_and_a_half_times_its_budget_fails_the_run_naming_it() -> None:
    budget = {s.name: s.budget for s in tiers.STEPS}["unit"]
    assert tiers.over_budget(run_doc(unit=budget * 1.5, lint=10_000)) == []  # at the limit; a build has no budget
    (late,) = tiers.over_budget(run_doc(unit=budget * 1.5 + 1))
    assert "tier 'unit' took" in late and f"budget of {budget:.0f} s" in late


def test_a_run_short_of_disk_does_not_start_and_says_how_much_it_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert tiers.disk_shortfall(tiers.DISK_NEEDED_GB["warm"], warm=True) is None
    short = tiers.disk_shortfall(tiers.DISK_NEEDED_GB["cold"] - 0.5, warm=False)
    assert short and f"a cold run needs about {tiers.DISK_NEEDED_GB['cold']:.0f} GB" in short and "--purge" in short
    monkeypatch.setattr(tiers, "TIMINGS", tmp_path)
    monkeypatch.setattr(tiers, "free_gb", lambda: 2.2)  # what the CI machine had when setup died of ENOSPC
    started = []
    monkeypatch.setattr(tiers, "lane", lambda run, steps: started.append(steps))
    assert tiers.run_all(set(), set()) == 1
    assert not started and "NOT STARTED: a " in capsys.readouterr().err


def test_record_refuses_a_run_of_the_other_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setattr(tiers, "TIMINGS", tmp_path)
    monkeypatch.setattr(tiers, "COSTS", tmp_path / "costs.json")
    assert tiers.record("cold") == 2 and "run `make test` first" in capsys.readouterr().err
    (tmp_path / "run.json").write_text(json.dumps({**run_doc(unit=3), "date": "d", "commit": "c"}))
    assert tiers.record("cold") == 2 and "was warm, not cold" in capsys.readouterr().err
    assert tiers.record("warm") == 0
    assert json.loads((tmp_path / "costs.json").read_text())["warm"]["commit"] == "c"


def test_the_timings_plugin_counts_a_shared_start_once_and_outside_its_module(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text(
        "import time, pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def slow():\n    time.sleep(1.2)\n"
        "def test_one(slow): pass\n"
        "def test_two(slow): time.sleep(0.3)\n"
        "def test_three(): assert False\n"
    )
    out = tmp_path / "timings"
    env = {**os.environ, "DTR_TIMINGS": str(out), "DTR_TIER": "demo",
           "PYTHONPATH": str(REPO / "tests" / "plugins")}  # fmt: skip
    env.pop("PYTEST_ADDOPTS", None)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "tier_timings", "-p", "no:cacheprovider",
            str(tmp_path / "test_a.py")]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stdout
    doc = json.loads((out / "demo.json").read_text())
    assert doc["tier"] == "demo" and doc["exitstatus"] == 1
    assert doc["outcomes"] == {"passed": 2, "failed": 1}
    assert list(doc["fixtures"]) == ["slow (module)"] and doc["fixtures"]["slow (module)"] >= 1.2
    module = doc["modules"]["test_a.py"]
    assert module["tests"] == 3 and 0.3 <= module["seconds"] < 1.2, module
    (first, took), *rest = doc["slowest"]
    assert first.endswith("test_a.py::test_two") and 0.3 <= took < 1.2, doc["slowest"]  # the shared start aside
    assert len(rest) == 2 and all(seconds < 0.3 for _, seconds in rest), doc["slowest"]


def test_the_table_lists_the_slowest_ten_tests_across_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    tiers_of = {f"tier{t}": {"slowest": [[f"t{t}.py::test_{i}", float(t * 10 + i)] for i in range(10)]}
                for t in range(3)}  # fmt: skip
    assert [f[1] for f in tiers.slowest_tests({"tiers": tiers_of})] == [f"t2.py::test_{i}" for i in range(9, -1, -1)]
    tiers.print_table({"warm": True, "seconds": 1.0, "steps": [], "tiers": tiers_of})
    out = capsys.readouterr().out
    assert "slowest tests" in out and "t2.py::test_9" in out and "t1.py::test_9" not in out


def test_a_steps_parts_are_read_from_what_its_scripts_say_of_themselves() -> None:
    log = """[build 05:20:56] etcd v3.6.8 built in 53 s
[build 05:21:07] kubernetes v1.36.3 modules resolved in 11 s
[build 05:27:24] kubernetes v1.36.3 built in 388 s
    python:3.9-slim stand-in built in 130s, 113 MB
localhost/distml/trainer:9.9.9   1955 MB  built in 153s
trainer image built in 153s
    docker.io installed in 41 s
[node  11.4s] node up in 5.97s; logs in /x
    images imported in 80 s
"""
    assert tiers.parts(log) == {"etcd v3.6.8": 53, "kubernetes v1.36.3 modules": 11, "python:3.9-slim stand-in": 130,
                                "trainer image": 153, "docker.io": 41, "node": 5.97, "images": 80}  # fmt: skip


def test_a_part_after_a_blank_line_is_named_without_its_prefix() -> None:
    assert tiers.parts("x\n\n[node 148.4s] training-operator and the operator installed in 136s\n") == {
        "training-operator and the operator": 136}
