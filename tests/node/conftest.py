"""The real-node tier: control plane + a real node (containerd, kubelet, CoreDNS, local-path) +
the training-operator and this project's operator as pods from their images (deploy/install.sh).

- `real_node` (session): starts both in a temp dir and installs everything, or, with
  DTR_NODE_DIR=<dir of `python tests/cluster/node.py up --dir DIR`>, uses that running node and
  installs into it (fast iteration).
- `namespace` (per test): a fresh namespace that enforces Pod Security `restricted`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from node_support import RealNode, restricted_namespace, start_real_node


@pytest.fixture(scope="session")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    with start_real_node(tmp_path_factory.mktemp("real-node")) as node:
        yield node


@pytest.fixture
def namespace(real_node: RealNode, request: pytest.FixtureRequest) -> Iterator[str]:
    with restricted_namespace(real_node, request.node.name) as name:
        yield name


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failed test, show the operator's log and the node's pods (what a user would look at)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    node = item.funcargs.get("real_node") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and isinstance(node, RealNode):
        report.sections.append(("real node", node.diagnostics()))
