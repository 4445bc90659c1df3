"""Every status key the operator writes or reads is declared in status_fields.py, and written by whom it says.

The pure writers (status.py, watchdog.py) are driven through the lives of runs, built from the TFJobs, pods and
runs of test_status.py and the chief's log of test_progress.py, each step as reconcile.context.Context.record calls
them: compute(previous), its change merged into the status. Every key path of every output must be declared, and
each changed field written by a writer its `by` names. The readers (dtr_client.results, metrics.py,
progress_schedule.py) then read every status so written (and each again with the objects it lacks there and empty),
through a Mapping that records each key asked for, present or not, as the writers read theirs: every key read must be
declared too; and the string keys those readers spell must be names the table declares. Milliseconds.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dtr_client.results import RunStatus
from dtr_operator import disruption, metrics, netpolicy, progress_schedule, reasons, status_fields, watchdog
from dtr_operator.spec import RunSpec, WatchdogSpec, parse_run
from dtr_operator.status.code import code_status
from dtr_operator.status.compute import next_status, state_status, tfjob_status, unparsed_status
from dtr_operator.status.progress import parse_epoch_end, running_progress
from dtr_operator.status.state import State
from dtr_operator.status.waiting import waiting_status

from support.runs import make_run
from support.tfjobs import (
    CHIEF_LOG,
    CONDITIONS,
    DONE_PODS,
    QUEUED_RUN,
    RUN,
    SHORT_PODS,
    SUSPENDED_RUN,
    T0,
    T1,
    T2,
    cond,
    disrupted,
    pod,
    tfjob,
    waiting_pod,
)

Keys = tuple[str, ...]  # a path from the status down; "[]" for an array's items


# ---- seeing what is read and written -----------------------------------------------------------------------------


class Traced(Mapping[str, Any]):
    """A status, or an object in it, that records in `read` the path of every key asked for, there or not (get, [],
    in); what it holds comes back traced too."""

    def __init__(self, data: Mapping[str, Any], path: Keys, read: set[Keys]):
        self.data, self.path, self.read = data, path, read

    def __getitem__(self, key: str) -> Any:
        self.read.add((*self.path, key))
        return traced(self.data[key], (*self.path, key), self.read)

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def traced(value: Any, path: Keys, read: set[Keys]) -> Any:
    if isinstance(value, Mapping):
        return Traced(value, path, read)
    if isinstance(value, list):
        return [traced(v, (*path, "[]"), read) for v in value]
    return value


def plain(value: Any) -> Any:
    """A writer's output without the Traced objects it carried over from the previous status (not read again)."""
    if isinstance(value, Traced):
        return plain(value.data)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return [plain(v) for v in value] if isinstance(value, list) else value


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path, value) of every value that holds no key, a list's items by their index."""
    if isinstance(value, Mapping) and value:
        for key, sub in value.items():
            yield from leaves(sub, (*path, key))
    elif isinstance(value, list) and value:
        for index, sub in enumerate(value):
            yield from leaves(sub, (*path, index))
    else:
        yield path, value


def declared_path(path: tuple[Any, ...]) -> Keys:
    """A path with each list index as "[]", as status_fields spells it."""
    return tuple("[]" if isinstance(key, int) else key for key in path)


def shown(path: Keys) -> str:
    return ".".join(path).replace(".[]", "[]")


def undeclared(paths: set[Keys]) -> set[str]:
    return {shown(p) for p in paths if status_fields.find(p) is None}


# ---- the lives of runs -------------------------------------------------------------------------------------------


_ABSENT = object()


@dataclass(frozen=True)
class Written:
    """One writer's output, and the status it was given."""

    writer: str
    previous: dict[str, Any]
    output: dict[str, Any]

    def paths(self) -> set[Keys]:
        return {declared_path(p) for p, _ in leaves(self.output) if p}

    def changed(self) -> set[Keys]:
        """The paths whose value the writer set (a key it carried over unchanged is not its)."""
        before = dict(leaves(self.previous))
        return {declared_path(p) for p, v in leaves(self.output) if p and before.get(p, _ABSENT) != v}


@dataclass
class Life:
    """A run's status through the writers, as Context.record calls them: compute(previous), and what changed merged
    into the status (status.next_status: a finished run's never). Keeps what each wrote, and every key read."""

    status: dict[str, Any] = field(default_factory=dict)
    written: list[Written] = field(default_factory=list)
    read: set[Keys] = field(default_factory=set)
    statuses: list[dict[str, Any]] = field(default_factory=list)

    def step(self, writer: str, compute: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> dict[str, Any]:
        output = plain(compute(traced(self.status, (), self.read)))
        self.written.append(Written(writer, self.status, output))
        self.status = {**self.status, **(next_status(self.status, output) or {})}
        self.statuses.append(self.status)
        return self.status


STARTED = T1  # the Running condition's time in the lives below: the workers' start, for the watchdog
WATCH = WatchdogSpec(stall_factor=5, min_stall_seconds=60)
RESTART = WatchdogSpec(stall_factor=5, min_stall_seconds=60, on_stall="Restart", max_restarts=1)
END = parse_epoch_end(CHIEF_LOG)  # epoch 2 of 8, with its figures


def after(seconds: float) -> str:
    start = watchdog.parse_time(STARTED)
    assert start is not None
    return watchdog.format_time(start + timedelta(seconds=seconds))


def tfjob_step(life: Life, run: RunSpec, job: dict[str, Any], pods: list[Any], now: str) -> None:
    life.step("status.compute.tfjob_status", lambda prev: tfjob_status(run, job, pods, prev, now))


def running_job(active: int = 2) -> dict[str, Any]:
    return tfjob([cond("Created"), cond("Running")], active=active, start=T1)


def running_life() -> Life:
    """A run from before its TFJob to all its workers running, by way of pods that cannot start."""
    life = Life()
    waiting = State(reasons.PENDING, reasons.WAITING_FOR_PVC, "waiting for PVC shared in namespace ml")
    life.step("status.compute.state_status", lambda prev: state_status(RUN, waiting, prev, T0))
    tfjob_step(life, RUN, tfjob(), [], T0)
    life.step("status.code.code_status", lambda prev: {"code": code_status("mnist-cnn-code", "model.py", b"x = 1\n")})
    tfjob_step(life, RUN, tfjob([cond("Created")]), [], T0)
    life.step("status.waiting.waiting_status",
              lambda prev: waiting_status(RUN, [waiting_pod(0, "ErrImagePull", "not found")], prev, T0))  # fmt: skip
    tfjob_step(life, RUN, running_job(active=1), [], T1)
    life.step("status.waiting.waiting_status",
              lambda prev: waiting_status(RUN, SHORT_PODS, prev, T1, ["the training-operator cannot create them"]))
    tfjob_step(life, RUN, running_job(), [], T1)
    return life


def epoch(life: Life, number: int, seconds: float) -> None:
    """The progress poll's step for an epoch the chief logged `seconds` after the start."""
    life.step("status.progress.running_progress", lambda prev: running_progress(prev, END, after(seconds)))
    life.step("watchdog.with_epoch", lambda prev: watchdog.with_epoch(prev, number, after(seconds)))


def flag(life: Life, watch: WatchdogSpec, seconds: float) -> watchdog.Flag:
    """The stall watchdog's step at `seconds` after the start, which must find the run stalled."""
    step = watchdog.decide(watch, life.status, after(seconds))
    assert isinstance(step, watchdog.Flag), step
    assert isinstance(step.verdict, watchdog.Stalled)
    message = watchdog.stall_message(step.verdict, ["mnist-cnn-worker-1"], 2)
    life.step("watchdog.flagged_status",
              lambda prev: watchdog.flagged_status(prev, step, message, after(seconds), RUN.generation))  # fmt: skip
    return step


def stalled_and_succeeded() -> Life:
    """Epochs, a stall reported, a TFJob event over its message, an epoch that clears it, another stall, success."""
    life = running_life()
    for number, seconds in ((1, 30), (2, 60), (3, 90)):
        epoch(life, number, seconds)
    flag(life, WATCH, 500)
    tfjob_step(life, RUN, running_job(), [], after(510))
    step = watchdog.decide(WATCH, life.status, after(520))
    assert isinstance(step, watchdog.Remind)
    life.step("watchdog.reminded_status", lambda prev: watchdog.reminded_status(prev, step.message))
    epoch(life, 4, 600)
    assert watchdog.decide(WATCH, life.status, after(605)) == watchdog.Clear()
    life.step("watchdog.cleared_status", lambda prev: watchdog.cleared_status(prev, after(605), RUN.generation))
    flag(life, WATCH, 2000)
    done = tfjob([cond("Created"), cond("Succeeded")], succeeded=2, start=T1, completion=after(2100))
    tfjob_step(life, RUN, done, DONE_PODS, after(2100))
    life.step("watchdog.settled", lambda prev: watchdog.settled(prev, after(2100), RUN.generation))
    return life


def restarted_then_failed() -> Life:
    """onStall Restart: a stall restarts the workers (the TFJob suspended and resumed), the next one fails the run."""
    life = running_life()
    epoch(life, 1, 30)
    flag(life, RESTART, 500)
    tfjob_step(life, RUN, tfjob([cond("Created"), cond("Suspended")]), [], after(510))
    life.step("watchdog.restarted_status", watchdog.restarted_status)
    tfjob_step(life, RUN, running_job(), [], after(520))
    step = flag(life, RESTART, 5000)
    assert step.fail
    failed = State(reasons.FAILED, reasons.STALLED, "stalled, no restart left")
    life.step("status.compute.state_status", lambda prev: state_status(RUN, failed, prev, after(5000)))
    return life


def failures() -> list[Life]:
    """Runs that fail: workers' exits and their lines, a worker Kubernetes took away, the run's own code, a
    diverged loss, a name already taken, a spec that cannot be read."""
    lives = []
    for pods in (
        [pod(0, running=True, last_exit=137, last_message="Killed"), pod(1, 2, "ValueError: unknown dataset")],
        [pod(0, 138, "lost a peer"), disrupted(1, "EvictionByEvictionAPI", "drained", running=True)],
        [pod(0, 8, "dtr_trainer[worker-0]: error: my_model.py:3 in load_data: ValueError: x")],
        [pod(0, 9, "dtr_trainer[worker-0]: error: training diverged: the loss became nan in epoch 2/8")],
    ):
        life = running_life()
        epoch(life, 1, 30)
        tfjob_step(life, RUN, tfjob([cond("Created"), cond("Failed", message="1 Worker replica(s) failed.")],
                                    active=1, failed=1, start=T1, completion=T2), pods, T2)  # fmt: skip
        lives.append(life)
    conflict, unreadable = Life(), Life()
    clash = State(reasons.FAILED, reasons.NAME_CONFLICT, "TFJob mnist-cnn exists and is not this run's")
    conflict.step("status.compute.state_status", lambda prev: state_status(RUN, clash, prev, T0))
    invalid = State(reasons.FAILED, reasons.INVALID_SPEC, "spec.workers: must be an integer")
    unreadable.step("status.compute.unparsed_status", lambda prev: unparsed_status(invalid, prev, T0, 3))
    unreadable.step("status.compute.unparsed_status", lambda prev: unparsed_status(invalid, prev, T1, None))
    return [*lives, conflict, unreadable]


RESUMED = parse_run(make_run({"workers": 2}, uid="u-1", generation=3))  # spec.suspend set (2), then cleared (3)


def suspended_and_queued() -> list[Life]:
    """spec.suspend and back; the same while its pods could not start, read by the waiting loop (generation 3)
    before the update handler mirrored it; a run queued in Kueue, admitted, preempted."""
    suspend, race, queue = running_life(), Life(), Life()
    epoch(suspend, 1, 30)
    held = tfjob([cond("Created"), cond("Suspended")])
    for run, job in ((SUSPENDED_RUN, running_job()), (SUSPENDED_RUN, held), (RESUMED, held),
                     (RESUMED, tfjob([cond("Created")]))):  # fmt: skip
        tfjob_step(suspend, run, job, [], T2)
    tfjob_step(race, RUN, tfjob([cond("Created")]), [], T1)
    stuck = [waiting_pod(0, "ImagePullBackOff", "back-off"), waiting_pod(1)]
    race.step("status.waiting.waiting_status", lambda prev: waiting_status(RESUMED, stuck, prev, T2))
    for job in (held, running_job(), held):
        tfjob_step(queue, QUEUED_RUN, job, [], T1)
    return [suspend, race, queue]


def every_tfjob_condition() -> list[Life]:
    """Each TFJob state the training-operator writes, for a run with no status yet; a success without a summary."""
    lives = []
    for conditions, *_ in CONDITIONS:
        life = Life()
        tfjob_step(life, RUN, tfjob(conditions, active=1), DONE_PODS, T1)
        lives.append(life)
    bare = Life()
    tfjob_step(bare, RUN, tfjob([cond("Succeeded")], succeeded=2), [pod(0, 0, "Epoch 3/3 done")], T1)
    return [*lives, bare]


def isolation() -> list[Life]:
    """Another NetworkPolicy admits the workers' port, then no more (IsolationWeakened True, False); a run whose own
    policy could not be held: suspended by the operator, the TFJob's events while it is, then resumed."""
    exposed, held = running_life(), running_life()
    open_to_all = ["NetworkPolicy open admits TCP 2222 from anywhere"]
    for lines in (open_to_all, open_to_all, []):
        exposed.step("netpolicy.exposed_status",
                     lambda prev, lines=lines: netpolicy.exposed_status(prev, lines, T2, RUN.generation))  # fmt: skip
    not_held = State(reasons.SUSPENDED, reasons.NETWORK_POLICY_NOT_HELD, "the API refused it", created=True)
    held.step("status.compute.state_status", lambda prev: state_status(RUN, not_held, prev, T2))
    suspended = {**tfjob([cond("Created"), cond("Suspended")]), "spec": {"runPolicy": {"suspend": True}}}
    for job in (suspended, tfjob([cond("Created"), cond("Suspended")]), running_job()):
        tfjob_step(held, RUN, job, [], T2)
    return [exposed, held]


def resumed_after_a_drain() -> Life:
    """A worker drained away at epoch 2: the run resumes (disruption.resuming_status), its TFJob made again runs."""
    life = running_life()
    epoch(life, 2, 30)
    failed = tfjob([cond("Created"), cond("Failed", message="1 Worker replica(s) failed.")], active=1, failed=1)
    pods = [pod(0, 138, "lost a peer"), disrupted(1, "EvictionByEvictionAPI", "drained", running=True)]
    plan = disruption.resume(RUN, life.status, failed, pods, [], T2)
    assert plan is not None
    life.step("disruption.resuming_status", lambda prev: disruption.resuming_status(RUN, plan, prev, T2))
    for job in (tfjob([cond("Created")]), running_job()):
        tfjob_step(life, RUN, job, [], T2)
    return life


def resumed_and_never_started() -> Life:
    """Resumed after its node was lost, its workers never scheduled again: failed past spec.disruption.waitSeconds."""
    life = running_life()
    failed = tfjob([cond("Created"), cond("Failed", message="2 Worker replica(s) failed.")], failed=2)
    pods = [disrupted(0, "DeletionByTaintManager", "", node="dtr-n1"), disrupted(1, "DeletionByTaintManager", "")]
    plan = disruption.resume(RUN, life.status, failed, pods, [], T2)
    assert plan is not None
    life.step("disruption.resuming_status", lambda prev: disruption.resuming_status(RUN, plan, prev, T2))
    tfjob_step(life, RUN, tfjob([cond("Created")]), [], T2)
    stuck = [waiting_pod(i, unschedulable="0/3 nodes are available: volume node affinity conflict") for i in (0, 1)]
    late = "2026-11-29T19:00:00Z"
    life.step("disruption.waited_status",
              lambda prev: disruption.waited_status(RUN, waiting_status(RUN, stuck, prev, late), prev, late))
    assert life.status["reason"] == "ResumeTimedOut", life.status
    return life


@pytest.fixture(scope="module")
def lives() -> list[Life]:
    return [stalled_and_succeeded(), restarted_then_failed(), *failures(), *suspended_and_queued(),
            *every_tfjob_condition(), *isolation(), resumed_after_a_drain(),
            resumed_and_never_started()]  # fmt: skip


# ---- the checks --------------------------------------------------------------------------------------------------


def test_every_key_a_writer_writes_is_declared(lives: list[Life]):
    missing = undeclared({p for life in lives for w in life.written for p in w.paths()})
    set_by = {path: sorted({w.writer for life in lives for w in life.written if path in map(shown, w.changed())})
              for path in missing}  # fmt: skip
    assert not missing, f"written but not declared in status_fields.py (path: the writers that set it): {set_by}"


def test_every_field_is_written_only_by_a_writer_it_names(lives: list[Life]):
    found = {f"{w.writer} wrote {shown(p)}, whose writers are {status_fields.writers(p)}"
             for life in lives for w in life.written for p in w.changed()
             if w.writer not in status_fields.writers(p)}  # fmt: skip
    assert not found


def test_every_field_is_seen_written_and_by_each_writer_it_names(lives: list[Life]):
    """A field declared and never written (a writer forgotten, or one that stopped writing it) fails here."""
    seen = {(w.writer, p) for life in lives for w in life.written for p in w.changed()}
    for path, f in status_fields.walk():
        keys = status_fields.keys(path)
        assert any(p[: len(keys)] == keys for _, p in seen), f"nobody writes {path}"
        for writer in f.by:
            assert any(w == writer and p[: len(keys)] == keys for w, p in seen), f"{writer} never wrote {path}"


def test_every_key_a_writer_reads_is_declared(lives: list[Life]):
    assert not undeclared({p for life in lives for p in life.read}), "read but not declared in status_fields.py"


def read_by_readers(status: Mapping[str, Any]) -> set[Keys]:
    """What dtr_client's RunStatus and Progress, the per-run metrics and the progress poll's schedule read of it."""
    read: set[Keys] = set()
    RunStatus.from_status("mnist-cnn", traced(status, (), read))
    metrics.run_figures({"metadata": {"creationTimestamp": T0}, "status": traced(status, (), read)})
    at = watchdog.parse_time(after(700))
    assert at is not None
    for last_read in (None, at):
        for watch in (WATCH, RESTART, WatchdogSpec(enabled=False)):
            progress_schedule.next_read(traced(status, (), read), watch, last_read, at, 5.0, 0.5)
    return read


def padded(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status with each object and array it lacks there and empty: what a reader reads under an object that is
    absent (`(status.get("watchdog") or {}).get(...)`) reads from a plain {} that no Traced sees."""
    empty = {f.name: [] if f.type == "array" else {} for f in status_fields.STATUS.fields if f.fields or f.items}
    return {**empty, **status}


def test_every_key_a_reader_reads_is_declared(lives: list[Life]):
    statuses = [variant for life in lives for status in life.statuses for variant in (status, padded(status))]
    read = {p for status in statuses for p in read_by_readers(status)}
    assert not undeclared(read), "read but not declared in status_fields.py"
    assert ("progress", "metrics", "[]", "value") in read and ("watchdog", "meanEpochSeconds") in read


READERS = ("dtr_client.results", "dtr_operator.metrics", "dtr_operator.progress_schedule")
# Keys those readers spell that are no status field's name: the run's metadata, and a key of the metrics map.
NOT_STATUS = {"metadata", "creationTimestamp", "accuracy"}


def spelled_keys(source: str) -> set[str]:
    """The keys a module spells as strings: `.get("key")` and `["key"]`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            key = node.args[0] if node.args else None
        else:
            key = node.slice if isinstance(node, ast.Subscript) else None
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.add(key.value)
    return found


@pytest.mark.parametrize("module", READERS)
def test_every_key_a_reader_spells_is_a_name_the_table_declares(module: str):
    """By name, in every branch: the reads above see paths, but only those of the branches the statuses take."""
    names = {f.name for _, f in status_fields.walk()}
    source = Path(importlib.import_module(module).__file__ or "").read_text()
    assert spelled_keys(source) - names - NOT_STATUS == set()


# ---- the checks catch what they are for ---------------------------------------------------------------------------


def test_a_key_read_is_seen_whether_it_is_there_or_not():
    read: set[Keys] = set()
    status = traced({"progress": {"metrics": [{"name": "loss"}]}}, (), read)
    assert status.get("phase") is None and "code" not in status
    assert status["progress"]["metrics"][0].get("unit") is None
    assert undeclared(read) == {"progress.metrics[].unit"}


def test_a_key_written_that_is_not_declared_is_caught():
    output = {"phase": "Running", "progress": {"epoch": 2}, "progressBar": "##--"}
    written = Written("status.progress.running_progress", {"phase": "Running"}, output)
    assert undeclared(written.paths()) == {"progressBar"}
    assert {shown(p) for p in written.changed()} >= {"progress.epoch", "progressBar"}
