"""`make test`: every tier CI runs, each cost paid once, two steps at a time, each tier against its budget.

    python tests/tiers.py run [--only STEP ...] [--skip STEP ...] [--slots N]   (make test; .ci/run)
    python tests/tiers.py record cold|warm      (after a measured run: docs/ci-costs.json)

A step is a make target, a pytest selection or the shared node's start; a tier is a step that runs
tests. What a run pays once, and where (docs/cluster.md#what-ci-costs):

- the builds run as their own steps, so a tier's time is its tests' time;
- a scheduler, not fixed lanes: a step starts as soon as the steps it needs (`after`) have passed and
  one of N slots (SLOTS, 2: the cores) is free. Of the steps ready then, a free slot takes the one
  with the longest critical path: its own expected seconds plus the longest chain of steps waiting
  for it, from the last recorded run of the kind expected (docs/ci-costs.json; UNKNOWN_SECONDS for a
  step never timed), so the chain to the node tiers starts first and short independent tiers fill
  the gaps. Quick checks (`early`: lint, unit) go before any of them: a run that fails mostly fails
  there. A step never runs beside the steps it is `apart` from. A `light` step (one that mostly waits:
  its processes' CPU seconds, recorded per step, under LIGHT_LOAD of its seconds per pytest session it
  runs at once, tests/shards.py) runs beside the slots' steps without taking a slot. A light step may
  start `ahead` of some of the steps it needs, just in time: once each of them has run so long that,
  by its recorded seconds, it ends within the step's own (the three nodes' start, ready as the single
  node's tiers end). The choice is a pure function (ready_steps, next_step); the slots are threads
  that each wait on one process;
- the node lane first: a `side` step (one no node step waits for) runs at nice SIDE_NICE (which orders its
  processes only among its own: SIDE_NICE says why and what was measured); a side step starts while
  fewer than N + SIDE_ROOM steps run, any other step (a build, a start, a tier on the
  nodes) while fewer than N of those do: no side step holds one back (in a run of da2b85f, with one set of
  slots, the node faults waited for e2e's). Builds and node tiers share their N slots: in CI's run of 3681934,
  which gave each N of their own, two node tiers ran beside two builds on 2 cores and a watchdog test timed out
  (a warm run of d5660fd so, 1744 s, against 1522 s of ec528c4 with one set);
- one real node (control plane, containerd, kubelet, both images imported, the operator installed)
  serves every tier that needs one: DTR_NODE_DIR reaches their fixtures (tests/support/node.py).

Each step's output goes to DTR_TIMINGS/<step>.log; it is also streamed when no other step's output is
streaming as it starts, else its tail is printed when it ends (all of it, up to 30,000 characters, when
it fails). Every step's start, seconds and the machine's CPU use go to DTR_TIMINGS/run.json, every
tier's modules, shared fixtures and slowest tests to DTR_TIMINGS/<tier>.json
(tests/plugins/tier_timings.py). At the end a table says where the time went, and which ten tests
were the slowest. A warm run (no build step wrote into the cache) fails when a tier took more than
BUDGET_SLACK times its budget (more on a slower machine, by the probe: budget_scale): a slow creep shows in the
change that causes it. The first failure
stops the run: the steps running are stopped, no other starts.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import datetime as dt
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TIMINGS = Path(os.environ.get("DTR_TIMINGS") or REPO / ".dtr" / "timings")
CACHE = Path(os.environ.get("DTR_CACHE") or Path.home() / ".cache" / "dtr")
NODE_DIR = REPO / ".dtr" / "ci-node"
CLUSTER_DIR = REPO / ".dtr" / "ci-multinode"
OP_PYTHON = str(REPO / ".venv" / "op" / "bin" / "python")
COSTS = REPO / "docs" / "ci-costs.json"
SLOTS = 2  # steps at once: the 2 cores of CI's machine, as most steps mostly wait or use one
# A step whose processes kept less than this of one core busy over its seconds, in the recorded warm run, mostly
# waits (on the operator's clocks, on a control plane): it may be `light` (tests/unit/ci/test_tiers.py checks).
# integration: 362 CPU seconds in 716 s (0.51) at 76a4734, the first run with it light (2151 s against 2924 s); as
# two sessions at once (Step.sessions), alone here: 292 CPU seconds in 325 s, 0.45 of a core each.
LIGHT_LOAD = 0.55
# The nice of a side step's processes: it orders them only among the processes of their own session. With the kernel's
# autogroup on (/proc/sys/kernel/sched_autogroup_enabled: 1 here), the root cgroup weighs each session as one nice-0
# process whatever its processes' nice, and every step is a session of its own (run_step), as is each process a step
# starts in a new one (dtr run's workers, a control plane, weed, MLflow). Measured (bench/cpu/autogroup.py, 2026-12-07):
# three spinning processes at nice 10 in a session took 4.6 CPU s in 15 s, as many as three at nice 0 in another; with
# the session's autogroup at nice 10, 0.9 against 6.6. So it did not shorten the one node step of da2b85f (1038 s
# against 1030 s). Tried (b5f8d0c): every side step in one cpu cgroup of one session's weight; the side tiers took 30%
# longer (trainer 948 s against 744, reliability 484 against 331, unit 197 against 140) and the node steps no less
# (982 s): they mostly wait (their pods kept 0.58 of a core busy on average), so it was reverted. The scheduler's slots
# (SIDE_ROOM), not the weights, keep the side steps off the node lane.
SIDE_NICE = 10
# Side steps may run while fewer than SLOTS + SIDE_ROOM steps that are not light run. Nice alone does not keep them
# off the node lane: two side steps beside the node tier's two steps (3be5bbf: two slots for each kind) made the node
# step 1069 s against 697 s with one side step beside it (3b24152); and held back while two node steps ran, the side
# steps came last, on the run's longest chain (3b24152: the trainer tier waited for the node tier's end).
SIDE_ROOM = 1
AHEAD_LOOK_SECONDS = 5.0  # how often the scheduler looks whether a step that starts ahead is due
PACE_FLOOR_S = 60.0  # the shortest recorded step that counts in a run's pace (a warm build's second says nothing)
BUDGET_SLACK = 1.5  # a warm tier may take half as long again as its budget before the run fails
# The probe's median (below) on the machine that measured the budgets: ef45771's warm run, 0.102 CPU s (0.097-0.103 in
# the runs of 2026-12-07). A run whose probe is larger, a slower CPU, has its guards grown in proportion; a faster
# one's are not shrunk: a tier that mostly waits (integration, on the operator's clocks) is not faster there.
BUDGET_PROBE_S = 0.102
QUIET_TAIL = 15  # lines printed of a step's log that was not streamed, when it passes
# The most disk a run wrote, measured (least free space over the run, against the start; docs/ci-costs.json
# "disk"), with room to spare: a run that finds less stops at once instead of an hour in, on ENOSPC.
DISK_NEEDED_GB = {"cold": 45.0, "warm": 28.0}
DISK_SAMPLE_SECONDS = 5.0
# How much work a CPU second of this machine does, sampled through the run: the probe, a fixed piece of pure-Python
# work timed in its own thread's CPU seconds, so the run's load does not count (bench/cpu/probe.json: medians 0.097 s
# alone and beside two spinning processes here, ratio 1.00, 2026-12-07), only the CPU's speed; and the share of the
# CPU's time the hypervisor stole. Two warm runs of almost the same tests took 2482 CPU s (0fcf131, 1421 s) and 4306
# (e4da228, 2316 s) on two machines of this kind: what a run's figures mean depends on which machine it had, which
# nothing recorded before.
PROBE_LOOPS = 2_000_000
PROBE_SAMPLE_SECONDS = 30.0


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    what: str
    budget: float | None = None  # warm seconds, for tiers
    # Warm CPU seconds of its own processes (Result.cpu), for a side tier: its guard instead of `budget`. Its wall is
    # mostly its wait for the CPU that what runs beside it takes (unit: 40-53 CPU s in 102-212 s, e2e 223-347 CPU s
    # in 236-877 s, 2026-12-07), which failed green runs four times; its own CPU moves with its tests.
    cpu_budget: float | None = None
    tier: bool = False  # runs tests: DTR_TIER names its timings file
    node: bool = False  # uses the shared node (DTR_NODE_DIR)
    multinode: bool = False  # uses the shared cluster of several nodes (DTR_CLUSTER_DIR)
    after: tuple[str, ...] = ()  # steps that must have passed first (earlier in STEPS)
    apart: tuple[str, ...] = ()  # steps it never runs beside, whichever starts first
    early: bool = False  # a quick check that fails most runs that fail: before any other ready step
    light: bool = False  # mostly waits (LIGHT_LOAD): runs beside the slots' steps, taking no slot
    sessions: int = 1  # pytest sessions at once (tests/shards.py): LIGHT_LOAD is of a core each
    side: bool = False  # no node step waits for it: runs at nice SIDE_NICE
    # Steps of `after` a light step need not see end: it starts once each has run its recorded seconds less the
    # step's own, both times the run's pace (ready_steps, pace), so that it is done about when they are.
    ahead: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # more of the step's environment


def make(target: str) -> tuple[str, ...]:
    # ARGS= : `make test ARGS="--skip ..."` hands its ARGS to every make below it (MAKEFLAGS), where `make images`
    # would pass them to docker build.
    return ("make", "--no-print-directory", "ARGS=", target)


def pytest(*args: str) -> tuple[str, ...]:
    return (OP_PYTHON, "-m", "pytest", "-q", *args)


NODE_FAULTS = "tests/reliability/test_node_faults.py"
# The node tier's modules that run beside the rest of it (the "node runs" step): each starts runs in namespaces of
# its own and changes nothing another test sees; `make test-node` runs them all, one after the other.
NODE_RUNS = tuple(f"tests/node/{m}.py" for m in ("test_watchdog", "test_tensorboard", "test_transfer", "test_models",
                                                 "test_diverge", "test_notebook", "test_progress",
                                                 "test_real_node"))  # fmt: skip
# The integration tier as two pytest sessions at once (tests/shards.py), each with a control plane of its own: it
# mostly waits on the operator's clocks (285 CPU s in 739 s at 13a1600). The second: installing, users and teams,
# the first day, the control plane itself, and the operator's longest waits (a lost pod's, a stall's); about 320 s
# of the 700 s its modules took in CI, the first session the rest. Alone here: 355 s and 292 s side by side, 647 s
# as one session (2026-12-06).
INTEGRATION_SECOND = tuple(f"tests/integration/{m}.py" for m in (
    "test_deploy", "test_deploy_images", "test_team_operator", "test_user_roles", "test_first_day", "test_client",
    "test_control_plane", "test_run_author", "test_tensorboard_pod", "test_disruption", "test_watchdog"))  # fmt: skip
INTEGRATION = (OP_PYTHON, "tests/shards.py", "tests/integration", *(f"--ignore={m}" for m in INTEGRATION_SECOND),
               "--", *INTEGRATION_SECOND)  # fmt: skip
ATTACKS = "tests/reliability/test_attacks.py"
# The one node test that leaves every other namespace's runs unserved while it runs: in the node faults step, after
# the node steps (its docstring).
NAMESPACED_DEPLOY = "tests/node/test_namespaced_deploy.py"
NODE = (OP_PYTHON, "-m", "devcluster.node")  # run from the repository root, as every step is
NODE_DOWN = (*NODE, "down", "--purge", "--dir", str(NODE_DIR))
CLUSTER = (OP_PYTHON, "-m", "devcluster.cluster")
CLUSTER_DOWN = (*CLUSTER, "down", "--purge", "--dir", str(CLUSTER_DIR))

# In an order where every step comes after the steps it needs. A make target's own prerequisites (setup, images,
# the builds) are among its step's `after`: two makes never build one thing at once.
STEPS: tuple[Step, ...] = (
    # Early: every tier waits for it, and the builds beside it would hold it back for minutes (a cold run of
    # f6c6aba started it at 6:32, once the images' 392 s had freed a slot).
    Step("setup", make("setup"), "both Python environments (pinned)", early=True),
    # From the first second, beside setup and the builds: downloads and disk, light (117 CPU s in 392 s cold).
    Step("images", make("images"), "Docker engine, base images, both images", light=True),
    Step("lint", make("lint"), "ruff, complexity (xenon), the import layers, the images' locks, shellcheck, hadolint",
         after=("setup",), early=True, side=True),
    # 55-59 s in the warm runs of da2b85f and 66a31e1, 108-111 s in three others (CI's of 298de13, a3501bf, 7ee4b73),
    # then 76-117 s (2026-12-07: two cold runs and a warm one, 1983 tests, 37-40 CPU s): at nice 10 beside the node's
    # start, s3 and reliability, it waits for the CPU; 90 kept it a guard (135 s), and 124 s at b62b1d0 came within
    # 11 s of failing a green run on that wait: 100. Then 140 s at e9798a8 (10 s under): 110.
    Step("unit", make("test-unit"), "pure functions", budget=110, cpu_budget=55, tier=True, after=("setup",),
         early=True, side=True),
    Step("control-plane build", make("cluster-build"), "etcd, Kubernetes, training-operator from source"),
    # 610 s at 0775e2a beside the node tier (where the scheduler puts it), with test_sigterm_save (246 s) and the
    # experiment loop's tests; 315 s in the last recorded warm run, alone in its lane, before either. Then 528-780 s
    # (13a1600, ea60e68, ef3bb44), waiting at nice 10 for the CPU the node tiers and the three nodes' take: 700.
    Step("trainer", make("test-trainer"), "real MWMS processes, the contract, the pinned list", budget=700,
         cpu_budget=470, tier=True, after=("setup",), side=True),
    # Its CPU is steady (167-218 s), its wall is what runs beside it at nice 10: 215-321 s, then 592 s at db0e530
    # (started a second before the node faults, the three nodes and integration's two sessions, s3 beside them all;
    # the guard failed that run, every test green): 450. Then 236-296 s at the run's tail (ec528c4, d5660fd) and 733 s
    # at b62b1d0, started 22 s before that same crowd (each test 2.2-3.9x its time at d5660fd, 284 CPU s against 236;
    # the guard failed that run, every test green): 500. Then 877 s at e9798a8 (the same start, the whole run slower:
    # 2141 s, each tier's CPU a fifth more for the same tests): 600.
    Step("e2e", make("test-e2e"), "dtr run and the client end to end, the notebook on local workers", budget=600,
         cpu_budget=350, tier=True, after=("setup",), side=True),
    Step("mlflow setup", make("setup-mlflow"), "the MLflow server's own environment (pinned), for the mlflow tier",
         after=("setup",), side=True),
    # A real MLflow server as a local process (its own environment, "mlflow setup"), a real 2-worker run logged to
    # it, one restarted after a lost worker, a dead and a silent server, dtr run (docs/tracking.md): 64 to 137 s warm
    # on a 2-CPU machine at load average 7 to 8 (other test runs beside it), late in the run while its environment
    # took pip 60 s. Made by uv in 13 s (08250a8), it starts at 13 min beside the node tiers' end, integration, the
    # node faults and e2e, the machine 100% busy: 234 s, its 60 CPU s at nice 10 waiting: 180.
    Step("mlflow", make("test-mlflow"), "the chief's MLflow tracking against a real MLflow server (local process)",
         budget=180, cpu_budget=80, tier=True, after=("setup", "mlflow setup"), side=True),
    Step("images tier", make("test-images"), "both images run as uid 1000, read-only; a push", budget=110, tier=True,
         after=("setup", "images"), side=True),
    # After the control plane's build, not beside it: a cold run is bound by its CPU, and the two at once (a cold
    # run of e7dc6c5) took 1372 s to the node start against 638 + 691 s one after the other (f6c6aba), their
    # compilers 1770 CPU s against 1673.
    Step("node build", make("node-build"), "containerd, runc, CoreDNS, local-path, node images",
         after=("control-plane build",)),
    Step("node start", (*NODE, "up", "--install", "--dir", str(NODE_DIR)),
         "the shared node: control plane, node, images imported, operator installed",
         after=("setup", "images", "node build")),
    # Two steps on the one node, which may run at once: "node runs" holds the modules that only start runs of their
    # own in namespaces of their own and look at them (NODE_RUNS), most of its time the stall watchdog's waits; "node"
    # the rest, among them what changes the node for every test (Kueue installed, the operator's Deployment changed
    # and its pod deleted, node labels, an extended resource, the operator's network policy). One step until
    # 2026-12-06: 1030-1038 s, the machine 82-90% busy (the side steps at nice 10 did not shorten it), its clocks.
    # Alone on this machine (722ead6, 2026-12-05): 910 s one after the other, 733 s and 417 s side by side. Then 995 s
    # and 496 s (9a09453): test_progress (89 s of the 995) moved beside, and the budgets with it. Then 721-804 s and
    # 513-572 s: test_real_node's three runs (about 125 s of CI's 178) moved beside too, its two tests that change the
    # operator kept here (test_operator_pod.py), and test_progress's epochs made long by sleeping: 697 s and 698 s
    # (ef3bb44), the machine 94% busy.
    Step("node", pytest("tests/node", *(f"--ignore={m}" for m in (*NODE_RUNS, NAMESPACED_DEPLOY))),
         "Kueue, placement, the operator's restarts and its namespaced install, isolation, your own model, install "
         "and kubectl apply -> model",
         budget=700, tier=True, node=True, after=("node start",)),
    Step("node runs", pytest(*NODE_RUNS),
         "on the same node, beside it: a killed worker, runs deleted mid-training; the "
         "stall watchdog, TensorBoard, transfers, model versions, a diverged run, the notebook, progress epoch by "
         "epoch", budget=700, tier=True, node=True, after=("node start",)),
    # Warm: 455-459 s (233efa2, ae363d6), 526 s (16f1e0e), 610 s here at 975b8aa beside a second test run, with the
    # isolation round 2 tests (the operator's admission policy, Pod Security, quotas): 400 had left no room. Then
    # 588 s (4e62121), 678 s (6b71451) and 687 s (9154ac7, 289 tests with the sweeps': over 1.5 x 450, so a run of
    # 3000 passed tests failed on it): 500. Then 689-757 s in six runs: 700, what it takes; its slowest tests wait on
    # the operator's own clocks (a resumed run's pod wait, 77 s; the 20 s looks at pods that do not start, ~40 s
    # each). Light (LIGHT_LOAD): no kubelet, no TensorFlow; its processes, its control plane's included, kept half a
    # core busy (362 CPU seconds in 716 s at 76a4734). After the node tier: that tier's own-model runs (a dozen TF
    # workers at once) starved this tier's training-operator past its 60 s waits when the two overlapped, and
    # before it (until 2026-12-06) it held the node tier, and so the single node's and the three nodes' tiers
    # after it, back by its 700 s: the run's longest chain. Tried 2026-12-06 (7ee4b73): test_own_model as the node
    # tier's first step, this tier after it and "node runs": the own-model burst at the start starved test_watchdog's
    # first epochs past their 75 s stall floor (two failures in "node runs"). Two sessions at once (INTEGRATION): 535 s
    # at ef3bb44, 308 CPU seconds (the machine 100% busy beside the node faults, the three nodes and the trainer tier).
    Step("integration", INTEGRATION, "the operator on a real control plane (two sessions at once)", budget=550,
         tier=True, after=("setup", "control-plane build", "node", "node runs"), light=True, sessions=2),
    Step("node faults", pytest(NODE_FAULTS, ATTACKS, NAMESPACED_DEPLOY),
         "kubelet, containerd, a reboot, OOM, volumes; the attack suite; the namespaced install; on the shared node",
         # 472-549 s, then 688 s at db0e530 beside integration's two sessions, the three nodes, s3 and e2e: 600. Then
         # 632 s (d5660fd) and 794 s (b62b1d0, the same crowd): 650. Then 954 s at e9798a8 (21 s under): 700. Then
         # 1027 s at e4da228 with the namespaced install's test (moved here from "node": 31 s of it): 780. Then 919 s
         # at ef45771, the kubelet and containerd kills one run (228 s against 186 + 170 s as two).
         budget=780, tier=True, node=True, after=("node", "node runs")),
    # Apart from node faults: both parts merge their records into one ledger file as they end (tests/reliability/
    # ledger.py). After them until 2026-12-06, and apart from integration too (the two start training-operators of
    # their own on the host, one webhook pair per machine), so the run's tail was integration (790 s from the node
    # tier's end) then reliability (210 s). Light (LIGHT_LOAD: 116 CPU seconds in 237 s at 76a4734, 91 in 210 s at
    # da2b85f), it now runs when neither runs, from the start, holding no slot (it once held the node faults back
    # by one, when slots were shared).
    Step("reliability", pytest("tests/reliability", f"--ignore={NODE_FAULTS}", f"--ignore={ATTACKS}"),
         "invalid runs, generated specs, control-plane faults, Pod Security", budget=270, cpu_budget=155, tier=True,
         after=("setup", "control-plane build"), apart=("integration", "node faults"), light=True, side=True),
    # The single node's work is done: its CPU and memory go to the several nodes' tier.
    Step("node stop", NODE_DOWN, "the shared node stopped, its images and volumes removed",
         after=("node", "node runs", "node faults")),
    Step("multinode build", make("multinode-build"), "flanneld and its CNI plugin", after=("node build",)),
    # After the node step: started sooner, the three nodes' idle kubelets and containerds would take CPU from every
    # tier until theirs. Beside the node faults (a node's faults are its own: devcluster/node.py), and so is the
    # multinode tier. Not after "node runs" too (until 2026-12-06): the node step ended 80 s before it at c5ce259, and
    # the three nodes' start (120 s) then waited with a slot free, on the run's longest chain; their tier still waits
    # for both, the TensorFlow of its runs kept from the single node's. Then (2026-12-08) light and ahead of both:
    # it began as they ended (902 s into 334cfc9's warm run, the multinode tier last until 1720 s), with the
    # machine 68-87% busy over the two minutes before (the node steps' last tests mostly wait); started so as to
    # end with them, its 121 s are off the longest chain: the three nodes' tier began the second the node steps
    # ended in both runs since (435f8b9, c62ef8c), against 137 s after them at 9a64f90. Timed by the records alone,
    # the nodes then idled 134-252 s (the node steps 1.2-1.35x their records; 10.6 CPU s a minute): timed by the
    # run's pace since. Light: its own processes 13-15 CPU s in 88-121 s.
    Step("multinode start", (*CLUSTER, "up", "--install", "--nodes", "3", "--dir", str(CLUSTER_DIR)),
         "three nodes: control plane, nodes, images imported into each, operator installed",
         after=("setup", "images", "multinode build", "node", "node runs"), light=True, ahead=("node", "node runs")),
    # The S3 server's Go build (cold ~10 min, warm seconds) and its tests against it as a local process (the
    # pod's: docs/cluster.md). After the node's build: the two Go builds one after the other.
    Step("s3 build", make("s3-build"), "SeaweedFS's weed and its image from source", after=("node build",)),
    # Most of it is trainer processes: exporting to the bucket (tests/s3/test_export_s3.py: 7, about 150 s warm
    # on a loaded 2-CPU machine), backups there and the server stopped under them (test_backup_s3.py,
    # test_s3_faults.py: 50 s and 100-250 s), dtr run (test_dtr_run_s3.py: 40 s). After the trainer tier, as it ran
    # in every run until 0fcf131 recorded s3 the longer: the scheduler then took it first (the longest side step), and
    # beside the node steps it held them back: node and node runs 606/656 s and 698/703 s (two runs, 2026-12-07)
    # against 569-608/620-651 s with the trainer tier beside them (four runs); the run 1522 s against 1421 s.
    # 855 s (d5660fd), 1041 s (b62b1d0), 1300 s at e9798a8 (50 s under its guard of 900): 950.
    Step("s3", make("test-s3-local"),
         "a real S3 server (SeaweedFS) as a local process, through a client and TensorFlow's s3://; the trainer "
         "publishing model versions to it, training on data read from it, its backups there, the server stopped "
         "under it; dtr run", budget=950, cpu_budget=480, tier=True, after=("setup", "s3 build", "trainer"),
         side=True),
    # After the S3 server's build too: a run with no volume trains from, backs up into and exports to the server as
    # a pod on the three nodes (tests/multinode/test_object_store.py), which fails rather than skips without it.
    # Beside the single node's faults, not after them (until 2026-12-06, 396 s on the run's longest chain): the
    # single node and the three have their own bridges, pod ranges and iptables chains (devcluster/cluster.py), and
    # the three nodes' tier leaves a core idle on its lost nodes' clocks.
    Step("multinode", make("test-multinode"),
         "three nodes: pods, policies, a run across nodes, one with no volume (S3), node faults each resumed to "
         "Succeeded, a drain then a lost node in one run",
         # 480 before the resume (issue 41): the node faults now run to Succeeded, two of them until a lost node is
         # back; 613 s in the warm CI run of 16f1e0e (2026-12-05), 708-727 s at 9154ac7 and e17db83, 570 s at cb43cbb
         # with the node-fault runs at 20 epochs (tests/multinode/test_node_faults.py), 643 s at 66a31e1. Then the
         # drain and the power-off declared out of service proved in test_disruption.py's one run (241 s less):
         # 554-611 s. Then 689 s at ef3bb44, beside integration's two sessions and the trainer tier (the machine
         # 95-100% busy): 650. Then 813 s (d5660fd) and 894 s (b62b1d0, 81 s under that guard; its drain and
         # power-off runs 1.27x and 1.21x their time at d5660fd): 700. Then 1097 s at e9798a8 (its drain run 401 s,
         # the whole run 2141 s): 750. Then 1095 s at e4da228 (30 s under; its drain run 413 s, the run 2316 s): 800.
         # Then 1123 s at ef45771 (77 s under that guard; its drain run 406 s, the run 2313 s): 850.
         budget=850, tier=True, multinode=True,
         after=("setup", "multinode start", "s3 build", "node", "node runs"),
         env=(("DTR_S3_REQUIRED", "1"),)),
    Step("reliability report", (OP_PYTHON, "tests/reliability/report.py"), "docs/reliability.md from every part",
         after=("reliability", "node faults", "multinode"), side=True),
)


@dataclass
class Result:
    step: Step
    seconds: float
    rc: int | None  # None: not run (a step it needs failed, or the run stopped)
    busy: float | None = None  # the machine's CPUs busy over the step, 0..1 (every process, every slot)
    start: float | None = None  # seconds from the run's start
    # CPU seconds of the step's own processes and of every descendant they waited for (wait4's rusage); not a node's
    # pods, which are containerd's children, nor a daemon that left its parent (dockerd)
    cpu: float | None = None
    stopped: bool = False  # it failed once the run was stopping (stop_everything): the failure's effect, not its cause

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"name": self.step.name, "seconds": round(self.seconds, 1), "rc": self.rc}
        if self.start is not None:
            row["start"] = round(self.start, 1)
        if self.cpu is not None:
            row["cpu seconds"] = round(self.cpu, 1)
        return row if self.busy is None else {**row, "cpu busy": round(self.busy, 2)}


# ---- the scheduler's choices: pure --------------------------------------------------------------------------

UNKNOWN_SECONDS = 60.0  # a step no recorded run has timed yet


def expected_seconds(costs: dict[str, Any], warm: bool) -> dict[str, float]:
    """Each step's seconds in the recorded run of the kind expected (docs/ci-costs.json), else in the other kind's."""
    kinds = ("warm", "cold") if warm else ("cold", "warm")
    found: dict[str, float] = {}
    for kind in reversed(kinds):  # the expected kind's figures last, over the other's
        found.update({row["name"]: float(row["seconds"]) for row in (costs.get(kind) or {}).get("steps", [])})
    return found


def critical_paths(steps: list[Step], expected: dict[str, float]) -> dict[str, float]:
    """Each step's expected seconds plus the longest chain of the chosen steps that wait for it, directly or not:
    the least the run lasts from the step's start on."""
    rank: dict[str, float] = {}
    for step in reversed(steps):  # each step comes after the steps it needs
        waiting = [rank[s.name] for s in steps if step.name in s.after and s.name in rank]
        rank[step.name] = expected.get(step.name, UNKNOWN_SECONDS) + max(waiting, default=0.0)
    return rank


def ready_steps(
    pending: list[Step],
    results: dict[str, Result],
    chosen: set[str],
    running_for: Mapping[str, float] | None = None,
    expected: Mapping[str, float] | None = None,
) -> list[Step]:
    """The pending steps whose inputs have all passed (a step left out by --only/--skip counts as passed), or, for
    an input a step starts `ahead` of, runs and is due to end within the step's expected seconds: it has run
    (running_for: seconds so far of each running step) its expected seconds less the step's. Without a record of
    both, it waits for the input's end."""
    running_for, expected = running_for or {}, expected or {}

    def passed(name: str) -> bool:
        return name not in chosen or (name in results and results[name].rc == 0)

    def due(step: Step, name: str) -> bool:
        return (name in step.ahead and name in running_for and name in expected and step.name in expected
                and running_for[name] >= expected[name] - expected[step.name])  # fmt: skip

    return [s for s in pending if all(passed(name) or due(s, name) for name in s.after)]


def pace(results: Mapping[str, Result], expected: Mapping[str, float]) -> float:
    """How much longer than recorded this run's steps take: the seconds of those that passed, of PACE_FLOOR_S or more
    recorded, over their recorded seconds; 1 before any. The machine's cost per unit of work moved by a fifth within
    hours at an unchanged probe (docs/cluster.md): a step started ahead is timed by this run's pace."""
    done = [(r.seconds, expected[name]) for name, r in results.items()
            if r.rc == 0 and expected.get(name, 0.0) >= PACE_FLOOR_S]  # fmt: skip
    return sum(took for took, _ in done) / sum(then for _, then in done) if done else 1.0


def blocked_steps(pending: list[Step], results: dict[str, Result]) -> list[Step]:
    """The pending steps that can never start: a step they need failed or was not run."""
    return [s for s in pending if any(name in results and results[name].rc != 0 for name in s.after)]


def next_step(ready: list[Step], running: list[Step], rank: dict[str, float], slots: int = SLOTS) -> Step | None:
    """What starts now: of the ready steps that may run beside the running ones, an early one, else the one with the
    longest critical path (the first of equals in STEPS' order); None: none, the run waits for a step to end. A light
    step may always start; a side step while fewer than `slots` + SIDE_ROOM steps that are not light run; any other
    while fewer than `slots` steps that are neither light nor side steps run: no side step holds a node step back."""
    taken = [s for s in running if not s.light]
    side_free, lane_free = len(taken) < slots + SIDE_ROOM, sum(not s.side for s in taken) < slots

    def may_start(step: Step) -> bool:
        apart = any(other.name in step.apart or step.name in other.apart for other in running)
        return not apart and (step.light or (side_free if step.side else lane_free))

    return max((s for s in ready if may_start(s)), key=lambda s: (s.early, rank.get(s.name, 0.0)), default=None)


# ---- the shell: processes in slots -------------------------------------------------------------------------


@dataclass
class Run:
    chosen: list[Step]
    slots: int = 2
    started: float = field(default_factory=time.time)
    results: dict[str, Result] = field(default_factory=dict)
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    streaming: str | None = None  # the step whose output goes to the terminal as it comes
    free_at_start: float = 0.0  # GB on the repository's file system
    least_free: float = 0.0
    probes: list[float] = field(default_factory=list)  # CPU seconds of each probe (probe_seconds), in order
    stolen_at_start: tuple[int, int] = (0, 0)  # stolen_jiffies()

    def passed(self, name: str) -> bool:
        result = self.results.get(name)
        return result is not None and result.rc == 0

    def stream(self, step: Step) -> bool:
        """Whether the step's output goes to the terminal as it comes: when no other step's does."""
        with self.lock:
            if self.streaming is None:
                self.streaming = step.name
            return self.streaming == step.name

    def first_failure(self) -> Result | None:
        """The failure to name: the first in the steps' order of those that failed by themselves, not because the run
        stopped them (CI's run of fe15fde named unit, stopped, for the node start that failed)."""
        failed = [r for r in self.results.values() if r.rc not in (0, None)]
        failed = [r for r in failed if not r.stopped] or failed
        return min(failed, key=lambda r: self.chosen.index(r.step)) if failed else None


def step_env(step: Step, shared_node: bool, shared_cluster: bool = False, port_block: str = "") -> dict[str, str]:
    env = dict(os.environ, DTR_TIMINGS=str(TIMINGS), DTR_TIER=step.name)
    if port_block:  # "I/N": the loopback ports its tests pick (devcluster.controlplane.port_range)
        env["DTR_PORT_BLOCK"] = port_block
    plugins = str(REPO / "tests" / "plugins")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (plugins, os.environ.get("PYTHONPATH", "")) if p)
    env["PYTEST_ADDOPTS"] = " ".join(p for p in ("-p tier_timings", os.environ.get("PYTEST_ADDOPTS", "")) if p)
    if step.node and shared_node:  # else the tier's fixtures start a node of their own
        env["DTR_NODE_DIR"] = str(NODE_DIR)
    if step.multinode and shared_cluster:
        env["DTR_CLUSTER_DIR"] = str(CLUSTER_DIR)
    env.update(step.env)
    return env


def step_argv(step: Step) -> tuple[str, ...]:
    return ("nice", "-n", str(SIDE_NICE), *step.argv) if step.side else step.argv


def say(text: str) -> None:
    print(f"\n{'=' * 8} {text} {'=' * max(8, 90 - len(text))}", flush=True)


def run_step(run: Run, step: Step) -> Result:
    log = TIMINGS / f"{step.name}.log"
    live = run.stream(step)
    say(f"{step.name}: {step.what}{'' if live else ' (its output when it ends)'}")
    t0, cpu0, start = time.monotonic(), cpu_times(), time.time() - run.started
    env = step_env(step, shared_node=run.passed("node start"), shared_cluster=run.passed("multinode start"),
                   port_block=f"{run.chosen.index(step)}/{len(run.chosen)}")  # a block of its own: steps run at once
    with open(log, "wb") as out:
        proc = subprocess.Popen(step_argv(step), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        with run.lock:
            run.running[step.name] = proc
        assert proc.stdout is not None
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span two chunks
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
            out.write(chunk)
            if live:
                print(text.decode(chunk), end="", flush=True)
        rc, cpu = wait_with_cpu(proc)
    with run.lock:
        run.running.pop(step.name, None)
        if live:
            run.streaming = None
    took = time.monotonic() - t0
    if not live:
        lines = log.read_text(errors="replace").splitlines()
        print("\n".join(lines[-QUIET_TAIL:]) if rc == 0 else "\n".join(lines)[-30000:], flush=True)
    say(f"{step.name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {took:.0f} s")
    return Result(step, took, rc, busy=share_between(cpu0, cpu_times()), start=start, cpu=cpu)


def wait_with_cpu(proc: subprocess.Popen[bytes]) -> tuple[int, float | None]:
    """The process's exit code, and the CPU seconds it and the descendants it waited for used (wait4's rusage);
    None when another thread reaped it first (stop_everything's poll)."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:
        return proc.wait(), None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def run_slots(run: Run, rank: dict[str, float], expected: Mapping[str, float] | None = None) -> None:
    """Every chosen step, each in a slot of its own once the steps it needs have passed (or, for a step that starts
    ahead, are due to end: ready_steps, by the expected seconds), up to run.slots at once (light steps aside),
    chosen by next_step; a step that can no longer start is recorded as not run."""
    pending, running = list(run.chosen), {}  # name -> step
    began: dict[str, float] = {}  # name -> time.monotonic() at its start
    ended: queue.Queue[str] = queue.Queue()
    chosen = {s.name for s in run.chosen}
    while pending or running:
        for step in blocked_steps(pending, run.results) if not run.stop.is_set() else list(pending):
            pending.remove(step)
            run.results[step.name] = Result(step, 0.0, None)
        while pending:
            now, slower = time.monotonic(), pace(run.results, expected or {})
            timed = {name: seconds * slower for name, seconds in (expected or {}).items()}
            ready = ready_steps(pending, run.results, chosen, {n: now - began[n] for n in running}, timed)
            step = next_step(ready, list(running.values()), rank, run.slots)
            if step is None:
                break
            pending.remove(step)
            running[step.name], began[step.name] = step, now
            threading.Thread(target=run_in_slot, args=(run, step, ended), daemon=True).start()
        if not running:  # nothing runs and nothing can start: what is left waits for a step that will not run
            for step in pending:
                run.results[step.name] = Result(step, 0.0, None)
            return
        # A step that may start ahead becomes ready as time passes, not only as steps end: look again meanwhile.
        if (name := wait_for_end(ended, AHEAD_LOOK_SECONDS if any(s.ahead for s in pending) else None)) is not None:
            running.pop(name)


def run_in_slot(run: Run, step: Step, ended: queue.Queue[str]) -> None:
    """The step's process, its result recorded (a failure stops the run), its name then put in `ended`."""
    try:
        try:
            result = run_step(run, step)
        except OSError as err:  # it could not start (no such program): a failure, not a step left waiting
            say(f"{step.name}: FAILED to start: {err}")
            result = Result(step, 0.0, 127)
        result.stopped = bool(result.rc) and run.stop.is_set()
        run.results[step.name] = result
        if result.rc:
            stop_everything(run)
    finally:
        ended.put(step.name)


def wait_for_end(ended: queue.Queue[str], within: float | None = None) -> str | None:
    """The name of the next step to end, or None once `within` seconds passed first (in short waits: Ctrl-C reaches
    the main thread)."""
    deadline = None if within is None else time.monotonic() + within
    while deadline is None or (left := deadline - time.monotonic()) > 0:
        with contextlib.suppress(queue.Empty):
            return ended.get(timeout=1 if deadline is None else min(1.0, left))
    return None


def stop_everything(run: Run) -> None:
    """The first failure ends the run: no new step starts, and the steps running are stopped."""
    run.stop.set()
    with run.lock:
        for proc in run.running.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)


def probe_seconds(loops: int = PROBE_LOOPS) -> float:
    """The CPU seconds this thread takes for a fixed piece of pure-Python work: the machine's speed, not its load."""
    began, total, names = time.thread_time(), 0, {}
    for i in range(loops):
        total += i & 7
        if i & 1023 == 0:
            names[i] = str(i)
    return time.thread_time() - began


def speed_summary(probes: list[float], stolen: float | None) -> dict[str, Any]:
    """The run's probes (their median the figure to compare across runs) and the share of its CPU time stolen."""
    ordered = sorted(probes)
    doc: dict[str, Any] = {}
    if ordered:
        doc = {"probe median s": round(ordered[len(ordered) // 2], 3), "probe min s": round(ordered[0], 3),
               "probe max s": round(ordered[-1], 3), "probes": len(ordered)}  # fmt: skip
    return doc if stolen is None else {**doc, "stolen": round(stolen, 3)}


def watch_speed(run: Run, finished: threading.Event) -> None:
    """A probe at the run's start, then one every PROBE_SAMPLE_SECONDS until it ends."""
    while True:
        run.probes.append(probe_seconds())
        if finished.wait(PROBE_SAMPLE_SECONDS):
            return


def cpu_jiffies() -> list[int]:
    """The jiffies of all CPUs since boot by kind (user, nice, system, idle, iowait, irq, softirq, steal, ...), from
    /proc/stat's first line; [] where there is none."""
    try:
        return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return []


def stolen_jiffies() -> tuple[int, int]:
    """(stolen, total) jiffies of all CPUs since boot; (0, 0) where they are not counted."""
    fields = cpu_jiffies()
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot; (0, 0) where they are not counted."""
    fields = cpu_jiffies()
    if len(fields) < 4:
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def share_between(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Of the jiffies between two (part, total) readings of /proc/stat, the part's share (busy, stolen)."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else None


def free_gb() -> float:
    return shutil.disk_usage(REPO).free / 1e9


def watch_disk(run: Run, finished: threading.Event) -> None:
    """The least free space over the run: what it wrote at its fullest (builds, images, nodes, venvs)."""
    while not finished.wait(DISK_SAMPLE_SECONDS):
        run.least_free = min(run.least_free, free_gb())


def expect_warm() -> bool:
    """Before the run: are the builds there already (docker, the cached binaries and images)?"""
    return shutil.which("dockerd") is not None and any((CACHE / "bin").glob("*"))


def disk_shortfall(free: float, warm: bool) -> str | None:
    """Why a run should not start for want of disk, or None."""
    kind = "warm" if warm else "cold"
    needed = DISK_NEEDED_GB[kind]
    if free >= needed:
        return None
    return (f"a {kind} run needs about {needed:.0f} GB free where the repository is ({REPO}), "
            f"and there are {free:.1f} GB (tests/tiers.py DISK_NEEDED_GB; docs/cluster.md#what-ci-costs). "
            f"Old clones' nodes hold about 4 GB each: `python -m devcluster.node down --purge --dir "
            f"CLONE/.dtr/ci-node` and `python -m devcluster.cluster down --purge --dir CLONE/.dtr/ci-multinode`")


def build_state() -> dict[str, float]:
    """What the builds left in the cache: a file's mtime per path (a warm run changes none)."""
    found = {}
    for sub in ("bin", "images"):
        for path in (CACHE / sub).glob("*"):
            found[str(path)] = path.stat().st_mtime
    return found


# What the build scripts and node.py say of their own parts ("etcd v3.6.8 built in 53 s", "python:3.9-slim
# stand-in built in 130s, 113 MB", "node up in 5.97s", "images imported in 80 s"); a step's parts come from
# its log, and may overlap (an install includes its import).
PART = re.compile(r"^(?:\[[^\]]*\] |[ \t]+)?(?P<what>\S.*?) (?:built|resolved|imported|installed|up) in "
                  r"(?P<seconds>\d+(?:\.\d+)?) ?s\b", re.MULTILINE)  # fmt: skip


def parts(log: str) -> dict[str, float]:
    found = {}
    for match in PART.finditer(log):
        what = match["what"].strip()
        # the build scripts' closing summaries repeat figures already counted
        if " MB" not in what and not (what.startswith("kubernetes v") and not what.endswith("modules")):
            found[what] = float(match["seconds"])
    return found


def tier_doc(step: Step) -> dict[str, Any]:
    path = TIMINGS / f"{step.name}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def summary(run: Run, warm: bool) -> dict[str, Any]:
    ran = sorted((run.results[s.name] for s in run.chosen if s.name in run.results),
                 key=lambda r: float("inf") if r.start is None else r.start)  # in the order they started
    doc = {
        "date": dt.datetime.fromtimestamp(run.started, dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git("rev-parse", "--short", "HEAD"),
        "warm": warm,
        "cores": os.cpu_count(),
        "slots": run.slots,
        "seconds": round(time.time() - run.started, 1),
        "disk": {"free at start GB": round(run.free_at_start, 1), "used at most GB":
                 round(run.free_at_start - run.least_free, 1)},
        "machine": speed_summary(run.probes, share_between(run.stolen_at_start, stolen_jiffies())),
        "steps": [with_parts(r.row()) for r in ran],
        "tiers": {r.step.name: tier_doc(r.step) for r in ran if r.step.tier and r.rc is not None},
    }
    return {**doc, "slowest": slowest_tests(doc), "hungriest": slowest_tests(doc, key="hungriest")}


def with_parts(row: dict[str, Any]) -> dict[str, Any]:
    try:
        found = parts((TIMINGS / f"{row['name']}.log").read_text(errors="replace"))
    except OSError:
        found = {}
    return {**row, "parts": found} if found else row


def git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
    return proc.stdout.strip()


def budget_scale(machine: dict[str, Any]) -> float:
    """How much longer than its budget a tier may take on this run's machine: its probe against BUDGET_PROBE_S's, at
    least 1."""
    probe = machine.get("probe median s")
    return max(1.0, probe / BUDGET_PROBE_S) if probe else 1.0


def over_budget(doc: dict[str, Any]) -> list[str]:
    """The tiers of a warm run that took more than BUDGET_SLACK times their budget (grown on a slower machine:
    budget_scale), as sentences: CPU seconds for a tier with a cpu_budget (when its CPU was measured), else
    seconds."""
    steps = {s.name: s for s in STEPS}
    scale = budget_scale(doc.get("machine") or {})
    slower = f", x{scale:.2f} on this slower machine (its probe)" if scale > 1 else ""
    late = []
    for row in doc["steps"]:
        step = steps.get(row["name"])
        if step is None:
            continue
        if step.cpu_budget and row.get("cpu seconds") is not None:
            took, budget, unit = row["cpu seconds"], step.cpu_budget, " CPU"
        elif step.budget:
            took, budget, unit = row["seconds"], step.budget, ""
        else:
            continue
        if took > BUDGET_SLACK * budget * scale:
            late.append(f"tier '{row['name']}' took {took:.0f}{unit} s, over {BUDGET_SLACK} x its warm budget "
                        f"of {budget:.0f}{unit} s{slower} (tests/tiers.py STEPS); "
                        f"see .dtr/timings/{row['name']}.json for its modules")
    return late


def test_counts(doc: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for tier in doc["tiers"].values():
        for outcome, n in tier.get("outcomes", {}).items():
            counts[outcome] = counts.get(outcome, 0) + n
    return counts


def slowest_tests(doc: dict[str, Any], count: int = 10, key: str = "slowest") -> list[list[Any]]:
    """The `count` slowest tests across every tier, [tier, node id, seconds]; with key "hungriest", those that took
    the most CPU seconds (tests/plugins/tier_timings.py: the tier's own processes, not a node's pods)."""
    found = [[tier, test, seconds] for tier, t in doc["tiers"].items() for test, seconds in t.get(key, [])]
    return sorted(found, key=lambda f: -f[2])[:count]


def print_table(doc: dict[str, Any]) -> None:
    steps = {s.name: s for s in STEPS}
    say(f"where the time went ({'warm' if doc['warm'] else 'cold: builds ran, budgets not enforced'})")
    print(f"{'step':22} {'start':>6} {'seconds':>8} {'budget':>7} {'tests':>6} {'cpu s':>6} {'budget':>7} "
          f"{'cpu busy':>8}  result")  # fmt: skip
    for row in doc["steps"]:
        tests = sum((doc["tiers"].get(row["name"]) or {}).get("outcomes", {}).values())
        step = steps.get(row["name"])
        budget, cpu_budget = (step.budget, step.cpu_budget) if step else (None, None)
        busy = f"{row['cpu busy']:.0%}" if "cpu busy" in row else ""
        cpu = f"{row['cpu seconds']:.0f}" if "cpu seconds" in row else ""
        result = {0: "ok", None: "not run"}.get(row["rc"], f"exit {row['rc']}")
        start = f"{int(row['start']) // 60}:{int(row['start']) % 60:02d}" if "start" in row else ""
        print(f"{row['name']:22} {start:>6} {row['seconds']:8.0f} {budget or '':>7} "
              f"{tests or '':>6} {cpu:>6} {cpu_budget or '':>7} {busy:>8}  {result}")  # fmt: skip
    print(f"{'total':22} {'':>6} {doc['seconds']:8.0f}")
    if disk := doc.get("disk"):
        print(f"disk: {disk['free at start GB']} GB free at the start, at most {disk['used at most GB']} GB used")
    if line := machine_line(doc.get("machine") or {}):
        print(f"machine: {line}")
    if slow := doc.get("slowest") or slowest_tests(doc):
        print("\nslowest tests (set-up, call, teardown; shared fixtures aside):")
        for tier, test, seconds in slow:
            print(f"{seconds:8.0f} s  {tier:14} {test}")
    if hungry := doc.get("hungriest") or slowest_tests(doc, key="hungriest"):
        print("\nthe most CPU (the tier's processes and those they waited for, not a node's pods):")
        for tier, test, seconds in hungry:
            print(f"{seconds:8.0f} s  {tier:14} {test}")
    counts = test_counts(doc)
    # The plain closing line CI reads: every tier's tests in one count.
    print(f"\ntests: {counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed, "
          f"{counts.get('skipped', 0)} skipped")


def machine_line(machine: dict[str, Any]) -> str:
    """The run's machine in words: its probe (lower is faster) and what the hypervisor stole ('' when unmeasured)."""
    said = []
    if "probe median s" in machine:
        said.append(f"probe {machine['probe median s']:.3f} CPU s (median of {machine['probes']}, "
                    f"{machine['probe min s']:.3f} to {machine['probe max s']:.3f}; lower is faster)")
    if "stolen" in machine:
        said.append(f"{machine['stolen']:.1%} of the CPU time stolen")
    return ", ".join(said)


def stop_clusters() -> None:
    """What the run started for every tier: the shared node and the several nodes, whatever happened."""
    if (NODE_DIR / "node").is_dir():
        say("node stop")
        subprocess.run(NODE_DOWN, cwd=REPO, check=False)
    if (CLUSTER_DIR / "nodes").is_dir():
        say("multinode stop")
        subprocess.run(CLUSTER_DOWN, cwd=REPO, check=False)


def run_steps(run: Run, warm: bool) -> None:
    """The run's steps in its slots, in the order the recorded runs' seconds suggest (docs/ci-costs.json)."""
    costs = json.loads(COSTS.read_text()) if COSTS.exists() else {}
    try:
        expected = expected_seconds(costs, warm)
        run_slots(run, critical_paths(run.chosen, expected), expected)
    except KeyboardInterrupt:
        stop_everything(run)
        raise


def run_all(only: set[str], skip: set[str], slots: int = SLOTS) -> int:
    TIMINGS.mkdir(parents=True, exist_ok=True)
    for old in (*TIMINGS.glob("*.json"), *TIMINGS.glob("*.log")):
        old.unlink()
    for old in (REPO / ".dtr" / "reliability").glob("results*.json"):
        old.unlink()  # this run's two reliability parts merge into a fresh ledger
    chosen = [s for s in STEPS if (not only or s.name in only) and s.name not in skip]
    run = Run(chosen, slots)
    run.free_at_start = run.least_free = free_gb()
    warm_expected = expect_warm()
    if not only and not skip and (short := disk_shortfall(run.free_at_start, warm_expected)):
        print(f"\nNOT STARTED: {short}", file=sys.stderr)
        return 1
    before = build_state()
    docker_was_installed = shutil.which("dockerd") is not None
    finished = threading.Event()
    run.stolen_at_start = stolen_jiffies()
    threading.Thread(target=watch_disk, args=(run, finished), daemon=True).start()
    threading.Thread(target=watch_speed, args=(run, finished), daemon=True).start()
    try:
        run_steps(run, warm_expected)
    finally:
        finished.set()
        stop_clusters()
    warm = docker_was_installed and build_state() == before
    doc = summary(run, warm)
    (TIMINGS / "run.json").write_text(json.dumps(doc, indent=1) + "\n")
    print_table(doc)
    if (failed := run.first_failure()) is not None:
        print(f"\nFAILED: step '{failed.step.name}' exited {failed.rc} (its output: {TIMINGS / failed.step.name}.log)",
              file=sys.stderr)
        return failed.rc or 1
    late = over_budget(doc) if warm else []
    for sentence in late:
        print(f"\nOVER BUDGET: {sentence}", file=sys.stderr)
    return 1 if late else 0


def record(kind: str) -> int:
    """Keep the last run's figures as the committed cold or warm measurement (then `make docs`)."""
    try:
        doc = json.loads((TIMINGS / "run.json").read_text())
    except (OSError, ValueError) as err:
        print(f"no run to record in {TIMINGS} ({err.__class__.__name__}): run `make test` first", file=sys.stderr)
        return 2
    if doc["warm"] != (kind == "warm"):
        print(f"the last run was {'warm' if doc['warm'] else 'cold'}, not {kind}", file=sys.stderr)
        return 2
    doc["steps"] = [with_parts(row) for row in doc["steps"]]  # a run.json from before parts were noted
    doc.setdefault("slowest", slowest_tests(doc))  # ... and before the slowest ten were
    costs = json.loads(COSTS.read_text()) if COSTS.exists() else {}
    costs[kind] = doc
    COSTS.write_text(json.dumps(costs, indent=1) + "\n")
    print(f"{COSTS}: {kind} = the run of {doc['date']} at {doc['commit']}; now run `make docs`")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests/tiers.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the steps (make test)")
    names = [s.name for s in STEPS]
    run.add_argument("--only", nargs="+", default=[], choices=names, metavar="STEP", help=f"of: {', '.join(names)}")
    run.add_argument("--skip", nargs="+", default=[], choices=names, metavar="STEP")
    run.add_argument("--slots", type=int, default=SLOTS, help=f"steps at once (default {SLOTS})")
    rec = sub.add_parser("record", help="copy .dtr/timings/run.json into docs/ci-costs.json")
    rec.add_argument("kind", choices=("cold", "warm"))
    args = parser.parse_args(argv)
    if args.command == "record":
        return record(args.kind)
    return run_all(set(args.only), set(args.skip), max(1, args.slots))


if __name__ == "__main__":
    sys.exit(main())
