"""Network isolation on the real node, enforced by kube-network-policies (devcluster/node.py):

- the engine: a deny-all-ingress NetworkPolicy cuts a busybox pod off, deleting it lets the traffic back;
- a run's NetworkPolicy (operator): TensorFlow's unauthenticated gRPC port of a training worker answers the
  run's other worker, and no pod of another namespace (the attack of the security review's H1), nor another
  pod of the run's own namespace;
- the operator's NetworkPolicy (deploy/base/networkpolicy.yaml): /metrics only from namespaces labelled
  distml.dev/metrics-reader=true, while the kubelet's liveness probe still passes (the pod stays up).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from dtr_contract.container import PORT

from devcluster import node as realnode
from support.node import OPERATOR_SELECTOR, RealNode, dtr, restricted_namespace
from support.runs import SLOW_EPOCHS_MODEL
from support.wait import wait_for

METRICS_READER = "distml.dev/metrics-reader"
METRICS_URL = "http://dtr-operator-metrics.dtr-system.svc:9090/metrics"
# Exit 0 when a TCP connection to host:port opens within 5 s; else 1, saying why (refused, timed out).
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
except OSError as err:
    print(f"no connection: {err!r}"); sys.exit(1)
print("connected")
"""
SCRAPE = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()[:2000])"


def _busybox(name: str, command: list[str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A busybox pod that may run under Pod Security `restricted`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "busybox", "image": realnode.pinned(realnode.HERE / "versions.env")["BUSYBOX_IMAGE"],
                "imagePullPolicy": "Never", "command": command,
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }  # fmt: skip


def test_a_deny_policy_cuts_a_pod_off_and_its_removal_lets_traffic_back(real_node: RealNode, namespace: str) -> None:
    real_node.apply(namespace, _busybox("server", ["httpd", "-f", "-p", "8080", "-h", "/etc"], {"app": "server"}))
    real_node.apply(namespace, _busybox("client", ["sleep", "900"]))
    real_node.cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/server", "pod/client",
                              "--timeout=120s", timeout=150)  # fmt: skip
    server_ip = real_node.pod(namespace, "server")["status"]["podIP"]
    request = f"printf 'GET /hostname HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {server_ip} 8080"

    def answered() -> bool:
        proc = real_node.cluster.kubectl("exec", "-n", namespace, "client", "--", "sh", "-c", request, check=False)
        return proc.stdout.startswith("HTTP/1.")

    assert answered(), "no answer before any policy"
    deny = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "deny"},
            "spec": {"podSelector": {"matchLabels": {"app": "server"}}, "policyTypes": ["Ingress"]}}  # fmt: skip
    real_node.apply(namespace, deny)
    wait_for(lambda: not answered(), "the deny policy to cut the server off", timeout=30, interval=0.5)
    time.sleep(2)
    assert not answered(), "the policy let a later connection through"
    real_node.cluster.kubectl("delete", "networkpolicy", "deny", "-n", namespace)
    wait_for(answered, "the server to answer again once the policy is gone", timeout=30, interval=0.5)


def _probe_pod(name: str) -> dict[str, Any]:
    """A pod of the trainer image (it has Python) that may run under Pod Security `restricted`, holding no token."""
    image = realnode.image_names()[1]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe", "image": image, "imagePullPolicy": "Never",
                "command": ["python", "-c", "import time; time.sleep(900)"],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }  # fmt: skip


@contextmanager
def probe_pod(real_node: RealNode, namespace: str, name: str = "prober") -> Iterator[str]:
    real_node.apply(namespace, _probe_pod(name))
    try:
        real_node.cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", f"pod/{name}", "--timeout=120s",
                                  timeout=150)  # fmt: skip
        yield name
    finally:
        real_node.cluster.kubectl("delete", "pod", name, "-n", namespace, "--wait=false", check=False)


def run_python(real_node: RealNode, namespace: str, pod: str, container: str, *argv: str):
    return real_node.cluster.kubectl("exec", "-n", namespace, pod, "-c", container, "--", "python", "-c", *argv,
                                     check=False)  # fmt: skip


def test_a_workers_grpc_port_answers_its_own_run_and_no_other_pod(real_node: RealNode, namespace: str) -> None:
    name = "victim"
    # Its epochs after the first sleep (its workers' gRPC servers serve meanwhile) until it is deleted below: the
    # digits CNN training through the test instead cost the node's pods 26 CPU s.
    proc = dtr(real_node, namespace, "submit", str(SLOW_EPOCHS_MODEL), "--name", name, "--workers", "2", "--epochs",
               "100", "--param", "epoch_seconds=600")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    try:
        real_node.wait_log(namespace, f"{name}-worker-0", "epoch 1/100 end")  # both gRPC servers serve
        target = f"{name}-worker-0.{namespace}.svc"
        policy = real_node.cluster.kubectl_json("get", "networkpolicy", name, "-n", namespace)
        assert policy["metadata"]["ownerReferences"][0]["name"] == name

        own = run_python(real_node, namespace, f"{name}-worker-1", "tensorflow", CONNECT, target, str(PORT))
        assert own.returncode == 0, f"the run's own worker could not connect: {own.stdout}{own.stderr}"

        with restricted_namespace(real_node, "team-b") as other, probe_pod(real_node, other) as pod:
            t0 = time.monotonic()
            attack = run_python(real_node, other, pod, "probe", CONNECT, target, str(PORT))
            print(f"from namespace {other}: exit {attack.returncode} in {time.monotonic() - t0:.1f} s: {attack.stdout}")
            assert attack.returncode == 1 and "no connection" in attack.stdout, attack.stdout + attack.stderr
            # The same pod reaches what no policy guards: the failure above is the policy's, not the network's.
            dns = run_python(real_node, other, pod, "probe", CONNECT, "kube-dns.kube-system.svc", "53")
            assert dns.returncode == 0, dns.stdout + dns.stderr

        with probe_pod(real_node, namespace, "neighbour") as pod:
            neighbour = run_python(real_node, namespace, pod, "probe", CONNECT, target, str(PORT))
            assert neighbour.returncode == 1, f"a pod of the namespace, not of the run, connected: {neighbour.stdout}"
    finally:
        real_node.cluster.kubectl("delete", "distrainingruns", name, "-n", namespace, "--wait=false", check=False)


def _age_seconds(pod: dict[str, Any]) -> float:
    started = datetime.fromisoformat(pod["status"]["startTime"].replace("Z", "+00:00"))
    return (datetime.now(UTC) - started).total_seconds()


def test_the_operators_metrics_answer_only_labelled_namespaces_and_its_probe_passes(real_node: RealNode) -> None:
    assert real_node.cluster.kubectl_json("get", "networkpolicy", "dtr-operator", "-n", "dtr-system")

    with restricted_namespace(real_node, "monitoring") as reader, restricted_namespace(real_node, "nosy") as nosy:
        real_node.cluster.kubectl("label", "namespace", reader, f"{METRICS_READER}=true")
        with probe_pod(real_node, reader, "scraper") as scraper, probe_pod(real_node, nosy, "nosy") as other:
            scraped = run_python(real_node, reader, scraper, "probe", SCRAPE, METRICS_URL)
            assert scraped.returncode == 0 and "dtr_runs" in scraped.stdout, scraped.stdout + scraped.stderr
            refused = run_python(real_node, nosy, other, "probe", CONNECT, "dtr-operator-metrics.dtr-system.svc",
                                 "9090")  # fmt: skip
            assert refused.returncode == 1, f"an unlabelled namespace reached /metrics: {refused.stdout}"

    # The liveness probe (8080, from the kubelet on the node) is not the policy's to refuse: after its first
    # probes (initialDelaySeconds 15, periodSeconds 20) the pod has not restarted and no probe failed.
    (pod,) = real_node.cluster.kubectl_json("get", "pods", "-n", "dtr-system", "-l", OPERATOR_SELECTOR)["items"]
    wait_for(lambda: _age_seconds(real_node.pod("dtr-system", pod["metadata"]["name"])) > 60,
             "the operator pod to have been probed a few times", timeout=90, interval=2)  # fmt: skip
    pod = real_node.pod("dtr-system", pod["metadata"]["name"])
    assert [c["restartCount"] for c in pod["status"]["containerStatuses"]] == [0]
    events = real_node.cluster.kubectl_json(
        "get", "events", "-n", "dtr-system", "--field-selector", f"involvedObject.name={pod['metadata']['name']}"
    )["items"]
    assert not [e["message"] for e in events if e["reason"] == "Unhealthy"]


def test_the_operator_reaches_the_api_server_and_nothing_else(real_node: RealNode, namespace: str) -> None:
    """deploy/install.sh's dtr-operator-egress (security review R4): a stolen operator token used from its pod reaches
    no pod's port (a server that any other pod reaches), only the API server, which the operator keeps using."""
    policy = real_node.cluster.kubectl_json("get", "networkpolicy", "dtr-operator-egress", "-n", "dtr-system")
    assert policy["spec"]["policyTypes"] == ["Egress"]
    real_node.apply(namespace, _busybox("server", ["httpd", "-f", "-p", "8080", "-h", "/etc"]))
    real_node.cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/server", "--timeout=120s",
                              timeout=150)  # fmt: skip
    server_ip = real_node.pod(namespace, "server")["status"]["podIP"]
    with probe_pod(real_node, namespace, "anyone") as pod:
        other = run_python(real_node, namespace, pod, "probe", CONNECT, server_ip, "8080")
        assert other.returncode == 0, f"the server answers other pods: {other.stdout}{other.stderr}"
    (op,) = real_node.cluster.kubectl_json("get", "pods", "-n", "dtr-system", "-l", OPERATOR_SELECTOR)["items"]
    name = op["metadata"]["name"]
    blocked = run_python(real_node, "dtr-system", name, "operator", CONNECT, server_ip, "8080")
    assert blocked.returncode == 1 and "no connection" in blocked.stdout, blocked.stdout + blocked.stderr
    # CONNECT to the address and port the pod's in-cluster configuration names (the kubernetes Service).
    api = run_python(real_node, "dtr-system", name, "operator", "import os, sys; code = sys.argv[1]; sys.argv[1:] = "
                     "[os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']]; exec(code)",
                     CONNECT)  # fmt: skip
    assert api.returncode == 0 and "connected" in api.stdout, api.stdout + api.stderr
