"""The quickstart's example on the real node (issue 14): examples/mnist.yaml as the repository has it.

The node is this machine, 2 CPUs, as a small Docker VM under k3d is. Its pods cannot reach the internet
(the cluster DNS answers cluster names only, nothing is masqueraded), so MNIST cannot be downloaded: the
run must be scheduled, fail for that permanent reason, and say so, not "exited with code 143" (the kill
at the backoff limit). A run that cannot be scheduled says so too, in the scheduler's own words
(tests/node/test_scheduling.py, with the other workers that cannot start).
"""

from __future__ import annotations

import time
from typing import Any

import yaml

from support.node import RealNode
from support.repo import REPO
from support.wait import wait_for

TWO_CPUS_MILLI = 2000


def milli_cpu(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def cpu_requested_on_the_node(real_node: RealNode) -> tuple[int, list[str]]:
    """Millicores requested by every pod on the node that has not finished, and who asks for what."""
    pods = real_node.cluster.kubectl_json("get", "pods", "-A")["items"]
    total, who = 0, []
    for pod in pods:
        if pod["status"].get("phase") in ("Succeeded", "Failed") or not pod["spec"].get("nodeName"):
            continue
        cpu = sum(milli_cpu(str(c.get("resources", {}).get("requests", {}).get("cpu", "0")))
                  for c in pod["spec"]["containers"])  # fmt: skip
        total += cpu
        who.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']} {cpu}m")
    return total, who


def scheduled(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "PodScheduled" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def test_mnist_example_is_scheduled_on_a_2_cpu_node_and_offline_fails_naming_the_download(
    real_node: RealNode, namespace: str
) -> None:
    # Offline by construction, not by luck: the cluster DNS has no `forward`, so no name outside the
    # cluster resolves from a pod, whatever this machine can reach.
    corefile = real_node.cluster.kubectl_json("get", "configmap", "coredns", "-n", "kube-system")["data"]["Corefile"]
    assert "forward" not in corefile, corefile

    example = REPO / "examples" / "mnist.yaml"
    name = yaml.safe_load(example.read_text())["metadata"]["name"]
    t0 = time.monotonic()
    real_node.cluster.kubectl("apply", "-n", namespace, "-f", str(example))

    workers = [f"{name}-worker-{i}" for i in range(2)]
    seen: dict[str, float] = {}

    def both_scheduled() -> bool:
        # Noted while the pods exist: at the backoff limit the training-operator deletes them.
        for pod in real_node.cluster.kubectl_json("get", "pods", "-n", namespace)["items"]:
            if pod["metadata"]["name"] in workers and scheduled(pod):
                seen.setdefault(pod["metadata"]["name"], time.monotonic() - t0)
        return len(seen) == 2

    wait_for(both_scheduled, "both mnist workers scheduled", timeout=180, interval=0.5)
    requested, who = cpu_requested_on_the_node(real_node)
    # On a bigger machine the node has more CPUs: the requests must still fit in two.
    assert requested <= TWO_CPUS_MILLI, (requested, who)

    phases: list[str] = []
    st = real_node.wait_terminal(namespace, name, timeout=600, seen=phases)
    elapsed = time.monotonic() - t0
    print(f"\nexamples/mnist.yaml offline: both workers scheduled after {max(seen.values()):.1f} s "
          f"(CPU requested on the node {requested}m of {TWO_CPUS_MILLI}m: {', '.join(who)}); "
          f"kubectl apply -> {st['phase']} in {elapsed:.0f} s, phases {phases}, "
          f"workerRestarts {st.get('workerRestarts')}\n  message: {st.get('message')}")  # fmt: skip

    assert st["phase"] == "Failed", st
    message = st["message"]
    assert f"{name}-worker-" in message, message
    assert "exited with code 5" in message, message
    assert "cannot download mnist" in message, message
    assert "exited with code 143" not in message, message
    # The cause as the worker saw it, in its own log on the run's volume: the download's host name did not
    # resolve ("[Errno -3] Temporary failure in name resolution"), as the Corefile above promises.
    log = (real_node.volume(namespace, f"{name}-data") / "logs" / name / "worker-0.log").read_text()
    assert "cannot download mnist" in log and "name resolution" in log, log[-3000:]

    # The failed run lets go of the node: its workers, restarting under OnFailure, are deleted, so a second
    # run on this 2-CPU node is not kept Pending by a run that has already failed.
    def released() -> bool:
        pods = real_node.cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
        return not [p for p in pods
                    if p["metadata"]["name"] in workers and p["status"].get("phase") in ("Running", "Pending")]

    wait_for(released, "the failed run's worker pods deleted", timeout=120, interval=1)
    print(f"  worker pods released {time.monotonic() - t0 - elapsed:.1f} s after the run failed")
