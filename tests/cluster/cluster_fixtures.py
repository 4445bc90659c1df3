"""pytest fixtures on a real local control plane (see docs/cluster.md).

- `control_plane` (session): starts tests/cluster/controlplane.py in a temp dir, sets KUBECONFIG,
  yields a `Cluster`, stops it at the end. With DTR_KUBECONFIG set, uses that cluster instead.
- `namespace` (function): a fresh namespace per test, deleted afterwards.

A test directory's conftest.py uses them with:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
    from cluster_fixtures import control_plane, namespace  # noqa: F401
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import ControlPlane, ControlPlaneError

KUBECTL = os.environ.get("DTR_KUBECTL") or shutil.which("kubectl") or "/usr/bin/kubectl"
T = TypeVar("T")


@dataclass(frozen=True)
class Cluster:
    """A kubeconfig to talk to, and the control plane's directory (None for an external cluster)."""

    kubeconfig: Path
    dir: Path | None

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; with check, a failure fails the test with kubectl's stderr."""
        proc = subprocess.run(
            [KUBECTL, f"--kubeconfig={self.kubeconfig}", *args],
            input=input, capture_output=True, check=False, text=True, timeout=timeout,
        )  # fmt: skip
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}", pytrace=False)
        return proc

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def create(self, doc: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("create", "-f", "-", input=json.dumps(doc), check=check)

    def as_token(self, token: str, where: Path) -> Cluster:
        """The same cluster seen by a bearer token only (no client certificate to fall back on)."""
        admin = self.kubectl_json("config", "view", "--raw", "--minify")
        cluster = admin["clusters"][0]["cluster"]
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
        path = where / f"kubeconfig-token-{uuid.uuid4().hex[:6]}"
        path.write_text(json.dumps(doc))
        path.chmod(0o600)
        return Cluster(path, self.dir)


def wait_for(probe: Callable[[], T], what: str, timeout: float = 60, interval: float = 0.25) -> T:
    """Poll until probe() returns something truthy; fail the test naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}", pytrace=False)
        time.sleep(interval)


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


def namespace_name(test_name: str) -> str:
    """A valid, unique namespace name derived from the test's name."""
    stem = re.sub(r"[^a-z0-9-]+", "-", test_name.lower().removeprefix("test_")).strip("-")[:40].rstrip("-")
    return f"t-{stem}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(control_plane: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = namespace_name(request.node.name)
    control_plane.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        # The namespace controller finishes the deletion; no need to hold the test for it.
        control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
