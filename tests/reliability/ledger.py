"""What the reliability suite tried and what survived: records, merged into one JSON file.

One record per scenario (a corpus case, a batch of generated specs, a fault): the area, what was
tried, how many attempts, how many ended as they must, objects lost or duplicated, and what the user
sees. Records from several pytest sessions (e.g. `-k` selections) merge by (area, case): the newest
wins, so the JSON always holds the last result of every scenario.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def results_path() -> Path:
    return Path(os.environ.get("DTR_RELIABILITY_RESULTS") or REPO / ".dtr" / "reliability" / "results.json")


@dataclass
class Record:
    area: str  # invalid-input | generated-specs | fault | security
    case: str
    tried: int  # attempts (inputs sent, specs generated, faults injected)
    correct: int  # attempts that ended as they must
    lost: int = 0  # children that vanished without the run saying so
    duplicated: int = 0  # runs with more than one TFJob or PVC
    user_sees: str = ""  # what `kubectl get dtr` / the status message shows
    detail: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)


@dataclass
class Ledger:
    records: list[Record] = field(default_factory=list)

    def add(self, record: Record) -> Record:
        self.records.append(record)
        return record

    def save(self, path: Path) -> None:
        """Merged into the file under an exclusive lock: CI's steps save at once (the three nodes' tier beside the
        single node's faults), and a read-merge-write of each, unlocked, could keep only the other's records."""
        if not self.records:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            merged = {(r["area"], r["case"]): r for r in load(path)}
            for record in self.records:
                merged[(record.area, record.case)] = asdict(record)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(sorted(merged.values(), key=lambda r: (r["area"], r["case"])), indent=1) + "\n")
            tmp.replace(path)


def load(path: Path) -> list[dict[str, Any]]:
    try:
        return list(json.loads(path.read_text()))
    except (OSError, ValueError):
        return []
