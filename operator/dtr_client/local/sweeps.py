"""`dtr run sweep.yaml`: a DistTrainingSweep's trials as local runs (each a `dtr run` of its own, through
LocalBackend), decided by the operator's own pure core (dtr_operator.sweep): the same points, the same median rule,
the same status. The sweep's status is written to DIR/sweeps/<name>/status.json at each change. A trial's curve
is its history file's (every epoch, read at each turn), where a cluster's is what the operator's reads of the
chief's log saw: a local epoch is often shorter than a turn.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dtr_operator.sweep.decide import TERMINAL, SweepSpec, decide, parse_sweep
from dtr_operator.sweep.observe import MAX_POINTS, fold, refused, trial_run, trials, written

from ..results import InvalidRun, RunNotFound
from ..sweeps import sweep_document
from .backend import LocalBackend

POLL_SECONDS = 1.0
STATUS = "status.json"


def local_trial(doc: Mapping[str, Any], index: int, point: Mapping[str, Any]) -> dict[str, Any]:
    """The trial's run as `dtr run` takes it: the cluster's trial run without its owner (nothing collects it here)."""
    run = trial_run({**doc, "metadata": {**doc["metadata"], "uid": "local"}}, index, point)
    run["metadata"].pop("ownerReferences", None)
    run["metadata"].pop("namespace", None)
    return run


class LocalSweep:
    def __init__(self, doc: Mapping[str, Any], backend: LocalBackend):
        try:
            self.spec: SweepSpec = parse_sweep(doc.get("spec") or {})
        except (TypeError, ValueError) as err:  # space.SpaceError is a ValueError
            raise InvalidRun(str(err)) from None
        self.doc, self.backend = dict(doc), backend
        self.name = str(doc["metadata"]["name"])
        self.status: dict[str, Any] = {}
        self.dir = backend.base_dir / "sweeps" / self.name

    def _runs(self, records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
        found = {}
        for record in records:
            try:
                found[int(record["index"])] = {"status": self.backend.status(record["run"])}
            except RunNotFound:
                continue
        return found

    def _with_history(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record with its curve from the trial's history file (every epoch), while it has one to give."""
        if record.get("phase") in ("", "Stopped", "Failed"):
            return record
        try:
            found = self.backend.history(record["run"])
        except RunNotFound:
            return record
        curve = [[p.epoch, p.metrics[self.spec.metric]] for p in found if self.spec.metric in p.metrics]
        return {**record, "curve": curve[:MAX_POINTS]} if curve else record

    def _create(self, indexes: tuple[int, ...]) -> None:
        """The trials' local runs, each with the point its record holds; one `dtr run` refuses fails its trial."""
        points = {t["index"]: t.get("point") or {} for t in self.status["trials"]}
        for index in indexes:
            run = local_trial(self.doc, index, points[index])
            try:
                self.backend.create(run, None)
            except InvalidRun as err:
                self.status["trials"] = refused(self.status["trials"], run["metadata"]["name"], str(err))

    def turn(self) -> bool:
        """One turn: fold, decide, write, act; True once the sweep has ended."""
        records = self.status.get("trials") or []
        runs = self._runs(records)
        records = [self._with_history(r) for r in fold(records, runs, self.spec.metric)]
        decision = decide(self.spec, trials(records))
        self.status = written(self.spec, self.name, records, decision, runs)
        self._create(decision.create)
        for run, _ in decision.stop:  # suspended, not deleted: its log and status stay for dtr compare and logs
            self.backend.set_suspend(run, True)
        return decision.phase in TERMINAL

    def run(self, on_change: Callable[[dict[str, Any]], None], poll: float = POLL_SECONDS) -> dict[str, Any]:
        """Turns until the sweep ends; its final status. on_change gets each status that differs from the last."""
        self.dir.mkdir(parents=True, exist_ok=True)
        last: dict[str, Any] = {}
        while True:
            ended = self.turn()
            if self.status != last:
                (self.dir / STATUS).write_text(json.dumps(self.status, indent=1) + "\n")
                on_change(self.status)
                last = json.loads(json.dumps(self.status))
            if ended:
                return self.status
            time.sleep(poll)

    def stop(self) -> None:
        """Every trial still running stopped (Ctrl-C): their processes go, their directories stay."""
        for record in self.status.get("trials") or []:
            if record.get("phase") not in (*TERMINAL, "Stopped"):
                try:
                    self.backend.set_suspend(record["run"], True)
                except RunNotFound:
                    continue


def run_sweep_file(path: Path, base_dir: Path, python: str, on_change: Callable[[dict[str, Any]], None],
                   host_network: bool = False) -> int:  # fmt: skip
    """`dtr run sweep.yaml`: 0 when the sweep Succeeded, 1 when it Failed; InvalidRun for a spec it cannot run."""
    doc = sweep_document(path)  # a DistTrainingSweep with a name, else InvalidRun (exit 2), as `dtr sweep start`
    sweep = LocalSweep(doc, LocalBackend(base_dir, python, host_network))
    try:
        final = sweep.run(on_change)
    finally:
        sweep.stop()
    return 0 if final.get("phase") == "Succeeded" else 1
