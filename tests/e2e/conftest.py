"""End-to-end tests of `dtr run` (no cluster): the README's main job, real TF worker processes.

Runs on a cluster are the real-node tier's (tests/node).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
