"""The images tier: tests/cluster's helpers (free ports) on the path, as the other tiers have them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
