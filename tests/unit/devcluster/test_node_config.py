"""The real node's rendered configuration (devcluster/node.py's pure parts): seconds, no root.

The node tier proves these on a machine; here a typo in a manifest or a pin fails at once.
"""

from __future__ import annotations

import base64
import itertools
import json
import tomllib
from pathlib import Path

import pytest
import yaml

from devcluster import cluster, node, s3
from devcluster import controlplane as cp

LAYOUT = node.NodeLayout(Path("/srv/dtr/node"))
PINS = node.pinned(node.HERE / "versions.env")
VALUES = {**PINS, "DNS_IP": node.DNS_IP, "CLUSTER_DOMAIN": node.CLUSTER_DOMAIN,
          "LOCAL_PATH_CONFIG": json.dumps(node.local_path_config(Path("/srv/dtr/node/storage")))}


def docs(addon: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(node.render_addon(addon, VALUES)) if d]


def images(objects: list[dict]) -> set[str]:
    return {c["image"] for o in objects if o["kind"] == "Deployment"
            for c in o["spec"]["template"]["spec"]["containers"]}


def test_every_addon_renders_with_the_pinned_images():
    assert images(docs("coredns")) == {PINS["COREDNS_IMAGE"]}
    local_path = docs("local-path")
    assert images(local_path) == {PINS["LOCAL_PATH_PROVISIONER_IMAGE"]}
    helper = next(o for o in local_path if o["kind"] == "ConfigMap")["data"]
    assert yaml.safe_load(helper["helperPod.yaml"])["spec"]["containers"][0]["image"] == PINS["BUSYBOX_IMAGE"]
    assert json.loads(helper["config.json"])["nodePathMap"][0]["paths"] == ["/srv/dtr/node/storage"]
    assert '"$VOL_DIR"' in helper["setup"]  # a shell variable, not a template hole


def test_local_path_is_the_default_storage_class_binding_where_the_pod_lands():
    sc = next(o for o in docs("local-path") if o["kind"] == "StorageClass")
    assert sc["metadata"]["name"] == "local-path"
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer"


def test_cluster_dns_answers_cluster_names_only_at_the_kubelets_address():
    objects = docs("coredns")
    corefile = next(o for o in objects if o["kind"] == "ConfigMap")["data"]["Corefile"]
    assert "forward" not in corefile, "nothing may ask a nameserver off this machine"
    service = next(o for o in objects if o["kind"] == "Service")
    assert service["spec"]["clusterIP"] == node.DNS_IP
    assert node.kubelet_config(LAYOUT, Path("/pki"))["clusterDNS"] == [node.DNS_IP]


def test_containerd_config_is_version_3_with_our_runc_cni_and_pinned_sandbox():
    config = tomllib.loads(node.containerd_config(LAYOUT, Path("/cache/bin"), [Path("/usr/lib/cni")]))
    assert config["version"] == 3
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["netns_mounts_under_state_dir"] is True  # pods' netns go with the node's state
    assert runtime["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == "/cache/bin/runc"
    assert runtime["cni"] == {"bin_dirs": ["/usr/lib/cni"], "conf_dir": "/srv/dtr/node/cni/net.d"}
    images_ = config["plugins"]["io.containerd.cri.v1.images"]
    assert images_["pinned_images"]["sandbox"] == PINS["PAUSE_IMAGE"]


def test_cni_keeps_pod_traffic_on_the_bridge():
    bridge = node.cni_conflist(LAYOUT)["plugins"][0]
    assert (bridge["bridge"], bridge["ipMasq"], bridge["isGateway"]) == (node.BRIDGE, False, True)
    assert bridge["ipam"]["ranges"] == [[{"subnet": node.POD_CIDR, "gateway": node.NODE_IP}]]


def test_network_policies_serve_this_node_under_its_name_and_listen_on_loopback_only():
    args = node.network_policies_args(Path("/bin/knp"), 9999)
    assert args[0] == "/bin/knp"
    assert f"--hostname-override={node.NODE_NAME}" in args  # its pods' policies, no other node's
    assert "--metrics-bind-address=127.0.0.1:9999" in args  # upstream's default is every interface
    assert "kube-network-policies" in node.COMPONENTS


def test_kubelet_keeps_imported_images_and_runs_on_cgroup_v1():
    config = node.kubelet_config(LAYOUT, Path("/pki"))
    assert config["imageGCHighThresholdPercent"] == 100
    assert (config["failCgroupV1"], config["cgroupDriver"]) == (False, "cgroupfs")
    assert config["authentication"]["anonymous"] == {"enabled": False}


def test_the_machines_node_is_found_only_while_its_processes_run(tmp_path, monkeypatch):
    import subprocess
    import time

    owner, root = tmp_path / "owner", tmp_path / "node"
    monkeypatch.setattr(node, "OWNER", owner)
    assert node.running_node_dir() is None  # no node ever started here
    (root / "pids").mkdir(parents=True)
    owner.write_text(f"{root}\n")
    sleeper = subprocess.Popen(["/bin/sleep", "30"])
    try:
        (root / "pids" / "containerd").write_text(f"{sleeper.pid} /bin/sleep\n")
        # Popen can return before /proc shows the new command line (seen once, in a make test run).
        deadline = time.monotonic() + 5
        while not node.cp.pid_runs(sleeper.pid, "/bin/sleep") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert node.running_node_dir() == root
    finally:
        sleeper.kill()
        sleeper.wait()
    assert node.running_node_dir() is None, "a crashed node's leftovers do not block the next one"


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    import socket

    from devcluster.controlplane import HIGH_PORT, LOW_PORT, free_ports

    low, _ = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(LOW_PORT <= p < HIGH_PORT < low for p in ports), ports
    for p in ports:
        with socket.socket() as s:
            s.bind(("0.0.0.0", p))  # as TF's gRPC server binds: every interface


def test_a_port_block_is_its_share_of_the_range_and_a_bad_one_is_named() -> None:
    from devcluster.controlplane import HIGH_PORT, LOW_PORT, PORT_BLOCK_ENV, ControlPlaneError, port_range

    assert port_range({}) == range(LOW_PORT, HIGH_PORT)
    blocks = [port_range({PORT_BLOCK_ENV: f"{i}/24"}) for i in range(24)]
    assert [len(b) for b in blocks] == [500] * 24 and blocks[0].start == LOW_PORT and blocks[-1].stop <= HIGH_PORT
    assert all(a.stop <= b.start for a, b in itertools.pairwise(blocks)), "the blocks do not overlap"
    for bad in ("24/24", "1", "-1/4", "a/b", "0/0", "0/100000"):
        with pytest.raises(ControlPlaneError, match=PORT_BLOCK_ENV):
            port_range({PORT_BLOCK_ENV: bad})


def test_free_ports_stay_in_the_block_and_go_round_it_before_handing_a_port_out_again(monkeypatch) -> None:
    from devcluster import controlplane

    monkeypatch.setenv(controlplane.PORT_BLOCK_ENV, "7/24")
    block = controlplane.port_range()
    handed = [p for _ in range(len(block) // 4) for p in controlplane.free_ports(2)]
    assert set(handed) <= set(block)
    # Free ports taken in turn: none twice until most of the block has gone by (a few may be busy here).
    assert len(set(handed)) == len(handed), "a port handed out twice in one pass of the block"


# ---- several nodes (devcluster/cluster.py): each node's own names, the shared parts

def test_the_single_nodes_spec_is_the_node_as_it_always_was():
    spec = node.NodeSpec()
    assert (spec.name, spec.ip, spec.run_dir, spec.netns, spec.cgroup_root) == (
        node.NODE_NAME, node.NODE_IP, node.RUN_DIR, None, None)
    config = node.kubelet_config(LAYOUT, Path("/pki"))
    assert "cgroupRoot" not in config and config["healthzBindAddress"] == "127.0.0.1"


def test_each_of_several_nodes_has_its_own_namespace_address_cgroup_root_and_socket():
    specs = [cluster.node_spec(i) for i in (1, 2, 3)]
    for field in ("name", "ip", "run_dir", "netns", "cgroup_root"):
        assert len({getattr(s, field) for s in specs}) == 3, field
    spec = specs[1]
    layout = node.NodeLayout(Path("/srv/c/nodes/n2"), spec.run_dir)
    assert len(str(layout.socket)) < 108  # a unix socket's path
    kubelet = node.kubelet_config(layout, Path("/pki"), spec)
    assert kubelet["cgroupRoot"] == "/dtr-n2"  # else each kubelet kills the others' pods as orphans
    assert kubelet["address"] == kubelet["healthzBindAddress"] == "10.40.0.2"  # probed from the host
    assert "--hostname-override=dtr-n2" in node.kubelet_args(Path("kubelet"), layout, spec)
    proxy = node.kube_proxy_config(Path("k"), 10256, 10249, spec)
    assert (proxy["clusterCIDR"], proxy["hostnameOverride"]) == (cluster.POD_NETWORK, "dtr-n2")


def test_flannel_hands_pods_their_own_address_across_nodes():
    layout = node.NodeLayout(Path("/srv/c/nodes/n1"), cluster.node_spec(1).run_dir)
    plugin = node.flannel_conflist(layout)["plugins"][0]
    assert plugin["type"] == "flannel" and plugin["subnetFile"] == "/run/dtr-multi/n1/flannel/subnet.env"
    # masquerading would hide a pod behind its node's address, and NetworkPolicy on the other node refuse it
    assert plugin["delegate"]["ipMasq"] is False
    assert node.flannel_net_conf(cluster.POD_NETWORK)["Backend"] == {"Type": "host-gw"}
    # each node's addresses recorded under its own directory: in host-local's default one the nodes shared a
    # last_reserved_ip, and a new pod took the address of one just gone
    others = node.NodeLayout(Path("/srv/c/nodes/n2"), cluster.node_spec(2).run_dir)
    ipam, other = plugin["ipam"], node.flannel_conflist(others)["plugins"][0]["ipam"]
    assert ipam == {"type": "host-local", "dataDir": "/srv/c/nodes/n1/cni/ipam"} and ipam != other


def test_local_path_keeps_readwriteonce_on_a_node_and_shares_one_directory():
    storage = {"dtr-n1": Path("/c/nodes/n1/storage"), "dtr-n2": Path("/c/nodes/n2/storage")}
    classes = cluster.local_path_config(storage, Path("/c/shared"))["storageClassConfigs"]
    assert classes["local-path"]["nodePathMap"][1] == {"node": "dtr-n2", "paths": ["/c/nodes/n2/storage"]}
    assert classes[cluster.SHARED_CLASS] == {"sharedFileSystemPath": "/c/shared"}
    assert cluster.shared_storage_class()["provisioner"] == "rancher.io/local-path"


def test_only_a_cluster_of_several_nodes_gets_pod_subnets_and_quick_node_faults():
    layout, ports = cp.Layout(Path("/c/cp")), cp.Ports(*range(1, 8))
    one = cp.controller_manager_args(Path("kcm"), layout, ports, node=True)
    several = cp.controller_manager_args(Path("kcm"), layout, ports, node=True, pod_network=cluster.POD_NETWORK)
    assert not any(a.startswith("--allocate-node-cidrs") for a in one)
    assert "--allocate-node-cidrs=true" in several and "--cluster-cidr=10.244.0.0/16" in several
    controllers = next(a for a in several if a.startswith("--controllers=")).split("=", 1)[1].split(",")
    assert {"node-ipam-controller", "taint-eviction-controller"} <= set(controllers)
    api = cp.apiserver_args(Path("api"), layout, ports, node_ip=cluster.HOST_IP, pod_network=cluster.POD_NETWORK)
    assert "--enable-aggregator-routing=true" in api  # no kube-proxy on the host: webhooks at their pods
    assert "--enable-aggregator-routing=true" not in cp.apiserver_args(Path("api"), layout, ports, node_ip="10.42.0.1")


def test_an_allow_list_setting_gains_a_value_once_and_keeps_what_it_listed():
    listing = "DTR_ALLOWED_STORAGE_CLASSES=shared-path\nDTR_ALLOWED_OBJECT_STORES=https://a:443, http://b:80\n"
    endpoint = s3.service_endpoint()
    assert cluster.widened_setting(listing, "DTR_ALLOWED_OBJECT_STORES", endpoint) == \
        f"DTR_ALLOWED_OBJECT_STORES=https://a:443,http://b:80,{endpoint}"  # fmt: skip
    assert cluster.widened_setting("", "DTR_ALLOWED_OBJECT_STORES", endpoint) == f"DTR_ALLOWED_OBJECT_STORES={endpoint}"
    assert cluster.widened_setting(listing, "DTR_ALLOWED_STORAGE_CLASSES", "shared-path") is None
    assert cluster.widened_setting(listing, "DTR_ALLOWED_STORAGE", "x") == "DTR_ALLOWED_STORAGE=x"  # a prefix is not it


def test_the_s3_servers_image_is_the_one_make_s3_build_makes_or_a_line_saying_so(tmp_path: Path) -> None:
    with pytest.raises(node.NodeError, match=r"optional/seaweedfs.tar is missing; run `make s3-build`"):
        node.s3_image(tmp_path)
    tar = tmp_path / "images" / "optional" / "seaweedfs.tar"
    tar.parent.mkdir(parents=True)
    tar.write_bytes(b"")
    assert node.s3_image(tmp_path) == tar


def test_every_nodes_import_reaches_its_own_containerd_in_kubernetes_namespace():
    plane = cp.ControlPlane(Path("/c/control-plane"), stop_at_exit=False)
    nodes = [node.Node(plane, Path(f"/c/nodes/n{i}"), build=False, stop_at_exit=False, spec=cluster.node_spec(i))
             for i in (1, 2)]  # fmt: skip
    argvs = [n.import_argv(Path("/cache/x.tar")) for n in nodes]
    assert [a[a.index("--address") + 1] for a in argvs] == [str(n.layout.socket) for n in nodes]
    assert all(a[-5:] == ["k8s.io", "images", "import", "--no-unpack=false", "/cache/x.tar"] for a in argvs)


def test_purge_removes_a_stopped_nodes_images_pods_and_volumes_keeps_its_logs_and_refuses_while_mounted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("containerd/root/io.containerd.snapshotter.v1.overlayfs", "kubelet/root/pods", "storage/pvc-1",
                 "logs", "pod-logs/ns_pod"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "imported-images").write_text("sha256:1")
    (tmp_path / "logs" / "kubelet.log").write_text("kept")
    monkeypatch.setattr(node, "mounts_below", lambda root: [str(root / "kubelet/root/pods/x/volumes/shared")])
    with pytest.raises(node.NodeError, match="still mounted below it"):
        node.purge(tmp_path)
    assert (tmp_path / "storage" / "pvc-1").is_dir()
    monkeypatch.setattr(node, "mounts_below", lambda root: [])
    node.purge(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "pod-logs"]
    assert (tmp_path / "logs" / "kubelet.log").read_text() == "kept"


def test_the_seeded_webhook_secret_is_the_pair_the_rotator_reads_where_it_reads_it(tmp_path: Path) -> None:
    for name in cp.WEBHOOK_SECRET_KEYS:
        (tmp_path / name).write_bytes(f"-- {name} --\n".encode())
    secret = cp.webhook_secret(tmp_path)
    assert secret["metadata"] == {"name": "training-operator-webhook-cert", "namespace": "kubeflow"}
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded == {name: f"-- {name} --\n" for name in ("ca.crt", "ca.key", "tls.crt", "tls.key")}

