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


FAKE_GPU = "example.com/gpu"  # an extended resource, as a device plugin advertises nvidia.com/gpu


def test_an_extended_resource_like_a_gpu_reaches_the_workers_and_a_run_asking_more_than_any_node_has_waits(
    real_node: RealNode, namespace: str
) -> None:
    """What works today for GPUs (docs/gpus.md): spec.resources.limits of an extended resource reach each worker
    and the scheduler counts them. The node advertises 2 of a fake one (a node-status patch, what a device plugin
    does); a run asking 1 per worker trains, a run asking 3 for one worker stays Pending with the scheduler's
    words in its status."""
    node = real_node.cluster.kubectl("get", "nodes", "-o", "name").stdout.split()[0]
    path = "/status/capacity/" + FAKE_GPU.replace("/", "~1")
    advertise = json.dumps([{"op": "add", "path": path, "value": "2"}])
    real_node.cluster.kubectl("patch", node, "--subresource=status", "--type=json", "-p", advertise)
    try:
        fits = digits_run("fits", epochs=2, steps=10)
        fits["spec"]["resources"] = {"limits": {FAKE_GPU: 1}}
        greedy = digits_run("greedy", workers=1, epochs=2, steps=10)
        greedy["spec"]["resources"] = {"limits": {FAKE_GPU: 3}}
        real_node.apply(namespace, fits)
        real_node.apply(namespace, greedy)

        st = wait_for(lambda: (s := real_node.run_status(namespace, "greedy")).get("reason") == "WorkerPodsNotStarting"
                      and s, "the greedy run to say its worker cannot start", timeout=120)  # fmt: skip
        assert st["phase"] == "Pending" and f"Insufficient {FAKE_GPU}" in st["message"], st["message"]
        done = real_node.wait_terminal(namespace, "fits")
        assert done["phase"] == "Succeeded", done
        worker = real_node.pod(namespace, "fits-worker-0")["spec"]["containers"][0]
        assert worker["resources"]["limits"][FAKE_GPU] == "1", worker["resources"]
        assert real_node.run_status(namespace, "greedy")["phase"] == "Pending", "3 never fit on a node with 2"
    finally:
        real_node.cluster.kubectl("delete", "dtr", "greedy", "-n", namespace, "--ignore-not-found", check=False)
        remove = json.dumps([{"op": "remove", "path": path}])
        real_node.cluster.kubectl("patch", node, "--subresource=status", "--type=json", "-p", remove, check=False)
