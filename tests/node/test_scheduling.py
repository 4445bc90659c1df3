"""Suspend that keeps progress, and placement, on a real node: the pods really go and come back, the
trainer really resumes from its backup, and the words of the part that keeps a worker from starting (the
scheduler's, the kubelet's) reach the run's status."""

from __future__ import annotations

import json
import re
from typing import Any

from support.node import RealNode
from support.runs import digits_run, saved_models, slow_epochs_run
from support.wait import wait_for

EPOCHS = 12
# The suspended run's epochs sleep (support/slow_epochs_model.py): what a suspend keeps is the run's place in its
# epochs, not its training. The digits CNN's 60 steps an epoch took about 45 CPU s of the node's pods (2026-12-07).
EPOCH_SECONDS = 4


def patch_spec(real_node: RealNode, namespace: str, name: str, spec: dict) -> None:
    real_node.cluster.kubectl("patch", "dtr", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec}))


def test_suspend_mid_training_then_resume_continues_from_the_backup_with_one_model(
    real_node: RealNode, namespace: str
) -> None:
    name = "pause"
    real_node.apply_slow_epochs(namespace, slow_epochs_run(name, EPOCHS, EPOCH_SECONDS))
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


FAKE_GPU = "example.com/gpu"  # an extended resource, as a device plugin advertises nvidia.com/gpu
# A digest of the trainer's repository: the shipped allow-list admits it; no node has it, none can pull it.
MISSING_IMAGE = "localhost/distml/trainer@sha256:" + "0" * 64


def not_starting(real_node: RealNode, namespace: str, name: str) -> dict[str, Any]:
    """The run's status once its reason is WorkerPodsNotStarting (the operator says so 20 s after it is short)."""
    return wait_for(lambda: (s := real_node.run_status(namespace, name)).get("reason") == "WorkerPodsNotStarting"
                    and s, f"{name}: WorkerPodsNotStarting", timeout=180, interval=1)  # fmt: skip


def test_workers_that_cannot_start_are_named_in_the_status_in_the_schedulers_or_kubelets_words(
    real_node: RealNode, namespace: str
) -> None:
    """Four runs at once whose workers cannot start, each for its own reason, each named in its status in the words
    of the part that refuses it: a nodeSelector no node matches (then the node gets the label and the run trains),
    more CPU than the node has, more of an extended resource than it advertises, an image no node has and none can
    pull (the bug the process node hid: it ran any image). Beside them a run asking 1 of the extended resource per
    worker trains: what works today for GPUs (docs/gpus.md), spec.resources.limits reach each worker and the
    scheduler counts them. The node advertises 2 of a fake one (a node-status patch, what a device plugin does)."""
    node = real_node.cluster.kubectl("get", "nodes", "-o", "name").stdout.split()[0]
    path = "/status/capacity/" + FAKE_GPU.replace("/", "~1")
    advertise = json.dumps([{"op": "add", "path": path, "value": "2"}])
    real_node.cluster.kubectl("patch", node, "--subresource=status", "--type=json", "-p", advertise)
    try:
        placed = digits_run("placed", workers=1, epochs=2, steps=10)
        placed["spec"]["nodeSelector"] = {"dtr-test/pool": "placed"}
        greedy_cpu = digits_run("greedy-cpu", epochs=1, steps=5)
        greedy_cpu["spec"]["resources"] = {"requests": {"cpu": "64"}}
        greedy_gpu = digits_run("greedy-gpu", workers=1, epochs=2, steps=10)
        greedy_gpu["spec"]["resources"] = {"limits": {FAKE_GPU: 3}}
        badtag = digits_run("badtag", epochs=1, steps=5)
        badtag["spec"]["image"] = MISSING_IMAGE
        fits = digits_run("fits", epochs=2, steps=10)
        fits["spec"]["resources"] = {"limits": {FAKE_GPU: 1}}
        for doc in (placed, greedy_cpu, greedy_gpu, badtag, fits):
            real_node.apply(namespace, doc)

        st = not_starting(real_node, namespace, "placed")
        assert st["phase"] == "Pending" and "cannot be scheduled" in st["message"], st
        assert "node affinity/selector" in st["message"], st["message"]  # the scheduler's own words
        st = not_starting(real_node, namespace, "greedy-cpu")
        assert st["phase"] == "Pending", st
        assert "worker greedy-cpu-worker-" in st["message"] and "cannot be scheduled" in st["message"], st
        assert "Insufficient cpu" in st["message"], st["message"]
        st = not_starting(real_node, namespace, "greedy-gpu")
        assert st["phase"] == "Pending" and f"Insufficient {FAKE_GPU}" in st["message"], st["message"]
        st = not_starting(real_node, namespace, "badtag")
        assert st["phase"] == "Pending"
        assert re.search(r"worker badtag-worker-\d cannot start: (ErrImagePull|ImagePullBackOff)", st["message"]), st
        assert MISSING_IMAGE in st["message"], st
        refused = "involvedObject.name=badtag,reason=WorkerPodsNotStarting"
        events = real_node.cluster.kubectl("get", "events", "-n", namespace, "--field-selector", refused).stdout
        assert "Warning" in events, events
        real_node.cluster.kubectl("delete", "dtr", "greedy-cpu", "badtag", "-n", namespace, "--wait=false")

        real_node.cluster.kubectl("label", node, "dtr-test/pool=placed")
        st = real_node.wait_terminal(namespace, "placed")
        assert st["phase"] == "Succeeded", st
        done = real_node.wait_terminal(namespace, "fits")
        assert done["phase"] == "Succeeded", done
        worker = real_node.pod(namespace, "fits-worker-0")["spec"]["containers"][0]
        assert worker["resources"]["limits"][FAKE_GPU] == "1", worker["resources"]
        assert real_node.run_status(namespace, "greedy-gpu")["phase"] == "Pending", "3 never fit on a node with 2"
    finally:
        real_node.cluster.kubectl("label", node, "dtr-test/pool-", check=False)
        real_node.cluster.kubectl("delete", "dtr", "greedy-gpu", "greedy-cpu", "badtag", "-n", namespace,
                                  "--ignore-not-found", "--wait=false", check=False)  # fmt: skip
        remove = json.dumps([{"op": "remove", "path": path}])
        real_node.cluster.kubectl("patch", node, "--subresource=status", "--type=json", "-p", remove, check=False)
