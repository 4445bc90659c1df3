"""The TensorBoard pod (transfer.tensorboard_pod) as the real API server's PodSecurity admission judges it: admitted
in a namespace that enforces `restricted`; the same pod without its container securityContext is refused (so
enforcement is on). Serving and the port-forward need a kubelet: tests/node/test_tensorboard.py."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

from dtr_client import transfer as tr
from dtr_operator.spec import parse_run

from support.cluster import Cluster
from support.runs import run_doc

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/enforce-version": "latest"}


def dry_run(control_plane: Cluster, doc: dict[str, Any]) -> Any:
    return control_plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False)


def test_the_tensorboard_pod_is_admitted_under_restricted_and_a_weakened_one_is_not(control_plane: Cluster) -> None:
    namespace = f"t-board-{uuid.uuid4().hex[:6]}"
    control_plane.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace,
                                                                                "labels": RESTRICTED}})  # fmt: skip
    try:
        run = parse_run(run_doc("board", namespace, {"workers": 1}, uid=str(uuid.uuid4())))
        pod = tr.tensorboard_pod(run, tr.pod_name(tr.TENSORBOARD, run.name, "abc123"))
        accepted = dry_run(control_plane, pod)
        assert accepted.returncode == 0, accepted.stderr
        weakened = copy.deepcopy(pod)
        del weakened["spec"]["containers"][0]["securityContext"]
        refused = dry_run(control_plane, weakened)
        assert refused.returncode != 0 and 'violates PodSecurity "restricted' in refused.stderr, refused.stderr
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
