"""Reliability and security suite (issue 6): bad input, generated specs, faults, Pod Security.

Fixtures:
- `control_plane`, `namespace`: the shared real control plane (tests/cluster/cluster_fixtures.py).
- `ledger` (session): every test records what it tried and what survived; at the end of the session
  the records go to $DTR_RELIABILITY_RESULTS (default .dtr/reliability/results.json), from which
  `python tests/reliability/report.py` writes docs/reliability.md.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "cluster"))
sys.path.insert(0, str(HERE))

from cluster_fixtures import control_plane, namespace  # noqa: F401
from ledger import Ledger, results_path


@pytest.fixture(scope="session")
def ledger() -> Iterator[Ledger]:
    book = Ledger()
    yield book
    book.save(results_path())
