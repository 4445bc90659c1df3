"""The operator's own pod on a real node: deleted mid-run, it is replaced and the run goes on; deploy/namespaced/ in
place of the cluster-wide install serves its namespace only. Both change the operator every run on the node sees,
so this module runs in the node tier's own step, not beside it (tests/tiers.py NODE_RUNS)."""

from __future__ import annotations

from support.node import OPERATOR_SELECTOR, RealNode
from support.repo import REPO
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


def test_namespaced_deploy_serves_its_namespace_only(real_node: RealNode) -> None:
    """deploy/namespaced/ in place of the cluster-wide operator; the cluster-wide one is back after."""
    kubectl = real_node.cluster.kubectl
    kubectl("delete", "clusterrolebinding", "dtr-operator", "--ignore-not-found")
    kubectl("delete", "clusterrole", "dtr-operator", "--ignore-not-found")
    kubectl("apply", "-k", str(REPO / "deploy" / "namespaced"))
    try:
        kubectl("-n", "dtr-system", "rollout", "status", "deployment/dtr-operator", "--timeout=180s", timeout=200)

        def runs_counted() -> str | None:  # the install's run quota (deploy/namespaced/quota.yaml)
            quota = real_node.cluster.kubectl_json("get", "resourcequota", "disttrainingruns", "-n", "dtr-runs")
            return ((quota.get("status") or {}).get("used") or {}).get("count/disttrainingruns.distml.dev")

        wait_for(runs_counted, "the run quota counted", timeout=60)
        real_node.apply("dtr-runs", digits_run("served", workers=1, epochs=2, steps=5))
        assert wait_for(lambda: runs_counted() == "1", "the run counted against the quota", timeout=60)
        real_node.create_restricted_namespace("t-elsewhere")
        real_node.apply("t-elsewhere", digits_run("ignored", epochs=2, steps=5))

        st = real_node.wait_terminal("dtr-runs", "served")
        assert st["phase"] == "Succeeded", st
        assert real_node.run_status("t-elsewhere", "ignored") == {}, "a run outside the served namespace got a status"
        assert not real_node.names("tfjobs", "t-elsewhere", "distml.dev/run")
    finally:
        # The tests after this one (other files) need the cluster-wide operator again.
        for kind, name in (("rolebinding", "dtr-operator"), ("role", "dtr-operator"),
                           ("resourcequota", "disttrainingruns")):  # fmt: skip
            kubectl("delete", kind, name, "-n", "dtr-runs", "--ignore-not-found", check=False)
        kubectl("delete", "clusterrolebinding,clusterrole", "dtr-operator-discovery", "--ignore-not-found", check=False)
        kubectl("delete", "namespace", "t-elsewhere", "--wait=false", "--ignore-not-found", check=False)
        kubectl("apply", "-k", str(REPO / "deploy"))
        kubectl("-n", "dtr-system", "rollout", "status", "deployment/dtr-operator", "--timeout=180s", timeout=200)
