"""Pods on different nodes: flannel's routes, kube-proxy's Services, CoreDNS, and NetworkPolicy across nodes."""

from __future__ import annotations

import ipaddress
import json

from support.multinode import MultiNode
from support.wait import poll, wait_for

HTTPD = "mkdir -p /w && echo ok > /w/index.html && httpd -f -p 8080 -h /w"


def test_every_node_is_ready_with_a_pod_subnet_of_its_own(multinode: MultiNode) -> None:
    nodes = multinode.cluster.kubectl_json("get", "nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == [f"dtr-n{i}" for i in range(1, len(nodes) + 1)]
    assert len(nodes) >= 3
    subnets = [ipaddress.ip_network(n["spec"]["podCIDR"]) for n in nodes]
    assert len(set(subnets)) == len(nodes)
    assert all(s.subnet_of(ipaddress.ip_network("10.244.0.0/16")) for s in subnets)
    for node in nodes:
        assert multinode.node_ready(node["metadata"]["name"]) == "True"
        # flannel's lease: the node's own address is where the others route its pods' subnet
        internal = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        assert node["metadata"]["annotations"]["flannel.alpha.coreos.com/public-ip"] == internal


def test_pods_on_two_nodes_reach_each_other_by_address_service_and_name(
    multinode: MultiNode, plain_namespace: str
) -> None:
    ns = plain_namespace
    server = multinode.pod_on(ns, "server", "dtr-n2", HTTPD, labels={"app": "server"})
    multinode.pod_on(ns, "client", "dtr-n1", "sleep 3600")
    multinode.cluster.kubectl("expose", "pod", "server", "-n", ns, "--port=80", "--target-port=8080")
    # Reachable within 90 s, not at the first 4 s try: the server's port, and a new pod's route or its Service's
    # endpoints, may come a moment after the pod runs (a CI run at 16f1e0e failed the single try, pod to pod; at
    # c86e9c2, run right after test_disruption powered a node off and on, 30 s were not enough: cause not found).
    assert poll(lambda: multinode.connects(ns, "client", server, 8080), 90, 1), "pod to pod across nodes"
    assert poll(lambda: multinode.connects(ns, "client", f"server.{ns}.svc.cluster.local", 80), 30, 1), \
        "Service by its DNS name"  # fmt: skip


def test_a_network_policy_holds_for_pods_on_other_nodes(multinode: MultiNode, plain_namespace: str) -> None:
    """A run's policy admits its own workers wherever they run and nothing else: the destination node's engine
    must see the source pod's own address (no masquerading between nodes)."""
    ns = plain_namespace
    server = multinode.pod_on(ns, "server", "dtr-n2", HTTPD, labels={"app": "server"})
    multinode.pod_on(ns, "friend", "dtr-n1", "sleep 3600", labels={"role": "friend"})
    multinode.pod_on(ns, "stranger", "dtr-n3", "sleep 3600", labels={"role": "stranger"})
    # No policy yet: reachable, within 90 s as above (the CI run at e17db83 failed 30 s here, the stranger on
    # dtr-n3 just powered back by test_disruption; since then a node powered back is waited for until its routes
    # and policy engine serve, and the nodes no longer share one record of the pod addresses they gave out).
    assert poll(lambda: multinode.connects(ns, "stranger", server, 8080), 90, 1), "the stranger before any policy"
    policy = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "friends-only"},
        "spec": {"podSelector": {"matchLabels": {"app": "server"}}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "friend"}}}]}]},
    }  # fmt: skip
    multinode.cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(policy))
    wait_for(lambda: not multinode.connects(ns, "stranger", server, 8080), timeout=30, interval=1,
             what="the stranger on dtr-n3 refused")  # fmt: skip
    assert poll(lambda: multinode.connects(ns, "friend", server, 8080), 30, 1), "the friend on dtr-n1 still admitted"
