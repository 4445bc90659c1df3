"""Suspend that keeps progress, and placement, on a real node: the pods really go and come back, the
trainer really resumes from its backup, and the scheduler's own words reach the run's status."""

from __future__ import annotations

import json
import re

from support.node import RealNode
from support.runs import digits_run, saved_models
from support.wait import wait_for

EPOCHS = 12


def patch_spec(real_node: RealNode, namespace: str, name: str, spec: dict) -> None:
    real_node.cluster.kubectl("patch", "dtr", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec}))


def test_suspend_mid_training_then_resume_continues_from_the_backup_with_one_model(
    real_node: RealNode, namespace: str
) -> None:
    name = "pause"
    real_node.apply(namespace, digits_run(name, epochs=EPOCHS, steps=60))
    real_node.wait_log(namespace, f"{name}-worker-0", f"epoch 3/{EPOCHS} end")

    patch_spec(real_node, namespace, name, {"suspend": True})
    st = wait_for(lambda: (s := real_node.run_status(namespace, name)).get("reason") == "RunSuspended" and s,
                  "the run to say RunSuspended", timeout=120)  # fmt: skip
    assert st["phase"] == "Suspended", st
    wait_for(lambda: not real_node.names("pods", namespace, f"training.kubeflow.org/job-name={name}"),
             "the worker pods to go", timeout=120)  # fmt: skip
    row = real_node.cluster.kubectl("get", "dtr", name, "-n", namespace).stdout
    assert re.search(rf"^{name}\s+Suspended\s", row, re.MULTILINE), row

    patch_spec(real_node, namespace, name, {"suspend": False})
    st = real_node.wait_terminal(namespace, name)
    assert st["phase"] == "Succeeded", st
    chief = real_node.logs(namespace, f"{name}-worker-0")
    assert "resumed from backup at epoch" in chief, chief[-3000:]
    assert "epoch 1/" not in chief, "the resumed chief started over"

    # Every epoch finished exactly once across both containers of the chief (the volume keeps both logs),
    # and one model.
    volume = real_node.volume(namespace, f"{name}-data")
    log = (volume / "logs" / name / "worker-0.log").read_text()
    ends = [int(m) for m in re.findall(rf"epoch (\d+)/{EPOCHS} end", log)]
    assert sorted(ends) == list(range(1, EPOCHS + 1)), ends
    assert saved_models(volume) == [volume / "models" / name / "1"]
    assert st["progress"]["epochsDone"] == f"{EPOCHS}/{EPOCHS}"


def test_a_node_selector_no_node_matches_is_reported_then_runs_once_a_node_has_the_label(
    real_node: RealNode, namespace: str
) -> None:
    name = "placed"
    doc = digits_run(name, workers=1, epochs=2, steps=10)
    doc["spec"]["nodeSelector"] = {"dtr-test/pool": name}
    real_node.apply(namespace, doc)
    st = wait_for(lambda: (s := real_node.run_status(namespace, name)).get("reason") == "WorkerPodsNotStarting" and s,
                  "WorkerPodsNotStarting", timeout=60)  # fmt: skip
    assert st["phase"] == "Pending" and "cannot be scheduled" in st["message"], st
    assert "node affinity/selector" in st["message"], st["message"]  # the scheduler's own words

    node = real_node.cluster.kubectl("get", "nodes", "-o", "name").stdout.split()[0]
    real_node.cluster.kubectl("label", node, f"dtr-test/pool={name}")
    try:
        st = real_node.wait_terminal(namespace, name)
        assert st["phase"] == "Succeeded", st
    finally:
        real_node.cluster.kubectl("label", node, "dtr-test/pool-", check=False)
