"""Integration tests run on a real local control plane (tests/cluster/, docs/cluster.md).

The fixtures live in tests/cluster/cluster_fixtures.py so tests/e2e can import them the same way:
`control_plane` (session; DTR_KUBECONFIG=<file> reuses a running cluster) and `namespace` (per test).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))

from cluster_fixtures import control_plane, namespace  # noqa: F401
from operator_support import operator  # noqa: F401
