"""Several real nodes on one machine: the control plane and N nodes (devcluster/node.py), each node in a
network namespace of its own with its own containerd, runc, kubelet, kube-proxy, kube-network-policies
and flanneld (host-gw), joined by the host bridge `dtrn0`.

    python -m devcluster.cluster up|down|status [--nodes 3] [--dir DIR] [--install]

What each node has of its own, and what the nodes share (docs/cluster.md#several-nodes):
- its own: network namespace `dtr-nN` (address 10.40.0.N on dtrn0; its pods in the /24 of 10.244.0.0/16
  the controller-manager allocates and flannel leases), containerd (root, state, socket under
  /run/dtr-multi/nN), kubelet (cgroup root /dtr-nN, so no kubelet takes another's pods for orphans),
  iptables and nftables rules, CNI bridge `cni0`, local volumes (DIR/nodes/nN/storage);
- shared: the host's mount namespace (a kubelet's volume mounts must be seen by its runc; node paths
  keep them apart), the machine's CPUs and memory (each node reports all of them), and DIR/shared,
  the `shared-path` StorageClass: a directory every node mounts at one path, the stand-in for an
  NFS/CephFS volume (this kernel has no NFS client) that lets a ReadWriteMany claim span nodes.

The machine's single node (devcluster/node.py, bridge dtr0, 10.42.0.0/24) may run beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from devcluster import controlplane as cp
from devcluster import node as nd
from devcluster import s3

DEFAULT_DIR = cp.REPO / ".dtr" / "cluster"
BRIDGE = "dtrn0"
HOST_IP = "10.40.0.254"  # the host's end of the nodes' bridge: the apiserver, as the nodes reach it
POD_NETWORK = "10.244.0.0/16"
RUN_ROOT = Path("/run/dtr-multi")
IPTABLES_CHAIN = "DTR-MULTI-FORWARD"
CGROUP_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd")
SHARED_CLASS = "shared-path"
MAX_NODES = 9
OWNER = RUN_ROOT / "owner"  # the directory of the cluster that holds the names above (one per machine)


class ClusterError(cp.ControlPlaneError):
    """A failure with a one-line explanation for a person."""


# ---------------------------------------------------------------- pure parts


def running_cluster_dir() -> Path | None:
    """The directory of the cluster of several nodes that runs on this machine now, if any (its apiserver lives)."""
    try:
        root = Path(OWNER.read_text().strip())
    except OSError:
        return None
    plane = cp.ControlPlane(root / "control-plane", stop_at_exit=False)
    return root if any(plane.status().values()) else None


def node_spec(index: int) -> nd.NodeSpec:
    return nd.NodeSpec(
        name=f"dtr-n{index}",
        ip=f"10.40.0.{index}",
        run_dir=RUN_ROOT / f"n{index}",
        netns=f"dtr-n{index}",
        cgroup_root=f"/dtr-n{index}",
        cluster_cidr=POD_NETWORK,
        shared=True,
    )


def veth_name(spec: nd.NodeSpec) -> str:
    """The host's end of the node's veth (its other end is the node's eth0)."""
    return f"dtrv-{spec.name.removeprefix('dtr-')}"


def local_path_config(storage: Mapping[str, Path], shared: Path) -> dict[str, object]:
    """local-path-provisioner's config: `local-path` (the default class) keeps each volume on the node of
    its first pod (a ReadWriteOnce claim, node affinity on its PV); `shared-path` puts every volume in a
    directory all nodes mount (any access mode, no node affinity)."""
    return {
        "storageClassConfigs": {
            "local-path": {"nodePathMap": [{"node": name, "paths": [str(path)]} for name, path in storage.items()]},
            SHARED_CLASS: {"sharedFileSystemPath": str(shared)},
        }
    }


def shared_storage_class() -> dict[str, object]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": SHARED_CLASS,
            "annotations": {"distml.dev/stand-in": "a host directory every node mounts, standing in for NFS/CephFS"},
        },
        "provisioner": "rancher.io/local-path",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }


def widened_setting(listing: str, name: str, value: str) -> str | None:
    """The operator's comma-separated allow-list setting `name` with `value` added, as `kubectl set env` takes it
    (NAME=a,b), from `kubectl set env --list`'s lines; None when it lists `value` already."""
    current = next((line.split("=", 1)[1] for line in listing.splitlines() if line.startswith(f"{name}=")), "")
    items = [item.strip() for item in current.split(",") if item.strip()]
    return None if value in items else f"{name}={','.join([*items, value])}"


# ---------------------------------------------------------------- host I/O


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return nd.run(["ip", *args], check=check)


def plumb_host() -> None:
    """The nodes' bridge with the host's address, forwarding, and a FORWARD accept for the bridge (Docker's
    FORWARD policy is DROP, and frames between nodes cross it once br_netfilter hands them to iptables)."""
    if ip("link", "show", BRIDGE, check=False).returncode != 0:
        ip("link", "add", BRIDGE, "type", "bridge")
    if HOST_IP not in ip("-4", "addr", "show", BRIDGE).stdout:
        ip("addr", "add", f"{HOST_IP}/24", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")
    for module in ("br_netfilter", "overlay", "nfnetlink_queue"):
        nd.run(["modprobe", module], check=False)
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
    if nd.run(["iptables", "-n", "-L", IPTABLES_CHAIN], check=False).returncode != 0:
        nd.run(["iptables", "-N", IPTABLES_CHAIN])
    nd.run(["iptables", "-F", IPTABLES_CHAIN])
    nd.run(["iptables", "-A", IPTABLES_CHAIN, "-i", BRIDGE, "-j", "ACCEPT"])
    nd.run(["iptables", "-A", IPTABLES_CHAIN, "-o", BRIDGE, "-j", "ACCEPT"])
    if nd.run(["iptables", "-C", "FORWARD", "-j", IPTABLES_CHAIN], check=False).returncode != 0:
        nd.run(["iptables", "-I", "FORWARD", "1", "-j", IPTABLES_CHAIN])


def plumb_node(spec: nd.NodeSpec) -> None:
    """The node's network namespace on the bridge, and its kubelet's cgroup root."""
    netns = str(spec.netns)
    unplumb_node(spec)
    ip("netns", "add", netns)
    veth = veth_name(spec)
    ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
    ip("link", "set", veth, "master", BRIDGE, "up")
    inside = ["ip", "netns", "exec", netns]
    nd.run([*inside, "ip", "addr", "add", f"{spec.ip}/24", "dev", "eth0"])
    nd.run([*inside, "ip", "link", "set", "eth0", "up"])
    nd.run([*inside, "ip", "link", "set", "lo", "up"])
    nd.run([*inside, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
    root = str(spec.cgroup_root).strip("/")
    for controller in CGROUP_CONTROLLERS:
        (Path("/sys/fs/cgroup") / controller / root).mkdir(exist_ok=True)
    # The kubelet checks that its root exists; a cpuset cgroup takes no task before it has CPUs and memory.
    cpuset = Path("/sys/fs/cgroup/cpuset")
    for knob in ("cpuset.cpus", "cpuset.mems"):
        (cpuset / root / knob).write_text((cpuset / knob).read_text())


def unplumb_node(spec: nd.NodeSpec) -> None:
    """What plumb_node made (the namespace takes its iptables and nftables rules and cni0 along)."""
    ip("netns", "del", str(spec.netns), check=False)
    ip("link", "del", veth_name(spec), check=False)
    root = str(spec.cgroup_root).strip("/")
    for controller in CGROUP_CONTROLLERS:
        top = Path("/sys/fs/cgroup") / controller / root
        if top.is_dir():
            for path, _dirs, _files in sorted(os.walk(top), key=lambda item: -len(item[0])):
                with contextlib.suppress(OSError):
                    os.rmdir(path)


def route_pods(spec: nd.NodeSpec, pod_cidr: str) -> None:
    """The host's route to a node's pods (the apiserver calls webhooks at their pods' addresses)."""
    ip("route", "replace", pod_cidr, "via", spec.ip, "dev", BRIDGE)


def unplumb_host() -> None:
    for line in ip("route", "show", "dev", BRIDGE, check=False).stdout.splitlines():
        words = line.split()
        if "via" in words:
            ip("route", "del", words[0], "dev", BRIDGE, check=False)
    nd.run(["iptables", "-D", "FORWARD", "-j", IPTABLES_CHAIN], check=False)
    nd.run(["iptables", "-F", IPTABLES_CHAIN], check=False)
    nd.run(["iptables", "-X", IPTABLES_CHAIN], check=False)
    ip("link", "del", BRIDGE, check=False)


# ---------------------------------------------------------------- the cluster


class Cluster:
    """The control plane and `nodes` real nodes, with CoreDNS, local-path and a scheduler."""

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        nodes: int = 3,
        stop_at_exit: bool = True,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if not 1 <= nodes <= MAX_NODES:
            raise ClusterError(f"NODES must be 1..{MAX_NODES}, not {nodes}")
        self.root = Path(workdir).resolve()
        self.log = log or (lambda msg: None)
        self.plane = cp.ControlPlane(self.root / "control-plane", stop_at_exit=stop_at_exit, log=self.log,
                                     node_ip=HOST_IP, pod_network=POD_NETWORK)  # fmt: skip
        self.nodes = [
            nd.Node(self.plane, self.root / "nodes" / f"n{i}", build=False, stop_at_exit=stop_at_exit, log=self.log,
                    spec=node_spec(i), apiserver_ip=HOST_IP)
            for i in range(1, nodes + 1)
        ]
        self._procs = cp.Supervisor(self.root / "cluster", stop_at_exit, self.log)

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    @property
    def shared(self) -> Path:
        """The `shared-path` class's directory: every node mounts it (the NFS stand-in)."""
        return self.root / "shared"

    def node(self, name: str) -> nd.Node:
        return next(n for n in self.nodes if n.spec.name == name)

    def start(self) -> float:
        """Everything up; returns the seconds it took after the build."""
        if any(self.plane.status().values()):
            raise ClusterError(f"a cluster already runs in {self.root}; run `down --dir {self.root}` first")
        other = running_cluster_dir()
        if other is not None and other != self.root:
            raise ClusterError(
                f"a cluster of several nodes already runs on this machine, from {other} (one at a time: the "
                f"bridge {BRIDGE}, the nodes' network namespaces and cgroups are named alike); stop it first: "
                f"python -m devcluster.cluster down --dir {other}"
            )
        self.stop()
        for script in (cp.BUILD_SH, nd.BUILD_NODE_SH):
            cp.run_build(script, self.plane.cache)
        cp.run_build(nd.BUILD_NODE_SH, self.plane.cache, "flannel")
        t0 = time.monotonic()
        try:
            self._start_all()
        except BaseException:
            self.stop()
            raise
        return round(time.monotonic() - t0, 1)

    def stop(self) -> None:
        other = running_cluster_dir()
        if other is not None and other != self.root:
            return  # another cluster holds the machine's names (sockets, namespaces): leave all of it alone
        for node in self.nodes:
            node.stop()
        for pid_file in (self.root / "cluster" / "pids").glob("*"):
            with contextlib.suppress(ValueError, OSError):
                pid, binary = pid_file.read_text().split(maxsplit=1)
                cp.terminate(int(pid), binary.strip())
        self.plane.stop()
        for node in self.nodes:
            unplumb_node(node.spec)
        unplumb_host()
        shutil.rmtree(RUN_ROOT, ignore_errors=True)

    def purge(self) -> None:
        """After stop: every node's images, pods and volumes, the saved images and the shared directory."""
        if left := nd.mounts_below(self.root):
            raise ClusterError(f"not purging {self.root}: still mounted below it: {', '.join(left[:3])}")
        for node in self.nodes:
            nd.purge(node.layout.root)
        for path in (self.root / "images.tar", self.root / "images.tar.ids"):
            path.unlink(missing_ok=True)
        shutil.rmtree(self.shared, ignore_errors=True)

    def running(self) -> dict[str, bool]:
        """component (per node) -> running."""
        out = {f"control-plane {c}": up for c, up in self.plane.status().items()}
        for node in self.nodes:
            alive = dict(node._running_pids())
            out.update({f"{node.spec.name} {c}": c in alive for c in node.components})
        return out

    def _start_all(self) -> None:
        for sub in ("logs", "pids"):
            shutil.rmtree(self.root / "cluster" / sub, ignore_errors=True)
            (self.root / "cluster" / sub).mkdir(parents=True)
        self.shared.mkdir(parents=True, exist_ok=True)
        RUN_ROOT.mkdir(parents=True, exist_ok=True)
        OWNER.write_text(f"{self.root}\n")
        plumb_host()
        for node in self.nodes:
            plumb_node(node.spec)
        self.plane.start()
        ports = self.plane.state().ports  # type: ignore[union-attr]
        admin = self.root / "cluster" / "kubeconfig"
        admin.write_text(self.plane.kubeconfig.read_text())
        scheduler = cp.loopback_component_args(cp.built_binary(self.plane.bin, "kube-scheduler", nd.BUILD_NODE_SH),
                                               admin, cp.free_port())  # fmt: skip
        self._procs.spawn("kube-scheduler", scheduler)
        # At once: each node's start mostly waits (its containerd, its kubelet registering, flannel's lease), and
        # every node has its own root, network namespace, shims and ports; the images' seed is made under its lock.
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            starts = [pool.submit(self._start_node, node) for node in self.nodes]
        for start in starts:
            start.result()  # the first node's failure; the cluster's stop takes every node down
        api = cp.Api(ports.apiserver, self.plane.layout.pki)
        for node in self.nodes:
            pod_cidr = api.ok("GET", f"/api/v1/nodes/{node.spec.name}")["spec"]["podCIDR"]
            route_pods(node.spec, pod_cidr)
        self._apply_addons()

    def _start_node(self, node: nd.Node) -> None:
        t0 = time.monotonic()
        node.start()
        self.log(f"{node.spec.name} ready in {time.monotonic() - t0:.1f} s")

    def _apply_addons(self) -> None:
        storage = {node.spec.name: node.storage for node in self.nodes}
        values = {
            **nd.pinned(nd.HERE / "versions.env"), "DNS_IP": nd.DNS_IP, "CLUSTER_DOMAIN": nd.CLUSTER_DOMAIN,
            "LOCAL_PATH_CONFIG": json.dumps(local_path_config(storage, self.shared)),
        }  # fmt: skip
        first = self.nodes[0]
        for addon in ("coredns", "local-path"):
            first.kubectl("apply", "--server-side", "-f", "-", input=nd.render_addon(addon, values))
        first.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(shared_storage_class()))
        for ns, deploy in (("kube-system", "coredns"), ("local-path-storage", "local-path-provisioner")):
            t0 = time.monotonic()
            first.kubectl("-n", ns, "rollout", "status", f"deployment/{deploy}", "--timeout=300s", timeout=320)
            self.log(f"{ns}/{deploy} available ({time.monotonic() - t0:.0f} s)")

    def install(self, settings: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """deploy/install.sh as on any cluster, the operator's and trainer's images imported into every
        node's containerd first (one `docker save`, one `ctr import` per node at once)."""
        ids = nd.built_image_ids()
        tar = self.root / "images.tar"
        if not ids:
            raise ClusterError("the operator's and trainer's images are not built: run `make images`")
        stamp = self.root / "images.tar.ids"
        # Nodes started with the images built have them from the seed already (devcluster/imagestore.py).
        stale = [node for node in self.nodes if not self._has_images(node, ids)]
        if stale and not (tar.exists() and stamp.exists() and stamp.read_text() == ids):
            t0 = time.monotonic()
            nd.run(["docker", "save", "-o", str(tar), *nd.image_names()], timeout=900)
            stamp.write_text(ids)
            self.log(f"docker save in {time.monotonic() - t0:.0f} s")
        seconds = self._import(tar, stale)
        for node in stale:
            (node.layout.root / "imported-images").write_text(ids)
        self.log(f"images imported into {len(stale)} node(s) in {seconds:.0f} s")
        existed = self._operator_exists()
        installed = self.nodes[0].install({"DTR_IMPORT": "none", "DTR_HOST_DIR": str(self.shared), **(settings or {})})
        if stale and existed and installed.returncode == 0:
            # The tag stays 0.1.0 when the images are rebuilt, and DTR_IMPORT=none keeps install.sh from restarting
            # the operator (it imported nothing): the operator kept running the old image, old CRD fields unknown.
            self._operator("rollout", "restart", "deploy/dtr-operator")
            self._operator("rollout", "status", "deploy/dtr-operator", "--timeout=300s", timeout=320)
        # Runs may ask for the class every node mounts, the one that lets their workers spread: the operator's
        # setting, as a cluster admin makes it (docs/operator.md#what-a-run-may-ask-of-the-cluster).
        self.allow("DTR_ALLOWED_STORAGE_CLASSES", SHARED_CLASS)
        return installed

    def _operator(self, *args: str, timeout: float = 300) -> str:
        return self.nodes[0].kubectl("-n", "dtr-system", *args, timeout=timeout)

    def _operator_exists(self) -> bool:
        try:
            return bool(self._operator("get", "deploy", "--ignore-not-found", "-o", "name").strip())
        except cp.ControlPlaneError:  # no namespace yet
            return False

    def allow(self, setting: str, value: str) -> None:
        """Add `value` to one of the installed operator's allow-lists (its environment twin, e.g.
        DTR_ALLOWED_OBJECT_STORES), as a cluster admin would, and wait for the operator's new pod."""
        widened = widened_setting(self._operator("set", "env", "deploy/dtr-operator", "--list"), setting, value)
        if widened is not None:
            self._operator("set", "env", "deploy/dtr-operator", widened)
            self._operator("rollout", "status", "deploy/dtr-operator", "--timeout=300s", timeout=320)

    def install_s3(self, bucket: str = s3.DEFAULT_BUCKET) -> Path:
        """The S3 server as a pod (devcluster/s3.py's manifests, as node.Node.install_s3: nd.deploy_s3) with new
        keys, its image imported into every node at once (`make s3-build`), and its Service's endpoint
        (s3.service_endpoint()) allowed by the operator (install() first). Returns an env file for this machine's
        tools (DIR/s3.env): the pod's own address as endpoint (the host routes to every node's pods; the
        Service's cluster IP exists only inside the nodes' network namespaces); pods use the Service's name."""
        seconds = self._import(nd.s3_image(self.plane.cache), self.nodes)
        self.log(f"S3 server's image imported into {len(self.nodes)} node(s) in {seconds:.0f} s")
        creds = nd.deploy_s3(self.nodes[0].kubectl, bucket, self.log)
        pods = self.nodes[0].kubectl("-n", s3.NAMESPACE, "get", "pods", "-l", f"app.kubernetes.io/name={s3.NAME}",
                                     "--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].status.podIP}")
        ip = pods.split()[0]
        self.allow("DTR_ALLOWED_OBJECT_STORES", s3.service_endpoint())
        env = self.root / "s3.env"
        s3.write_private(env, s3.env_file(s3.endpoint(ip, s3.POD_S3_PORT, tls=False), creds, bucket))
        return env

    def _has_images(self, node: nd.Node, ids: str) -> bool:
        marker = node.layout.root / "imported-images"
        # A node's start empties its containerd: the marker alone is not enough.
        return marker.exists() and marker.read_text() == ids and node.has_images()

    def _import(self, tar: Path, nodes: Sequence[nd.Node]) -> float:
        """One `ctr import` of `tar` per node, all at once; the seconds they took together."""
        t0 = time.monotonic()
        started = [(node, subprocess.Popen(node.import_argv(tar), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                           text=True)) for node in nodes]  # fmt: skip
        for node, proc in started:
            _, err = proc.communicate(timeout=1200)
            if proc.returncode != 0:
                raise ClusterError(f"ctr import of {tar.name} into {node.spec.name} failed: {err.strip()[-400:]}")
        return time.monotonic() - t0


# ---------------------------------------------------------------- CLI


def up(cluster: Cluster, install: bool, with_s3: bool, say: Callable[[str], None]) -> None:
    seconds = cluster.start()
    say(f"{len(cluster.nodes)} node(s) up in {seconds} s")
    if install:
        t1 = time.monotonic()
        installed = cluster.install()
        print(installed.stdout, file=sys.stderr)
        say(f"training-operator and the operator installed in {time.monotonic() - t1:.0f}s")
    if with_s3:
        t1 = time.monotonic()
        env = cluster.install_s3()
        say(f"S3 server installed in {time.monotonic() - t1:.0f}s; for this machine's tools: {env}")
    print(f"export KUBECONFIG={cluster.kubeconfig}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--dir", default=str(DEFAULT_DIR), help=f"working directory (default {DEFAULT_DIR})")
    parser.add_argument("--nodes", type=int, default=3, help="how many nodes (default 3)")
    parser.add_argument("--install", action="store_true",
                        help="then deploy/install.sh: images (built), training-operator, the operator (deploy/)")
    parser.add_argument("--s3", action="store_true",
                        help="up --install: and an S3 server as a pod in dtr-s3, its endpoint allowed by the operator "
                             "(`make s3-build` first; devcluster/s3.py)")
    parser.add_argument("--purge", action="store_true",
                        help="down: then remove the nodes' images, pods and volumes (about 4 GB a node); logs stay")
    args = parser.parse_args(argv)
    if args.s3 and not args.install:
        parser.error("--s3 needs --install (the operator must allow the S3 server's endpoint)")
    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"[cluster {time.monotonic() - t0:5.1f}s] {msg}", file=sys.stderr)

    root = Path(args.dir)
    nodes = args.nodes
    if args.command != "up":  # as many as were started
        nodes = max(1, len(list((root / "nodes").glob("n*")))) if (root / "nodes").is_dir() else 1
    try:
        cluster = Cluster(root, nodes, stop_at_exit=False, log=say)
        if args.command == "up":
            up(cluster, args.install, args.s3, say)
            return 0
        if args.command == "down":
            cluster.stop()
            (root / "s3.env").unlink(missing_ok=True)  # install_s3's: its keys went with the cluster's etcd
            if args.purge:
                cluster.purge()
            say("down, images and volumes removed" if args.purge else "down")
            return 0
        running = cluster.running()
        for component, runs in running.items():
            print(f"{component:40} {'running' if runs else 'stopped'}")
        return 0 if all(running.values()) else 1
    except cp.ControlPlaneError as err:
        say(f"error: {err}")
        if args.command == "up":
            say(f"stopping what was started; logs stay in {root}")
            Cluster(root, nodes, stop_at_exit=False, log=say).stop()
        return 1


if __name__ == "__main__":
    sys.exit(main())
