"""End-to-end fixtures: the real control plane (tests/cluster), the process node, the operator.

- `control_plane`, `namespace`: from tests/cluster/cluster_fixtures.py (as tests/integration uses them).
- `node` (session): `python -m dtr_operator.local.node` as a subprocess, Ready before tests start.
- `operator` (per test): `dtr operator --namespace <the test's namespace>` as a subprocess, so a
  test can SIGKILL and restart its own operator without touching the others.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster_fixtures
from cluster_fixtures import Cluster, wait_for
from dtr_operator.local import devcluster
from e2e_support import NODE_NAME, Node, Operator

# The shared fixtures, registered in this conftest by name.
control_plane = cluster_fixtures.control_plane
namespace = cluster_fixtures.namespace


def _env(cluster: Cluster) -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}


@pytest.fixture(scope="session")
def node(
    control_plane: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Node]:
    state = tmp_path_factory.mktemp("node")
    argv = devcluster.node_argv(control_plane.kubeconfig, state, NODE_NAME)
    handle = Node(argv, state / "node.log", _env(control_plane), state_dir=state)
    handle.start()

    def ready() -> bool:
        if not handle.alive():
            pytest.fail(f"the process node exited:\n{handle.tail()}", pytrace=False)
        jsonpath = '{.status.conditions[?(@.type=="Ready")].status}'
        got = control_plane.kubectl(
            "get", "node", NODE_NAME, "-o", f"jsonpath={jsonpath}", check=False
        )
        return got.returncode == 0 and got.stdout.strip() == "True"

    wait_for(ready, "the process node to register", timeout=60)
    yield handle
    code = handle.stop()
    assert code == 0, f"the node did not stop cleanly ({code}):\n{handle.tail()}"


@pytest.fixture
def operator(
    control_plane: Cluster, namespace: str, tmp_path: Path
) -> Iterator[Operator]:
    port = devcluster.free_port()
    argv = devcluster.operator_argv(port, [namespace])
    handle = Operator(argv, tmp_path / "operator.log", _env(control_plane), port=port)
    handle.start_healthy()
    yield handle
    handle.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[None]:
    """Keep each phase's report on the test item, so a fixture can tell that the test failed."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)
