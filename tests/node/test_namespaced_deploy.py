"""deploy/namespaced/ in place of the cluster-wide install on the real node serves its namespace only. While it
runs, no run elsewhere on the node is served at all (minutes under load), so it runs in the node faults step
(tests/tiers.py), after every step whose runs need the operator: beside "node runs" it held the stall watchdog's
runs unserved past their waits (a CI-like run of b5f8d0c, 2026-12-07: no StallRestart in 195 s)."""

from __future__ import annotations

from support.node import RealNode
from support.repo import REPO
from support.runs import digits_run
from support.wait import wait_for


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
