"""Reliability and security suite (issue 6): bad input, generated specs, faults, Pod Security.

Fixtures:
- `control_plane`, `namespace`: the shared real control plane (tests/conftest.py).
- `ledger` (session): every test records what it tried and what survived; at the end of the session
  the records go to $DTR_RELIABILITY_RESULTS (default .dtr/reliability/results.json), from which
  `python tests/reliability/report.py` writes docs/reliability.md.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ledger import Ledger, results_path


@pytest.fixture(scope="session")
def ledger() -> Iterator[Ledger]:
    book = Ledger()
    yield book
    book.save(results_path())


_started: dict[str, float] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    import time

    _started["at"] = time.time()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Beside the records: how the session went (the report shows it, so a red run is not hidden)."""
    import json
    import time

    results = results_path()
    if not session.testscollected or not results.exists() or results.stat().st_mtime < _started.get("at", 0):
        return  # this session recorded nothing (e.g. only the report's unit tests ran)
    meta = {
        "started": _started.get("at"),
        "seconds": round(time.time() - _started.get("at", time.time()), 1),
        "collected": session.testscollected,
        "failed": session.testsfailed,
        "exitstatus": int(exitstatus),
        "selection": " ".join(session.config.invocation_params.args),
    }
    # One entry per session since the results were reset: make test runs the suite in two parts, the node
    # faults apart on the shared node (tests/tiers.py), and the report covers both.
    path = results.with_suffix(".session.json")
    try:
        sessions = json.loads(path.read_text())
    except (OSError, ValueError):
        sessions = []
    sessions = sessions if isinstance(sessions, list) else [sessions]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([*sessions, meta], indent=1) + "\n")
