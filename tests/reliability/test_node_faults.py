"""Faults of the node and of the volume, injected for real on the real node (devcluster/node.py):
the kubelet and containerd killed and restarted mid-training, the whole node "rebooted" (kubelet,
containerd and every container killed at once), a worker OOM-killed by its memory limit, the volume
full mid-run, and a volume uid 1000 cannot write. Each is driven to its end and recorded in
the ledger (docs/reliability.md): the run must end Succeeded, or Failed with a message that names the
cause, with one TFJob, one PVC, at most one model version, and the exported model (if any) must load.

Needs root, the built images and the node (make test-reliability builds them); one node per machine.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dtr_operator.policy import CLAIM_LABEL, CLAIM_LABEL_VALUE
from ledger import Ledger, Record
from report import NODE_FAULTS as CASES

from support import node as node_support
from support.node import RealNode, score_model
from support.runs import digits_run, saved_models
from support.wait import poll

EPOCHS = 12
STEPS = 40  # ~0.4 s per epoch on 2 cores: the fault lands mid-training with room to spare

# The real node's fixtures: `real_node`, and `namespace` on it (not this directory's control-plane one).
real_node = node_support.real_node
namespace = node_support.node_namespace


@dataclass
class Outcome:
    status: dict[str, Any]
    tfjobs: int
    pvcs: int
    models: list[Path]
    model_loads: bool | None  # None: no model to load


def outcome(real_node: RealNode, namespace: str, name: str, claim: str, volume: Path | None = None) -> Outcome:
    st = real_node.wait_terminal(namespace, name, timeout=600)
    tfjobs = len(real_node.names("tfjobs", namespace, f"distml.dev/run={name}"))
    pvc_names = real_node.cluster.kubectl("get", "pvc", claim, "-n", namespace, "-o", "name", check=False).stdout
    pvcs = len(pvc_names.split())
    root = volume if volume is not None else real_node.volume(namespace, claim)
    models = saved_models(root / "models")
    loads = None
    if models:
        loads = all(score_model(m) > 0.5 for m in models)
    return Outcome(st, tfjobs, pvcs, models, loads)


def record(ledger: Ledger, case: str, ok: bool, out: Outcome, sees: str, **detail: Any) -> None:
    ledger.add(Record(
        area="fault", case=case, tried=1, correct=int(ok),
        lost=int(out.tfjobs == 0 and out.status.get("phase") != "Failed"),
        duplicated=int(out.tfjobs > 1 or out.pvcs > 1 or len(out.models) > 1),
        user_sees=sees,
        detail={"phase": out.status.get("phase"), "reason": out.status.get("reason"),
                "models": len(out.models), "model_loads": out.model_loads, **detail},
    ))  # fmt: skip


def start_training(real_node: RealNode, namespace: str, name: str, **overrides: Any) -> dict[str, Any]:
    doc = digits_run(name, epochs=EPOCHS, steps=STEPS, backoff=6)
    doc["spec"].update(overrides)
    real_node.apply(namespace, doc)
    real_node.wait_log(namespace, f"{name}-worker-0", f"epoch 2/{EPOCHS} end")
    return doc


def succeeded_once(out: Outcome) -> bool:
    return (out.status.get("phase") == "Succeeded" and out.tfjobs == 1 and out.pvcs == 1
            and len(out.models) == 1 and bool(out.model_loads))  # fmt: skip


# ---- the node's own processes -----------------------------------------------------------------------


def epochs_ended(real_node: RealNode, namespace: str, name: str) -> int | None:
    """How many epochs the run's chief has ended so far, by its log (read through a kubelet just restarted: its
    first answers may be empty); None when it gave none in 30 s."""
    def read() -> str | None:
        return real_node.logs(namespace, f"{name}-worker-0") or None

    log = poll(read, 30, 1)
    return len(re.findall(rf"epoch \d+/{EPOCHS} end", log)) if log else None


def test_the_kubelet_then_containerd_killed_and_restarted_mid_training(
    real_node: RealNode, namespace: str, ledger: Ledger
) -> None:
    """One run for both node processes, one after the other, each down 5 s as after a crash before its supervisor
    starts it again: a run each until 2026-12-07 (174 s and 170 s of the node faults' step in a warm CI run, 76 and
    60 CPU s of the node's pods, and a model scored for each). Both are recorded from the one run's end, with the
    epochs its chief had ended at each kill."""
    name = "node-procs-kill"
    start_training(real_node, namespace, name)
    at_kill = {}
    for component in ("kubelet", "containerd"):
        at_kill[component] = epochs_ended(real_node, namespace, name)
        real_node.node.kill(component)
        time.sleep(5)  # down for a while, as after a crash, before its supervisor starts it again
        real_node.node.restart(component)
    out = outcome(real_node, namespace, name, f"{name}-data")
    ok = succeeded_once(out)
    print(f"epochs ended at the kills: {at_kill} of {EPOCHS}; the run {out.status.get('phase')}")
    for component, epoch in at_kill.items():
        record(ledger, CASES[component], ok, out,
               f"nothing: the containers kept running under their shims; the run ends {out.status.get('phase')} "
               f"with one model", restarts=out.status.get("workerRestarts"), epochs_ended_at_kill=epoch,
               same_run_as="kubelet then containerd")  # fmt: skip
    assert ok, out


def test_the_whole_node_rebooted_mid_training(real_node: RealNode, namespace: str, ledger: Ledger) -> None:
    name = "reboot"
    start_training(real_node, namespace, name)
    real_node.node.reboot()
    out = outcome(real_node, namespace, name, f"{name}-data")
    chief = real_node.logs(namespace, f"{name}-worker-0")
    resumed = "resumed from backup at epoch" in chief
    ok = succeeded_once(out) and resumed
    record(ledger, CASES["reboot"], ok, out,
           f"Running/TFJobRestarting while the kubelet restarts the containers; they resume from the "
           f"backup ({'seen' if resumed else 'NOT seen'} in the chief's log); ends {out.status.get('phase')} with "
           f"one model", restarts=out.status.get("workerRestarts"), resumed=resumed)  # fmt: skip
    assert ok, (out, chief[-2000:])


# ---- memory ------------------------------------------------------------------------------------------


def test_a_worker_oom_killed_by_its_memory_limit(real_node: RealNode, namespace: str, ledger: Ledger) -> None:
    name = "oom"
    doc = digits_run(name, epochs=EPOCHS, steps=STEPS, backoff=1)
    doc["spec"]["resources"] = {"limits": {"memory": "160Mi"}}  # TensorFlow alone needs more
    real_node.apply(namespace, doc)
    out = outcome(real_node, namespace, name, f"{name}-data")
    message = out.status.get("message", "")
    named = "OOMKilled" in message and f"{name}-worker-" in message
    ok = out.status.get("phase") == "Failed" and named and out.tfjobs == 1 and not out.models
    record(ledger, CASES["oom"], ok, out,
           message, restarts=out.status.get("workerRestarts"))
    assert ok, out
    assert (out.status.get("workerRestarts") or 0) >= 1, "OnFailure retried within its backoff limit"


# ---- the volume --------------------------------------------------------------------------------------


@pytest.fixture
def host_volume(real_node: RealNode, namespace: str) -> Iterator[tuple[str, Path]]:
    """A pre-provisioned PVC on a host directory of the test's choosing (a static hostPath PV)."""
    path = Path(f"/tmp/dtr-fault-volume-{uuid.uuid4().hex[:8]}")
    path.mkdir()
    pv = f"dtr-fault-{uuid.uuid4().hex[:8]}"
    real_node.cluster.kubectl("apply", "-f", "-", input=_json({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(path), "type": "Directory"}},
    }))  # fmt: skip
    real_node.apply(namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "faulty", "labels": {CLAIM_LABEL: CLAIM_LABEL_VALUE}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    try:
        yield "faulty", path
    finally:
        real_node.cluster.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=120s", check=False)
        real_node.cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)
        subprocess.run(["umount", str(path)], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", str(path)], check=False)


def _json(doc: dict[str, Any]) -> str:
    return json.dumps(doc)


def volume_run(name: str, claim: str) -> dict[str, Any]:
    doc = digits_run(name, epochs=3, steps=10, restart="ExitCode", backoff=2)
    doc["spec"]["storage"] = {"claimName": claim}
    return doc


def test_a_volume_that_fills_up_mid_run(
    real_node: RealNode, namespace: str, ledger: Ledger, host_volume: tuple[str, Path]
) -> None:
    claim, path = host_volume
    # 1 MiB: the logs fit, the first BackupAndRestore checkpoint does not (a checkpoint, with the optimizer's
    # slots, is larger than the SavedModel: on one volume the backup fills it first).
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0777", "dtr-full", str(path)], check=True)
    name = "full"
    real_node.apply(namespace, volume_run(name, claim))
    out = outcome(real_node, namespace, name, claim, volume=path)
    message = out.status.get("message", "")
    versions = sorted(p.name for p in (path / "models" / name).glob("*")) if (path / "models" / name).exists() else []
    ok = out.status.get("phase") == "Failed" and "volume is full" in message and not versions and not out.models
    record(ledger, CASES["full"], ok, out, message,
           versions_left=versions)
    assert ok, (out, versions)


def test_a_volume_uid_1000_cannot_write(
    real_node: RealNode, namespace: str, ledger: Ledger, host_volume: tuple[str, Path]
) -> None:
    claim, path = host_volume
    path.chmod(0o755)  # root's, as a pre-provisioned volume whose driver ignores fsGroup
    name = "readonly"
    real_node.apply(namespace, volume_run(name, claim))
    out = outcome(real_node, namespace, name, claim, volume=path)
    message = out.status.get("message", "")
    named = "not writable by uid 1000" in message and "Permission denied" in message
    ok = out.status.get("phase") == "Failed" and named and "Traceback" not in message
    record(ledger, CASES["unwritable"], ok, out, message)
    assert ok, out
