"""The multi-node tier: the control plane and three real nodes (devcluster/cluster.py), each in its own network
namespace with its own containerd, kubelet, kube-proxy, NetworkPolicy engine and flannel, the training-operator
and this project's operator installed as on any cluster.

- `multinode` (session, support.multinode): starts the cluster in a temp dir, or, with
  DTR_CLUSTER_DIR=<dir of `python -m devcluster.cluster up --dir DIR`>, uses that one (tests/tiers.py does).
- `namespace` (per test): Pod Security `restricted`, as a run's; `plain_namespace`: none, for busybox probes.
- `s3_server` (per module, support.multinode.S3): the S3 server as a pod (Cluster.install_s3), its endpoint allowed
  by the operator; skipped, saying why, without its image (`make s3-build`), failed instead under DTR_S3_REQUIRED=1.
  `s3_keys` (per test): its keys in a Secret of the test's namespace.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.multinode import (  # noqa: F401  (the tier's fixtures)
    MultiNode,
    multinode,
    namespace,
    plain_namespace,
    powered_back,
    s3_keys,
    s3_server,
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failed test, show where every pod ran and the operator's log."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    cluster = item.funcargs.get("multinode") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and isinstance(cluster, MultiNode):
        pods = cluster.cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
        nodes = cluster.cluster.kubectl("get", "nodes", "-o", "wide", check=False).stdout
        report.sections.append(("cluster", f"{nodes}\n{pods}\n{cluster.real.diagnostics()}"))
        report.sections.append(("network", cluster.network()))
