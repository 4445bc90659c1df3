"""Integration tests run on a real local control plane (devcluster, docs/cluster.md), with the fixtures of
tests/conftest.py: `control_plane` (session; DTR_KUBECONFIG=<file> reuses a running cluster) and `namespace`
(per test). Here: `operator`, the operator for the test's namespace, in this process.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.cluster import Cluster
from support.operator import Operator


@pytest.fixture
def operator(control_plane: Cluster, namespace: str) -> Iterator[Operator]:
    op = Operator(namespace)
    op.start()
    try:
        yield op
    finally:
        op.stop()
