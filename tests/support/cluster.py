"""A cluster as the tests talk to it: its kubeconfig and kubectl (see docs/cluster.md).

The fixtures that start one (`control_plane`, `namespace`) are in tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devcluster.controlplane import KUBECTL


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


@contextlib.contextmanager
def kubeconfig_set(path: Path) -> Iterator[None]:
    """KUBECONFIG names `path` inside, for the clients a test starts; as it was (or unset) after."""
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(path)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous


def namespace_name(test_name: str) -> str:
    """A valid, unique namespace name derived from the test's name."""
    stem = re.sub(r"[^a-z0-9-]+", "-", test_name.lower().removeprefix("test_")).strip("-")[:40].rstrip("-")
    return f"t-{stem}-{uuid.uuid4().hex[:6]}"
