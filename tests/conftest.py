"""Fixtures every tier can use; the helpers behind them are the package `support` (tests/support).

- `control_plane` (session): a real local control plane (devcluster, docs/cluster.md) in a temp dir,
  KUBECONFIG set to it, stopped at the end. With DTR_KUBECONFIG=<file>, that running cluster instead.
- `namespace` (per test): a fresh namespace on it, deleted afterwards. The real-node tiers override it
  with one on the real node (support.node).
- `volume` (per test): the run's volume as a local directory, for the trainer run as local processes
  (support.trainer).

Loaded by the trainer tier's Python 3.9 too: nothing here imports kopf or the kubernetes package.
`pythonpath` in the root pyproject.toml puts the repository root and tests/ on the path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster.controlplane import ControlPlane, ControlPlaneError
from support.cluster import Cluster, namespace_name
from support.trainer import Volume


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    previous = os.environ.get("KUBECONFIG")
    external = os.environ.get("DTR_KUBECONFIG")
    plane: ControlPlane | None = None
    if external:
        cluster = Cluster(Path(external).resolve(), None)
    else:
        plane = ControlPlane(tmp_path_factory.mktemp("control-plane"))
        try:
            plane.start()
        except ControlPlaneError as err:
            pytest.fail(f"the control plane did not start: {err}", pytrace=False)
        cluster = Cluster(plane.kubeconfig, plane.dir)
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    try:
        yield cluster
    finally:
        if plane is not None:
            plane.stop()
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous


@pytest.fixture
def namespace(control_plane: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = namespace_name(request.node.name)
    control_plane.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        # The namespace controller finishes the deletion; no need to hold the test for it.
        control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture
def volume(tmp_path: Path) -> Volume:
    return Volume(tmp_path / "mnt-dtr")
