"""TensorBoard for a run on the real node, in a namespace that enforces Pod Security `restricted`: the client's
handle and `dtr tensorboard` serve a finished run's epoch_loss (one point per epoch) through a port-forward to
a pod that mounts the run's claim read-only; the run's NetworkPolicy is unchanged; the pod is gone after stop()
and Ctrl-C, and with the run (its owner); a run without a claim to read and an unknown run say so in one line."""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import urllib.parse
import urllib.request
from typing import Any

import pytest
from dtr_client import TrainingClient
from dtr_client import transfer as tr

from support.node import DTR, RealNode, dtr
from support.runs import digits_run
from support.wait import wait_for

RUN, EPOCHS = "board", 3
PODS = f"{tr.TENSORBOARD_OF}={RUN}"


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read())


def loss_steps(base: str) -> list[int]:
    """The steps of the train run's epoch_loss as TensorBoard 2.11's scalars plugin serves them; values finite."""
    query = urllib.parse.urlencode({"run": "train", "tag": "epoch_loss"})
    points = get(f"{base}data/plugin/scalars/scalars?{query}")
    assert all(math.isfinite(value) for _, _, value in points), points
    return [int(step) for _, step, _ in points]


def pods_gone(real_node: RealNode, namespace: str) -> None:
    wait_for(lambda: not real_node.names("pods", namespace, PODS) or None, "the TensorBoard pod to be gone",
             timeout=90, interval=1)  # fmt: skip


def test_a_finished_runs_loss_is_served_from_a_read_only_restricted_pod_through_a_port_forward(
    real_node: RealNode, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_node.apply(namespace, digits_run(RUN, workers=1, epochs=EPOCHS, steps=5))
    assert real_node.wait_terminal(namespace, RUN)["phase"] == "Succeeded"
    policy = real_node.cluster.kubectl_json("get", "networkpolicy", RUN, "-n", namespace)["spec"]
    uid = real_node.cluster.kubectl_json("get", "distrainingruns", RUN, "-n", namespace)["metadata"]["uid"]

    monkeypatch.setenv("KUBECONFIG", str(real_node.cluster.kubeconfig))
    client = TrainingClient("cluster", namespace=namespace)
    with client.tensorboard(RUN) as board:
        assert "train" in get(board.url + "data/runs")
        assert "epoch_loss" in get(board.url + "data/plugin/scalars/tags")["train"]
        assert loss_steps(board.url) == list(range(EPOCHS))
        [name] = real_node.names("pods", namespace, PODS)
        pod = real_node.cluster.kubectl_json("get", name, "-n", namespace)
        claim = next(v["persistentVolumeClaim"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v)
        assert claim == {"claimName": f"{RUN}-data", "readOnly": True}
        assert [(r["kind"], r["uid"]) for r in pod["metadata"]["ownerReferences"]] == [("DistTrainingRun", uid)]
        assert pod["status"]["containerStatuses"][0]["ready"] is True
    pods_gone(real_node, namespace)
    assert real_node.cluster.kubectl_json("get", "networkpolicy", RUN, "-n", namespace)["spec"] == policy

    # dtr tensorboard: the URL once it answers, the pod deleted on Ctrl-C.
    env = {**os.environ, "KUBECONFIG": str(real_node.cluster.kubeconfig), "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen([str(DTR), "tensorboard", RUN, "-n", namespace], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 300)[0], "dtr tensorboard printed no URL in 300 s"
        line = proc.stdout.readline().strip()
        assert line.startswith(f"TensorBoard for {RUN}: http://127.0.0.1:"), (line, proc.stderr)
        assert loss_steps(line.split(": ", 1)[1]) == list(range(EPOCHS))
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)  # stderr read, so a full pipe cannot hold it
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler: where each of its threads is, on stderr
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"dtr tensorboard did not exit within 60 s of Ctrl-C; its threads:\n{err[-20000:]}")
        assert proc.returncode == 130, err
    finally:
        if proc.poll() is None:
            proc.kill()
    pods_gone(real_node, namespace)

    # The run owns the pod: deleting the run deletes it (the garbage collector), and the handle says so.
    board = client.tensorboard(RUN)
    try:
        real_node.cluster.kubectl("delete", "distrainingruns", RUN, "-n", namespace, "--wait=false")
        pods_gone(real_node, namespace)
        assert "was deleted" in (wait_for(board.ended, "the handle to see its pod gone", timeout=30) or "")
    finally:
        board.stop()


def test_a_run_without_a_claim_to_read_and_an_unknown_run_say_so_in_one_line(
    real_node: RealNode, namespace: str
) -> None:
    doc = digits_run("claimless", workers=1, epochs=1, steps=5)
    doc["spec"]["storage"] = {"claimName": "no-such-claim"}
    real_node.apply(namespace, doc)
    proc = dtr(real_node, namespace, "tensorboard", "claimless", timeout=120)
    assert proc.returncode == 1 and proc.stdout == "", proc
    assert proc.stderr.startswith("dtr tensorboard: DistTrainingRun claimless's claim no-such-claim does not exist")
    assert proc.stderr.count("\n") == 1, proc.stderr
    proc = dtr(real_node, namespace, "tensorboard", "no-such-run", timeout=120)
    assert (proc.returncode, proc.stderr) == (1, f"dtr tensorboard: no DistTrainingRun no-such-run in namespace "
                                                 f"{namespace}\n")  # fmt: skip
    assert not real_node.names("pods", namespace, f"{tr.TENSORBOARD_OF}=claimless")
