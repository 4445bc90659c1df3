"""The real-node tier: control plane + a real node (containerd, kubelet, CoreDNS, local-path) +
the training-operator and this project's operator as pods from their images (deploy/install.sh).

- `real_node` (session, support.node): starts both in a temp dir and installs everything, or, with
  DTR_NODE_DIR=<dir of `python -m devcluster.node up --dir DIR`>, uses that running node and
  installs into it (fast iteration).
- `namespace` (per test, support.node): a fresh namespace that enforces Pod Security `restricted`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.node import RealNode, node_namespace, real_node  # noqa: F401  (the tier's fixtures)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failed test, show the operator's log and the node's pods (what a user would look at)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    node = item.funcargs.get("real_node") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and isinstance(node, RealNode):
        report.sections.append(("real node", node.diagnostics()))
