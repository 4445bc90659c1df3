"""The operator's own pod on a real node: deleted mid-run, it is replaced and the run goes on. It changes the operator
every run on the node sees (a gap of seconds, as any restart), so this module runs in the node tier's own step, not
beside it (tests/tiers.py NODE_RUNS); deploy/namespaced/ in place of the cluster-wide install is
test_namespaced_deploy.py."""

from __future__ import annotations

from support.node import OPERATOR_SELECTOR, RealNode
from support.runs import digits_run
from support.wait import wait_for


def test_operator_pod_deleted_mid_run_is_replaced_and_the_run_continues_without_duplicates(
    real_node: RealNode, namespace: str
) -> None:
    name = "phoenix"
    real_node.apply(namespace, digits_run(name, workers=1, epochs=4, steps=20))  # what it proves needs no peer
    wait_for(lambda: real_node.run_status(namespace, name).get("phase") == "Running", "phase Running", timeout=600)
    before = {
        kind: real_node.cluster.kubectl_json("get", kind, "-n", namespace, "-l", f"distml.dev/run={name}")["items"]
        for kind in ("tfjobs", "pvc")
    }
    old = real_node.names("pods", "dtr-system", OPERATOR_SELECTOR)
    real_node.cluster.kubectl("delete", "pod", "-n", "dtr-system", "-l", OPERATOR_SELECTOR, "--wait=false")

    st = real_node.wait_terminal(namespace, name)
    assert st["phase"] == "Succeeded", st
    assert "accuracy" in st["metrics"]
    now_pods = real_node.names("pods", "dtr-system", OPERATOR_SELECTOR)
    assert now_pods and set(now_pods).isdisjoint(old), (old, now_pods)
    # The replacement, which finished the run: JSON logs (--log-format=json) and nothing about a file it could not
    # write (read-only root, uid 1000, /tmp the only emptyDir: deploy/base/deployment.yaml).
    log = real_node.cluster.kubectl("logs", "-n", "dtr-system", now_pods[0]).stdout
    assert log.lstrip().startswith("{"), log[:500]
    assert "Read-only file system" not in log and "Permission denied" not in log, log[-3000:]
    for kind, items in before.items():
        now = real_node.cluster.kubectl_json("get", kind, "-n", namespace, "-l", f"distml.dev/run={name}")["items"]
        assert [o["metadata"]["uid"] for o in now] == [o["metadata"]["uid"] for o in items], f"{kind} duplicated"
