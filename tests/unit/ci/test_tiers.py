"""tests/tiers.py (`make test`) and tests/plugins/tier_timings.py: the steps, the budget check, the record."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

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
        for name in (*step.after, *step.apart):
            assert name in names, f"{step.name} waits for or keeps apart from {name}, which is no step"
        for name in step.after:
            assert names.index(name) < names.index(step.name), (step, "waits for a later step")


def needs(step: tiers.Step, name: str) -> bool:
    """Whether the step waits for the step called name, directly or through the steps it waits for."""
    return name in step.after or any(needs(next(s for s in tiers.STEPS if s.name == a), name) for a in step.after)


def test_the_node_tiers_wait_for_the_node_start_and_take_turns_on_the_node() -> None:
    for step in (s for s in tiers.STEPS if s.node):
        assert needs(step, "node start"), step
        assert not needs(next(s for s in tiers.STEPS if s.name == "node start"), step.name)
    faults, stop, multinode = (next(s for s in tiers.STEPS if s.name == n) for n in ("node faults", "node stop",
                                                                                      "multinode"))
    assert needs(faults, "node") and needs(stop, "node faults")
    # the three nodes' tier runs beside the single node's faults, never beside its tier
    assert needs(multinode, "node") and not needs(multinode, "node faults") and not needs(multinode, "node stop")
    # the node tier's TF workers starved the integration tier's training-operator when the two overlapped
    assert needs(next(s for s in tiers.STEPS if s.name == "integration"), "node")
    # the two reliability parts merge into one ledger as they end: never at once; the suite holds no slot
    reliability = next(s for s in tiers.STEPS if s.name == "reliability")
    assert "node faults" in reliability.apart and reliability.light


def test_every_make_target_a_step_runs_has_its_prerequisites_built_by_steps_it_waits_for() -> None:
    """Two makes never build one thing at once: a tier's target's own prerequisites (setup, images, the builds)
    come from steps it waits for, not from a second build beside theirs."""
    builds = {s.argv[-1]: s.name for s in tiers.STEPS if s.argv[0] == "make" and not s.tier}
    builds.update({"setup-op": "setup", "setup-trainer": "setup"})
    prerequisites = {target: deps.split() for target, deps in
                     re.findall(r"^([a-zA-Z0-9_-]+):([^#\n]*)", (REPO / "Makefile").read_text(), re.MULTILINE)}

    def built_by(target: str) -> set[str]:  # every target make runs for it, theirs too
        return {target}.union(*(built_by(t) for t in prerequisites.get(target, [])))

    assert "cluster-build" in built_by("multinode-build"), "the check follows prerequisites' prerequisites"
    for step in (s for s in tiers.STEPS if s.argv[0] == "make"):
        for target in built_by(step.argv[-1]) - {step.argv[-1]}:
            if target in builds and builds[target] != step.name:
                assert needs(step, builds[target]), f"{step.name}: make {step.argv[-1]} builds {target} itself"


def test_the_node_lane_runs_at_the_machines_priority_and_every_other_tier_below_it() -> None:
    lane = [s for s in tiers.STEPS if s.node or s.multinode]
    for step in tiers.STEPS:
        if step in lane or any(needs(n, step.name) for n in lane):
            assert not step.side, f"{step.name}: a node step waits for it"
        elif step.tier and not step.light:
            assert step.side, f"{step.name}: no node step waits for it, and it takes a slot's CPU"
    side = next(s for s in tiers.STEPS if s.name == "trainer")
    assert tiers.step_argv(side) == ("nice", "-n", str(tiers.SIDE_NICE), *side.argv)
    node = next(s for s in tiers.STEPS if s.name == "node")
    assert tiers.step_argv(node) == node.argv


def test_the_multinode_tier_waits_for_the_s3_servers_build_and_fails_rather_than_skips_without_it() -> None:
    step = next(s for s in tiers.STEPS if s.name == "multinode")
    assert {"multinode start", "s3 build"} <= set(step.after)
    env = tiers.step_env(step, shared_node=False, shared_cluster=True)
    assert env["DTR_S3_REQUIRED"] == "1" and env["DTR_CLUSTER_DIR"] == str(tiers.CLUSTER_DIR)
    assert "DTR_S3_REQUIRED" not in tiers.step_env(next(s for s in tiers.STEPS if s.name == "node"), True, True) \
        or os.environ.get("DTR_S3_REQUIRED")  # fmt: skip


def step(name: str, after: tuple[str, ...] = (), apart: tuple[str, ...] = (), argv: tuple[str, ...] = ("true",)
         ) -> tiers.Step:  # fmt: skip
    return tiers.Step(name, argv, name, after=after, apart=apart)


def test_a_free_slot_takes_the_ready_step_with_the_longest_chain_behind_it() -> None:
    steps = [step("build"), step("quick tier"), step("long tier"), step("node", after=("build",)),
             step("node tier", after=("node",))]  # fmt: skip
    rank = tiers.critical_paths(steps, {"build": 10, "quick tier": 30, "long tier": 300, "node": 20,
                                        "node tier": 600})  # fmt: skip
    assert rank == {"build": 630, "quick tier": 30, "long tier": 300, "node": 620, "node tier": 600}
    ready = tiers.ready_steps(steps, {}, {s.name for s in steps})
    assert [s.name for s in ready] == ["build", "quick tier", "long tier"]
    # the short build first: the long tier alone is shorter than the chain it opens
    assert tiers.next_step(ready, [], rank).name == "build"
    assert tiers.next_step(ready[1:], [steps[0]], rank).name == "long tier"
    assert tiers.next_step([], [steps[0]], rank) is None
    # a quick check goes before every longer chain
    lint = tiers.Step("lint", ("true",), "lint", early=True)
    assert tiers.next_step([*ready, lint], [], {**rank, "lint": 5}) is lint
    # a step never timed counts as UNKNOWN_SECONDS; equals go in STEPS' order
    rank = tiers.critical_paths(steps[:3], {})
    assert set(rank.values()) == {tiers.UNKNOWN_SECONDS} and tiers.next_step(steps[:3], [], rank).name == "build"


def test_a_step_waits_for_what_it_needs_and_never_runs_beside_a_step_it_is_apart_from() -> None:
    a, b = step("a"), step("b", apart=("a",))
    c = step("c", after=("a", "skipped"))
    assert tiers.next_step([b], [a], {"b": 9}) is None and tiers.next_step([a], [b], {"a": 9}) is None
    assert tiers.next_step([b, step("d")], [a], {"b": 9, "d": 1}).name == "d"
    done = {"a": tiers.Result(a, 1.0, 0)}
    assert tiers.ready_steps([c], {}, {"a", "c"}) == []
    assert tiers.ready_steps([c], done, {"a", "c"}) == [c], "a step left out of the run counts as passed"
    assert tiers.blocked_steps([c], done) == []
    assert tiers.blocked_steps([c], {"a": tiers.Result(a, 1.0, 2)}) == [c]
    assert tiers.blocked_steps([c], {"a": tiers.Result(a, 0.0, None)}) == [c]


def test_a_light_step_starts_beside_the_slots_steps_and_takes_no_slot() -> None:
    one, two, three = step("one"), step("two"), step("three")
    waits = tiers.Step("waits", ("true",), "waits", light=True)
    rank = {"one": 1, "two": 1, "three": 9, "waits": 5}
    assert tiers.next_step([three, waits], [one, two], rank, slots=2) is waits, "two slots taken: only a light one"
    assert tiers.next_step([three], [one, two], rank, slots=2) is None
    assert tiers.next_step([three], [one, waits], rank, slots=2) is three, "the light step holds no slot"
    apart = tiers.Step("apart", ("true",), "apart", light=True, apart=("one",))
    assert tiers.next_step([apart], [one], rank, slots=2) is None, "light, but still never beside what it is apart from"


def test_a_side_step_takes_a_slot_or_the_room_beside_them_and_never_holds_back_a_node_step() -> None:
    side, other_side, third_side = (tiers.Step(n, ("true",), n, side=True) for n in ("side", "other", "third"))
    lane, faults = step("lane"), step("faults")
    rank = {"side": 9, "other": 9, "third": 9, "lane": 1, "faults": 1}
    assert tiers.SIDE_ROOM == 1
    assert tiers.next_step([faults], [lane, side, other_side], rank, slots=2) is faults, "side steps hold no slot"
    assert tiers.next_step([other_side], [lane, faults, side], rank, slots=2) is None, "two slots and the room taken"
    assert tiers.next_step([other_side], [lane, faults], rank, slots=2) is other_side, "the room beside the slots"
    assert tiers.next_step([third_side], [side, other_side], rank, slots=2) is third_side
    assert tiers.next_step([faults], [lane, step("two")], rank, slots=2) is None, "two node steps fill the slots"
    assert tiers.next_step([faults, other_side], [lane], rank, slots=2) is other_side, "both free: the longest chain"


def test_builds_and_tiers_on_the_nodes_share_the_slots() -> None:
    """CI's run of 3681934 gave each their own: two node tiers beside two builds on 2 cores, a watchdog test late."""
    build, start = step("build"), step("start")
    node, runs, multinode = (tiers.Step(n, ("true",), n, node=n != "multi", multinode=n == "multi")
                             for n in ("node", "runs", "multi"))  # fmt: skip
    rank = {"build": 9, "start": 9, "node": 1, "runs": 1, "multi": 1}
    assert tiers.next_step([runs], [build, node], rank, slots=2) is None, "a build and a node tier fill both"
    assert tiers.next_step([start], [node, runs], rank, slots=2) is None, "so do two node tiers"
    assert tiers.next_step([multinode], [build], rank, slots=2) is multinode


def test_a_light_step_mostly_waited_in_the_recorded_warm_run() -> None:
    """`light` is a measurement: each light step's processes kept under LIGHT_LOAD of a core busy over its seconds in
    the warm run docs/ci-costs.json holds, per pytest session it runs at once (a step made light before a run
    measured it fails here)."""
    rows = {r["name"]: r for r in json.loads(tiers.COSTS.read_text())["warm"]["steps"]}
    for light in (s for s in tiers.STEPS if s.light):
        assert not light.node and not light.multinode, f"{light.name}: a node's pods are not its processes"
        row = rows.get(light.name, {})
        assert "cpu seconds" in row, f"{light.name}: no CPU seconds in the recorded warm run"
        assert row["cpu seconds"] < tiers.LIGHT_LOAD * row["seconds"] * light.sessions, row


def test_the_expected_seconds_are_the_recorded_run_of_the_kind_expected_else_of_the_other() -> None:
    costs = {"cold": {"steps": [{"name": "build", "seconds": 400}, {"name": "tier", "seconds": 100}]},
             "warm": {"steps": [{"name": "build", "seconds": 1}, {"name": "new", "seconds": 50}]}}
    assert tiers.expected_seconds(costs, warm=True) == {"build": 1, "tier": 100, "new": 50}
    assert tiers.expected_seconds(costs, warm=False) == {"build": 400, "tier": 100, "new": 50}
    assert tiers.expected_seconds({}, warm=True) == {}


def slots_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: list[tiers.Step], expected: dict[str, float],
              slots: int = 2) -> dict[str, tiers.Result]:  # fmt: skip
    """A small run of real commands in `slots` slots; each step's result."""
    monkeypatch.setattr(tiers, "TIMINGS", tmp_path)
    run = tiers.Run(steps, slots)
    tiers.run_slots(run, tiers.critical_paths(steps, expected), expected)
    assert set(run.results) == {s.name for s in steps}
    return run.results


def sleep(seconds: float) -> tuple[str, ...]:
    return ("sleep", str(seconds))


def test_a_ready_step_starts_when_a_slot_frees_not_when_a_lane_reaches_it(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # A long build (a cold run's node build) in one slot: the other slot runs every step that is ready meanwhile,
    # and the tier waiting for the build starts the moment it ends.
    steps = [step("build", argv=sleep(2)), step("one", argv=sleep(0.3)), step("two", argv=sleep(0.3)),
             step("tier", after=("build",), argv=sleep(0.2))]  # fmt: skip
    done = slots_ran(tmp_path, monkeypatch, steps, {"build": 100, "one": 10, "two": 10, "tier": 10})
    assert all(r.rc == 0 for r in done.values())
    starts = {name: r.start for name, r in done.items()}
    assert starts["build"] < 0.3 and starts["one"] < 0.3, starts
    assert starts["two"] < 1.5, "the second slot took the next ready step, not after the build"
    assert 1.9 < starts["tier"] < 2.9, starts
    # One slot: one step at a time, the build first (the longest chain), then equals in the steps' order.
    done = slots_ran(tmp_path, monkeypatch, steps, {"build": 100, "one": 10, "two": 10, "tier": 10}, slots=1)
    assert sorted(done, key=lambda name: done[name].start) == ["build", "one", "two", "tier"]
    assert done["one"].start >= 2.0 and done["tier"].start >= done["two"].start + 0.3, done


def test_each_step_of_a_run_picks_its_ports_from_a_block_of_its_own(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from devcluster.controlplane import port_range

    said = tmp_path / "blocks"
    steps = [step(name, argv=("sh", "-c", f'echo "$DTR_PORT_BLOCK" > {said}-{name}')) for name in ("a", "b", "c")]
    done = slots_ran(tmp_path, monkeypatch, steps, {})
    assert all(r.rc == 0 for r in done.values())
    blocks = {name: Path(f"{said}-{name}").read_text().strip() for name in ("a", "b", "c")}
    assert blocks == {"a": "0/3", "b": "1/3", "c": "2/3"}
    ranges = sorted((port_range({"DTR_PORT_BLOCK": b}) for b in blocks.values()), key=lambda r: r.start)
    assert all(x.stop <= y.start for x, y in itertools.pairwise(ranges))


def test_the_first_failure_stops_the_running_steps_and_starts_no_other(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    steps = [step("fails", argv=("sh", "-c", "sleep 0.3; exit 3")), step("long", argv=sleep(30)),
             step("after it", after=("fails",)), step("later", argv=sleep(0.1))]  # fmt: skip
    t0 = time.monotonic()
    done = slots_ran(tmp_path, monkeypatch, steps, {"fails": 50, "long": 40, "after it": 1, "later": 1})
    assert time.monotonic() - t0 < 10, "the long step was not stopped"
    assert done["fails"].rc == 3 and done["long"].rc not in (0, None)
    assert done["after it"].rc is None and done["later"].rc is None
    assert not done["fails"].stopped and done["long"].stopped

    # a step whose program is not there fails the run as any failure does
    done = slots_ran(tmp_path, monkeypatch, [step("gone", argv=("/nonexistent/program",)), step("next", ("gone",))],
                     {})  # fmt: skip
    assert (done["gone"].rc, done["next"].rc) == (127, None)


def test_the_failure_named_is_the_one_that_stopped_the_run_not_a_step_it_stopped() -> None:
    run = tiers.Run([step("unit"), step("node start"), step("later")])
    run.results = {"unit": tiers.Result(run.chosen[0], 5.0, -15, stopped=True),
                   "node start": tiers.Result(run.chosen[1], 40.0, 1),
                   "later": tiers.Result(run.chosen[2], 0.0, None)}  # fmt: skip
    assert run.first_failure() is run.results["node start"]
    run.results["node start"] = tiers.Result(run.chosen[1], 40.0, 0)
    assert run.first_failure() is run.results["unit"], "none failed by itself (Ctrl-C): the first in order"


def test_a_warm_tier_over_one_and_a_half_times_its_budget_fails_the_run_naming_it() -> None:
    budget = {s.name: s.budget for s in tiers.STEPS}["node"]
    assert tiers.over_budget(run_doc(node=budget * 1.5, lint=10_000)) == []  # at the limit; a build has no budget
    (late,) = tiers.over_budget(run_doc(node=budget * 1.5 + 1))
    assert "tier 'node' took" in late and f"budget of {budget:.0f} s" in late


def test_a_slower_machine_grows_the_guards_by_its_probe_and_a_faster_one_does_not_shrink_them() -> None:
    budget = {s.name: s.budget for s in tiers.STEPS}["node"]
    slow = {"probe median s": tiers.BUDGET_PROBE_S * 1.4, "probes": 70}
    doc = {**run_doc(node=budget * 1.5 * 1.4 - 1), "machine": slow}
    assert tiers.budget_scale(slow) == pytest.approx(1.4) and tiers.over_budget(doc) == []
    doc = {**run_doc(node=budget * 1.5 * 1.4 + 1), "machine": slow}
    (late,) = tiers.over_budget(doc)
    assert "x1.40 on this slower machine" in late
    fast = {"probe median s": tiers.BUDGET_PROBE_S / 2, "probes": 70}
    assert tiers.budget_scale(fast) == 1.0 and tiers.over_budget({**run_doc(node=budget * 1.5), "machine": fast}) == []
    assert tiers.budget_scale({}) == 1.0  # no probe (a run before c53db36): the budgets as they are


def test_a_side_tier_is_held_to_its_cpu_seconds_not_to_the_wait_for_what_ran_beside_it() -> None:
    step = {s.name: s for s in tiers.STEPS}["unit"]
    assert step.side and step.cpu_budget and step.budget
    doc = run_doc(unit=step.budget * 3)  # starved at nice 10: its wall is the others'
    doc["steps"][0]["cpu seconds"] = step.cpu_budget * 1.5
    assert tiers.over_budget(doc) == []
    doc["steps"][0]["cpu seconds"] = step.cpu_budget * 1.5 + 1
    (late,) = tiers.over_budget(doc)
    assert "tier 'unit' took" in late and f"budget of {step.cpu_budget:.0f} CPU s" in late
    del doc["steps"][0]["cpu seconds"]  # not measured (another thread reaped it): its seconds, as before
    (late,) = tiers.over_budget(doc)
    assert f"budget of {step.budget:.0f} s" in late


def test_every_side_tier_whose_work_is_its_own_processes_has_a_cpu_budget() -> None:
    own_work = {"unit", "trainer", "e2e", "mlflow", "s3", "reliability"}
    assert {s.name for s in tiers.STEPS if s.cpu_budget} == own_work
    assert all(s.side and s.budget for s in tiers.STEPS if s.cpu_budget)


def test_a_step_ahead_of_its_inputs_is_ready_once_they_are_due_to_end_within_its_own_seconds() -> None:
    """The three nodes' start as the single node's two steps end: each input it starts ahead of must run, and have
    run its recorded seconds less the step's own; one that passed counts; without the records it waits for them."""
    node, runs = step("node"), step("runs")
    start = tiers.Step("start", ("true",), "start", after=("setup", "node", "runs"), light=True, ahead=("node", "runs"))
    chosen = {"setup", "node", "runs", "start"}
    setup = {"setup": tiers.Result(step("setup"), 1.0, 0)}
    expected = {"node": 700.0, "runs": 680.0, "start": 120.0}

    def ready(running_for: dict[str, float], results: dict[str, tiers.Result] = setup,
              seconds: dict[str, float] = expected) -> list[tiers.Step]:  # fmt: skip
        return tiers.ready_steps([start], results, chosen, running_for, seconds)

    assert ready({"node": 100, "runs": 100}) == []
    assert ready({"node": 580, "runs": 559}) == [], "runs is due in 121 s: more than the start's 120"
    assert ready({"node": 580, "runs": 560}) == [start]
    assert ready({"node": 580}) == [], "runs has not started"
    assert ready({"node": 580, "runs": 560}, seconds={"node": 700, "runs": 680}) == [], "no record of its own"
    assert ready({"runs": 560}, results={**setup, "node": tiers.Result(node, 700.0, 0)}) == [start]
    assert ready({"runs": 560}, results={"node": tiers.Result(node, 700.0, 0)}) == [], "setup is not ahead"
    assert tiers.ready_steps([start], setup, chosen) == [], "no clocks: it waits for the ends"
    plain = step("plain", after=("node",))
    assert tiers.ready_steps([plain], {}, {"node", "plain"}, {"node": 9999.0}, {"node": 1.0, "plain": 1.0}) == []
    assert runs.ahead == ()


def test_the_runs_pace_is_its_passed_steps_seconds_over_their_records() -> None:
    expected = {"unit": 120.0, "reliability": 300.0, "build": 1.0, "node": 700.0}
    ok = {name: tiers.Result(step(name), seconds, 0) for name, seconds in
          (("unit", 150.0), ("reliability", 360.0), ("build", 30.0))}  # fmt: skip
    assert tiers.pace({}, expected) == 1.0
    assert tiers.pace(ok, expected) == (150 + 360) / (120 + 300), "a build's second counts for nothing"
    assert tiers.pace({**ok, "node": tiers.Result(step("node"), 10.0, 2)}, expected) == (150 + 360) / (120 + 300)
    assert tiers.pace({"new": tiers.Result(step("new"), 500.0, 0)}, expected) == 1.0, "no record: no pace"


def test_a_light_step_starts_ahead_in_a_run_and_what_needs_it_waits_for_both(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiers, "AHEAD_LOOK_SECONDS", 0.2)
    steps = [step("node", argv=sleep(3)),
             tiers.Step("start", sleep(0.5), "start", after=("node",), light=True, ahead=("node",)),
             step("tier", after=("node", "start"), argv=sleep(0.1))]  # fmt: skip
    done = slots_ran(tmp_path, monkeypatch, steps, {"node": 3.0, "start": 1.0, "tier": 1.0})
    assert all(r.rc == 0 for r in done.values())
    assert 1.9 < done["start"].start < 2.8, done["start"]  # 3 s less its own 1 s, looked at every 0.2 s
    assert done["tier"].start >= done["node"].start + 3.0, done
    # A run twice as slow as recorded so far (a first step of 2 s recorded as 1): the start is due twice as late.
    monkeypatch.setattr(tiers, "PACE_FLOOR_S", 0.5)
    steps = [step("first", argv=sleep(2)), step("node", after=("first",), argv=sleep(5)),
             tiers.Step("start", sleep(0.2), "start", after=("node",), light=True, ahead=("node",))]  # fmt: skip
    done = slots_ran(tmp_path, monkeypatch, steps, {"first": 1.0, "node": 3.0, "start": 1.0})
    assert 3.8 < done["start"].start - done["node"].start < 4.9, done


def test_a_step_starts_ahead_only_of_steps_it_needs_and_only_when_light() -> None:
    for s in tiers.STEPS:
        assert set(s.ahead) <= set(s.after), s.name
        assert not s.ahead or s.light, f"{s.name}: it would take a slot beside the steps it is ahead of"
    start = next(s for s in tiers.STEPS if s.name == "multinode start")
    assert set(start.ahead) == {"node", "node runs"}


def test_a_run_short_of_disk_does_not_start_and_says_how_much_it_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert tiers.disk_shortfall(tiers.DISK_NEEDED_GB["warm"], warm=True) is None
    short = tiers.disk_shortfall(tiers.DISK_NEEDED_GB["cold"] - 0.5, warm=False)
    assert short and f"a cold run needs about {tiers.DISK_NEEDED_GB['cold']:.0f} GB" in short and "--purge" in short
    monkeypatch.setattr(tiers, "TIMINGS", tmp_path)
    monkeypatch.setattr(tiers, "free_gb", lambda: 2.2)  # what the CI machine had when setup died of ENOSPC
    started = []
    monkeypatch.setattr(tiers, "run_slots", lambda run, rank, expected=None: started.append(rank))
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
    # a run's ten slowest tests across tiers are kept with it (worked out for a run.json from before they were)
    slow = {f"t{t}": {"slowest": [[f"t{t}.py::test_{i}", float(t * 10 + i)] for i in range(8)]} for t in range(2)}
    (tmp_path / "run.json").write_text(json.dumps({**run_doc(unit=3), "date": "d", "commit": "c", "tiers": slow}))
    assert tiers.record("warm") == 0
    kept = json.loads((tmp_path / "costs.json").read_text())["warm"]["slowest"]
    assert [s[1] for s in kept] == [f"t1.py::test_{i}" for i in range(7, -1, -1)] + ["t0.py::test_7", "t0.py::test_6"]
    assert kept[0] == ["t1", "t1.py::test_7", 17.0]


def with_timings(tmp_path: Path, module: str, tier: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """pytest on tmp_path/module with the timings plugin (tests/plugins/tier_timings.py): its run and its file."""
    out = tmp_path / "timings"
    env = {**os.environ, "DTR_TIMINGS": str(out), "DTR_TIER": tier, "PYTHONPATH": str(REPO / "tests" / "plugins")}
    env.pop("PYTEST_ADDOPTS", None)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "tier_timings", "-p", "no:cacheprovider",
            str(tmp_path / module)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    return proc, json.loads((out / f"{tier}.json").read_text())


def test_the_timings_plugin_counts_a_shared_start_once_and_outside_its_module(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text(
        "import time, pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def slow():\n    time.sleep(1.2)\n"
        "def test_one(slow): pass\n"
        "def test_two(slow): time.sleep(0.3)\n"
        "def test_three(): assert False\n"
    )
    proc, doc = with_timings(tmp_path, "test_a.py", "demo")
    assert proc.returncode == 1, proc.stdout
    assert doc["tier"] == "demo" and doc["exitstatus"] == 1
    assert doc["outcomes"] == {"passed": 2, "failed": 1}
    assert list(doc["fixtures"]) == ["slow (module)"] and doc["fixtures"]["slow (module)"] >= 1.2
    module = doc["modules"]["test_a.py"]
    assert module["tests"] == 3 and 0.3 <= module["seconds"] < 1.2, module
    (first, took), *rest = doc["slowest"]
    assert first.endswith("test_a.py::test_two") and 0.3 <= took < 1.2, doc["slowest"]  # the shared start aside
    assert len(rest) == 2 and all(seconds < 0.3 for _, seconds in rest), doc["slowest"]


def test_the_timings_plugin_counts_a_tests_cpu_and_that_of_the_processes_it_waited_for(tmp_path: Path) -> None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
    (tmp_path / "test_b.py").write_text(
        "import subprocess, sys, time, pytest\n"
        "@pytest.fixture(scope='session')\n"
        f"def reaped_last():\n    proc = subprocess.Popen([sys.executable, '-c', {burn!r}])\n"
        "    yield\n    proc.wait()\n"
        f"def test_child(): subprocess.run([sys.executable, '-c', {burn!r}], check=True)\n"
        "def test_asleep(reaped_last): time.sleep(0.6)\n"
    )
    proc, doc = with_timings(tmp_path, "test_b.py", "cpu")
    assert proc.returncode == 0, proc.stdout
    (first, cpu), (second, idle) = doc["hungriest"]
    assert first.endswith("test_b.py::test_child") and cpu >= 0.6, doc["hungriest"]  # the child's, once waited for
    assert second.endswith("test_b.py::test_asleep") and idle < 0.3, doc["hungriest"]  # a wait costs none
    assert 0.6 <= doc["modules"]["test_b.py"]["cpu seconds"] < 1.2, doc["modules"]
    assert doc["session teardown cpu seconds"] >= 0.6, "a process the session's fixture reaped: not the last test's"


def test_the_table_lists_the_tests_that_took_the_most_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    tiers_of = {"trainer": {"hungriest": [["t.py::test_busy", 42.0], ["t.py::test_idle", 0.1]]}}
    doc = {"warm": True, "seconds": 1.0, "steps": [], "tiers": tiers_of}
    assert tiers.slowest_tests(doc, key="hungriest")[0] == ["trainer", "t.py::test_busy", 42.0]
    tiers.print_table(doc)
    out = capsys.readouterr().out
    assert "the most CPU" in out and "42 s  trainer        t.py::test_busy" in out


def test_the_table_lists_the_slowest_ten_tests_across_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    tiers_of = {f"tier{t}": {"slowest": [[f"t{t}.py::test_{i}", float(t * 10 + i)] for i in range(10)]}
                for t in range(3)}  # fmt: skip
    assert [f[1] for f in tiers.slowest_tests({"tiers": tiers_of})] == [f"t2.py::test_{i}" for i in range(9, -1, -1)]
    tiers.print_table({"warm": True, "seconds": 1.0, "steps": [], "tiers": tiers_of})
    out = capsys.readouterr().out
    assert "slowest tests" in out and "t2.py::test_9" in out and "t1.py::test_9" not in out


def test_the_run_records_its_machines_speed_as_the_median_probe_and_the_time_stolen(
        capsys: pytest.CaptureFixture[str]) -> None:
    machine = tiers.speed_summary([0.30, 0.10, 0.12, 0.11, 0.50], stolen=0.0123)
    assert machine == {"probe median s": 0.12, "probe min s": 0.1, "probe max s": 0.5, "probes": 5, "stolen": 0.012}
    assert tiers.speed_summary([], None) == {}
    tiers.print_table({"warm": True, "seconds": 1.0, "steps": [], "tiers": {}, "machine": machine})
    out = capsys.readouterr().out
    assert "machine: probe 0.120 CPU s (median of 5, 0.100 to 0.500; lower is faster), 1.2% of the CPU time" in out
    # The probe is work, not time: more of it takes more CPU seconds, and a sleeping thread spends none.
    small, large = tiers.probe_seconds(20_000), tiers.probe_seconds(2_000_000)
    assert 0 < small < large


def test_the_speed_watch_probes_at_the_start_and_until_the_run_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiers, "PROBE_SAMPLE_SECONDS", 0.05)
    monkeypatch.setattr(tiers, "probe_seconds", lambda: 0.1)
    run, finished = tiers.Run([]), threading.Event()
    watcher = threading.Thread(target=tiers.watch_speed, args=(run, finished))
    watcher.start()
    time.sleep(0.3)
    finished.set()
    watcher.join(timeout=5)
    assert not watcher.is_alive() and 2 <= len(run.probes) <= 8, run.probes


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


def test_the_two_node_steps_run_every_node_module_once() -> None:
    node, runs = (next(s for s in tiers.STEPS if s.name == n) for n in ("node", "node runs"))
    modules = {f"tests/node/{p.name}" for p in (REPO / "tests" / "node").glob("test_*.py")}
    assert set(tiers.NODE_RUNS) < modules
    assert "tests/node" in node.argv and {f"--ignore={m}" for m in tiers.NODE_RUNS} <= set(node.argv)
    assert [a for a in runs.argv if a.startswith("tests/")] == list(tiers.NODE_RUNS)
    # The three nodes' start alone may go beside "node runs" (it runs no test and no TensorFlow); their tier may not.
    for later in (s for s in tiers.STEPS if needs(s, "node") and s is not runs and s.name != "multinode start"):
        assert needs(later, "node runs"), f"{later.name}: after the whole node tier, not half of it"
    assert needs(next(s for s in tiers.STEPS if s.name == "multinode"), "node runs")


# What a module beside the rest of the node tier may not do: change the operator (its namespace, its Deployment),
# install Kueue, label or patch the node.
SHARED = re.compile(r"dtr-system|kueue|rollout|\"set\", \"env\"|\.install\(|\"(label|patch)\", node")


def test_the_modules_beside_the_node_tier_change_nothing_the_others_see() -> None:
    for module in tiers.NODE_RUNS:
        found = SHARED.findall((REPO / module).read_text())
        assert not found, f"{module} changes what the node tier's other step sees ({found}): move it to 'node'"
    changers = ("test_kueue.py", "test_scheduling.py")  # the pattern finds what they do
    assert all(SHARED.search((REPO / "tests" / "node" / m).read_text()) for m in changers)
