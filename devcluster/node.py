"""A real Kubernetes node for the local control plane: the parts k3s bundles, as host processes.

containerd (with runc and Debian's CNI plugins: one bridge, host-local IPAM), kubelet,
kube-scheduler, kube-proxy (iptables) and kube-network-policies (NetworkPolicy: nftables + NFQUEUE),
then CoreDNS, local-path-provisioner (the default
StorageClass `local-path`) and the Kubeflow training-operator from its own standalone manifests,
all three as pods from images built here (devcluster/build_node.sh) and imported with
`ctr -n k8s.io images import`, never pulled.

Only one node runs on a machine at a time: containerd's socket, the bridge, the iptables rules
and kubelet's port are the machine's. Pod and service traffic stays on the bridge `dtr0`
(pods 10.42.0.0/24, the node itself is 10.42.0.1) and in the namespaces the node creates.

    python -m devcluster.node up|down|status [--dir DIR]

Python 3.11 standard library; PyYAML through controlplane.py for the CRDs.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import string
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from devcluster import controlplane as cp
from devcluster import imagestore, s3

HERE = Path(__file__).resolve().parent

BUILD_NODE_SH = HERE / "build_node.sh"
INSTALL_SH = cp.REPO / "deploy" / "install.sh"
ADDONS = HERE / "addons"
DEFAULT_DIR = cp.REPO / ".dtr" / "node"

NODE_NAME = "dtr-node"
BRIDGE = "dtr0"
POD_CIDR = "10.42.0.0/24"
NODE_IP = "10.42.0.1"  # the bridge's own address: kubelet, the apiserver's advertised address
DNS_IP = "10.0.0.10"  # in controlplane.SERVICE_CIDR
CLUSTER_DOMAIN = "cluster.local"
KUBELET_PORT = 10250
# containerd's sockets must fit a unix socket path (108 bytes): a short fixed home, not DIR.
RUN_DIR = Path("/run/dtr-node")
IPTABLES_CHAIN = "DTR-NODE-FORWARD"
OWNER = RUN_DIR / "owner"  # the directory of the node that holds the machine's node resources
NFT_TABLE = "kube-network-policies"  # the inet table kube-network-policies writes (its default name)

# Start order; teardown runs in reverse.
COMPONENTS = ("containerd", "kubelet", "kube-scheduler", "kube-proxy", "kube-network-policies")

START_TIMEOUT = 180.0


@dataclass(frozen=True)
class NodeSpec:
    """What makes a node one node among others. The defaults are the machine's single node, in the
    host's network namespace; devcluster/cluster.py gives each of several nodes its own."""

    name: str = NODE_NAME
    ip: str = NODE_IP
    # containerd's sockets and state (a unix socket path must fit 108 bytes: a short fixed home).
    run_dir: Path = RUN_DIR
    # A network namespace of its own (/run/netns/<netns>); None: the host's.
    netns: str | None = None
    # The kubelet's cgroup root: several kubelets under one root would each kill the others' pods
    # as orphans. None: the kubelet's default (/).
    cgroup_root: str | None = None
    # The pods' network: the node's own subnet (the bridge plugin's), or the cluster's (flannel's).
    cluster_cidr: str = POD_CIDR
    # One of several nodes: flannel connects the pods, the cluster (not the node) runs the scheduler
    # and the add-ons, and faults are quicker to see (devcluster/cluster.py).
    shared: bool = False

    @property
    def probe_ip(self) -> str:
        """Where the node's health endpoints listen: reachable from the host, where the probes run."""
        return self.ip if self.netns else "127.0.0.1"


class NodeError(cp.ControlPlaneError):
    """A failure with a one-line explanation for a person."""


# ---------------------------------------------------------------- pure parts


@dataclass(frozen=True)
class NodeLayout:
    """Where everything of the node lives under its directory (sockets excepted: run_dir)."""

    root: Path
    run_dir: Path = RUN_DIR

    def sub(self, name: str) -> Path:
        """containerd, kubelet, kube-proxy, cni, logs, pids, pod-logs, storage."""
        return self.root / name

    @property
    def socket(self) -> Path:
        return self.run_dir / "containerd" / "containerd.sock"


def containerd_config(layout: NodeLayout, bin_dir: Path, cni_bins: Sequence[Path]) -> str:
    """containerd 2.x (config version 3): CRI on its own socket, runc built here, the node's CNI."""
    return f"""version = 3
root = '{layout.sub('containerd')}/root'
state = '{layout.run_dir}/containerd/state'

[grpc]
  address = '{layout.socket}'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{pinned(HERE / "versions.env")["PAUSE_IMAGE"]}'
  [plugins.'io.containerd.cri.v1.runtime']
    # These machines refuse a negative oom_score_adj even to root: without this every sandbox fails.
    restrict_oom_score_adj = true
    # Pods' network namespaces under the state dir, not the machine's /run/netns: a node's own.
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{bin_dir}/runc'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [{", ".join(f"'{d}'" for d in cni_bins)}]
      conf_dir = '{layout.sub('cni')}/net.d'
  [plugins.'io.containerd.grpc.v1.cri']
    # Image pulls are never made here; everything is imported.
    disable_tcp_service = true
"""


def cni_conflist(layout: NodeLayout) -> dict[str, object]:
    return {
        "cniVersion": "1.0.0",
        "name": "dtr",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,  # nothing leaves the machine: no masquerading to the outside
                "hairpinMode": True,  # a pod reaching itself through its Service
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.sub('cni') / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


FLANNEL_HEALTHZ_PORT = 10244
KUBE_PROXY_PORTS = (10256, 10249)  # healthz, metrics: a node's own netns has its ports to itself
NETWORK_POLICIES_METRICS_PORT = 9080


def flannel_conflist(layout: NodeLayout) -> dict[str, object]:
    """The CNI flannel meta-plugin (CNI spec <= 0.4.0): the bridge and host-local IPAM from the node's
    lease in subnet.env (flanneld writes it)."""
    return {
        "cniVersion": "0.4.0",
        "name": "dtr",
        "plugins": [
            {
                "type": "flannel",
                "subnetFile": str(layout.run_dir / "flannel" / "subnet.env"),
                "dataDir": str(layout.sub("cni") / "flannel"),
                # host-local's state per node, as the single node keeps it: in its default directory the three
                # nodes shared one last_reserved_ip, so each node handed out the lowest free address of its
                # subnet again, and a new pod often took the address of a pod gone a moment before.
                "ipam": {"type": "host-local", "dataDir": str(layout.sub("cni") / "ipam")},
                # ipMasq off: the plugin's default (on, since flanneld runs without --ip-masq) would hide a pod
                # behind its node's address on the way to another node, where NetworkPolicy must see the pod.
                "delegate": {"hairpinMode": True, "isDefaultGateway": True, "ipMasq": False},
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def flannel_net_conf(cluster_cidr: str) -> dict[str, object]:
    # host-gw: routes to each node's pod subnet through that node's address on the shared bridge; no
    # encapsulation, pod addresses kept (NetworkPolicy sees the real source).
    return {"Network": cluster_cidr, "EnableNFTables": False, "Backend": {"Type": "host-gw"}}


def _pod_cidr(api: cp.Api, node: str) -> bool | str:
    """True once the node is registered with a podCIDR, else why not (a Procs.wait readiness)."""
    status, found = api.call("GET", f"/api/v1/nodes/{node}")
    if status != 200:
        return "not registered"
    return bool((found.get("spec") or {}).get("podCIDR")) or "no podCIDR assigned yet"


def flanneld_args(binary: Path, layout: NodeLayout, kubeconfig: Path, spec: NodeSpec) -> list[str]:
    return [
        str(binary),
        "--kube-subnet-mgr",
        f"--kubeconfig-file={kubeconfig}",
        "--iface=eth0",  # the node's end of its veth (the netns has no default route to find it by)
        f"--subnet-file={layout.run_dir / 'flannel' / 'subnet.env'}",
        f"--net-config-path={layout.sub('flannel') / 'net-conf.json'}",
        f"--healthz-ip={spec.ip}",
        f"--healthz-port={FLANNEL_HEALTHZ_PORT}",
    ]


def kubelet_config(layout: NodeLayout, pki: Path, spec: NodeSpec = NodeSpec()) -> dict[str, object]:
    config: dict[str, object] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This host mounts cgroup v1 (kubelet 1.36 refuses it unless told); cgroupfs, not systemd.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{layout.socket}",
        "address": spec.ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": spec.probe_ip,
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDNS": [DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        # Pods resolve cluster names only: no upstream nameserver outside this machine.
        "resolvConf": str(layout.root / "resolv.conf"),
        "podLogsDir": str(layout.sub('pod-logs')),
        "failSwapOn": False,
        # Imported images are the only copies there are: never garbage-collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # A shared development disk may be fuller than kubelet's defaults like; memory stays guarded.
        "evictionHard": {"memory.available": "200Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "registerNode": True,
        "shutdownGracePeriod": "0s",
    }
    if spec.cgroup_root:
        config["cgroupRoot"] = spec.cgroup_root
    if spec.shared:
        # A node that stops is NotReady within the controller-manager's 20 s grace (cluster.py), not 50 s.
        config["nodeStatusUpdateFrequency"] = "4s"
        config["nodeLeaseDurationSeconds"] = 16
    return config


def kube_proxy_config(
    kubeconfig: Path, healthz_port: int, metrics_port: int, spec: NodeSpec = NodeSpec()
) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": spec.cluster_cidr,
        "hostnameOverride": spec.name,
        "healthzBindAddress": f"{spec.probe_ip}:{healthz_port}",
        "metricsBindAddress": f"{spec.probe_ip}:{metrics_port}",
        # Leave the machine's conntrack table size alone.
        "conntrack": {"maxPerCore": 0},
    }


def kubelet_args(binary: Path, layout: NodeLayout, spec: NodeSpec = NodeSpec()) -> list[str]:
    return [
        str(binary),
        f"--config={layout.sub('kubelet') / 'config.json'}",
        f"--kubeconfig={layout.sub('kubelet') / 'kubeconfig'}",
        f"--root-dir={layout.sub('kubelet') / 'root'}",
        f"--cert-dir={layout.sub('kubelet') / 'pki'}",
        f"--hostname-override={spec.name}",
        f"--node-ip={spec.ip}",
        "--v=1",
    ]


def scheduler_args(binary: Path, kubeconfig: Path, port: int) -> list[str]:
    return cp.loopback_component_args(binary, kubeconfig, port)


def network_policies_args(binary: Path, metrics_port: int, spec: NodeSpec = NodeSpec()) -> list[str]:
    """kube-network-policies as a host process (its kubeconfig comes in $KUBECONFIG, build_node.sh)."""
    return [
        str(binary),
        f"--hostname-override={spec.name}",  # it enforces the policies of this node's pods only
        f"--metrics-bind-address={spec.probe_ip}:{metrics_port}",  # its default is every interface
        "--v=1",
    ]


def pinned(versions_env: Path) -> dict[str, str]:
    """devcluster/versions.env as a dict (the image references the node's manifests name)."""
    out = {}
    for line in versions_env.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def local_path_config(storage: Path) -> dict[str, object]:
    """local-path-provisioner's config for the single node: every volume a directory under `storage`."""
    return {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [str(storage)]}]}


def render_addon(name: str, values: dict[str, str]) -> str:
    """devcluster/addons/<name>.yaml with ${...} filled in (a missing value is an error)."""
    return string.Template((ADDONS / f"{name}.yaml").read_text()).substitute(values)


# ---------------------------------------------------------------- host I/O


def run(argv: Sequence[str], check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        if not check:
            return subprocess.CompletedProcess(list(argv), 127, "", f"{argv[0]}: not found")
        raise NodeError(f"{argv[0]} not found on PATH (devcluster/build_node.sh installs the node's host packages)")
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    if check and proc.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return proc


def prepare_host_network() -> None:
    """The bridge with the node's address, forwarding, and a FORWARD accept for the bridge.

    Docker (when running) sets FORWARD's policy to DROP; pod-to-pod traffic crosses FORWARD once
    br_netfilter hands bridged frames to iptables, which kube-proxy's Service NAT needs.
    """
    if run(["ip", "link", "show", BRIDGE], check=False).returncode != 0:
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    if NODE_IP not in run(["ip", "-4", "addr", "show", BRIDGE]).stdout:
        run(["ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])
    run(["modprobe", "br_netfilter"], check=False)  # built in on some kernels
    run(["modprobe", "overlay"], check=False)
    run(["modprobe", "nfnetlink_queue"], check=False)  # kube-network-policies' NFQUEUE
    for key, value in (("net/ipv4/ip_forward", "1"), ("net/bridge/bridge-nf-call-iptables", "1")):
        path = Path("/proc/sys") / key
        if not path.exists():
            raise NodeError(f"{path} is missing: the kernel needs br_netfilter for Service traffic between pods")
        path.write_text(value)
    if run(["iptables", "-n", "-L", IPTABLES_CHAIN], check=False).returncode != 0:
        run(["iptables", "-N", IPTABLES_CHAIN])
    run(["iptables", "-F", IPTABLES_CHAIN])
    run(["iptables", "-A", IPTABLES_CHAIN, "-i", BRIDGE, "-j", "ACCEPT"])
    run(["iptables", "-A", IPTABLES_CHAIN, "-o", BRIDGE, "-j", "ACCEPT"])
    if run(["iptables", "-C", "FORWARD", "-j", IPTABLES_CHAIN], check=False).returncode != 0:
        run(["iptables", "-I", "FORWARD", "1", "-j", IPTABLES_CHAIN])


def cleanup_host_network() -> None:
    # kube-network-policies removes its table on SIGINT only; left behind, its NFQUEUE rules would drop
    # every packet of a policed pod address, with no one reading the queue.
    run(["nft", "delete", "table", "inet", NFT_TABLE], check=False)
    run(["iptables", "-D", "FORWARD", "-j", IPTABLES_CHAIN], check=False)
    run(["iptables", "-F", IPTABLES_CHAIN], check=False)
    run(["iptables", "-X", IPTABLES_CHAIN], check=False)
    # kube-proxy's and kubelet's own chains (KUBE-*): the jumps into them from the built-in chains,
    # then the chains. (`kube-proxy --cleanup` would need its config; this is what it removes.)
    for table in ("nat", "filter", "mangle"):
        rules = run(["iptables-save", "-t", table], check=False).stdout.splitlines()
        for rule in rules:
            words = shlex.split(rule)
            if words[:1] == ["-A"] and not words[1].startswith("KUBE-") and "-j" in words \
                    and words[words.index("-j") + 1].startswith("KUBE-"):  # fmt: skip
                run(["iptables", "-t", table, "-D", *words[1:]], check=False)
        chains = [rule[1:].split()[0] for rule in rules if rule.startswith(":KUBE-")]
        for flag in ("-F", "-X"):
            for chain in chains:
                run(["iptables", "-t", table, flag, chain], check=False)
    run(["ip", "link", "del", BRIDGE], check=False)


def running_node_dir() -> Path | None:
    """The directory of the node that runs on this machine now, if any (its containerd or kubelet lives)."""
    try:
        root = Path(OWNER.read_text().strip())
    except OSError:
        return None
    for component in ("containerd", "kubelet"):
        with contextlib.suppress(OSError, ValueError):
            pid, binary = (root / "pids" / component).read_text().split(maxsplit=1)
            if cp.pid_runs(int(pid), binary.strip()):
                return root
    return None


def mounts_below(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    return [m for m in (line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines())
            if m.startswith(prefix)]  # fmt: skip


def unmount_below(root: Path) -> None:
    """Unmount everything kubelet and containerd mounted under root (deepest first)."""
    for target in sorted(mounts_below(root), key=len, reverse=True):
        run(["umount", "-l", target], check=False)


# What a stopped node can do without: its images and their layers, kubelet's pod directories, its local
# volumes (about 4 GB a node after a CI run). Logs and pod logs stay.
DISPOSABLE = ("containerd", "kubelet", "storage", "imported-images")


def purge(root: Path) -> None:
    """Remove a stopped node's DISPOSABLE parts; refused while anything is still mounted below it (a bind
    mount's source would be removed with it)."""
    if left := mounts_below(root):
        raise NodeError(f"not purging {root}: still mounted below it: {', '.join(left[:3])}")
    for name in DISPOSABLE:
        path = root / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


# ---------------------------------------------------------------- the node


@dataclass
class NodeState:
    pids: dict[str, int]
    binaries: dict[str, str]
    started_at: float
    ready_seconds: float = 0.0


class Node:
    """A real node joined to `plane` (a ControlPlane started with node networking)."""

    def __init__(
        self,
        plane: cp.ControlPlane,
        workdir: str | os.PathLike[str],
        build: bool = True,
        stop_at_exit: bool = True,
        log: Callable[[str], None] | None = None,
        spec: NodeSpec = NodeSpec(),
        apiserver_ip: str = "127.0.0.1",
    ) -> None:
        """apiserver_ip: where the node's processes reach the control plane (from the node's netns)."""
        self.plane = plane
        self.spec = spec
        self.apiserver_ip = apiserver_ip
        self.layout = NodeLayout(Path(workdir).resolve(), spec.run_dir)
        self.build = build
        self.stop_at_exit = stop_at_exit
        self.log = log or (lambda msg: None)
        self._procs = cp.Supervisor(self.layout.root, stop_at_exit, self.log, netns=spec.netns)
        self.components = (
            ("containerd", "kubelet", "flanneld", "kube-proxy", "kube-network-policies") if spec.shared else COMPONENTS
        )

    @property
    def bin(self) -> Path:
        return self.plane.bin

    @property
    def storage(self) -> Path:
        """Where local-path puts each volume (<pv>_<namespace>_<pvc>), as k3s's storage dir."""
        return self.layout.sub('storage')

    # -- public

    def start(self) -> NodeState:
        other = None if self.spec.shared else running_node_dir()
        if other is not None:
            raise NodeError(
                f"a node already runs on this machine, from {other} (one at a time: containerd's socket, the "
                f"bridge and kubelet's port are the machine's); stop it first: python -m devcluster.node down "
                f"--dir {other.parent}"
            )
        self.stop()
        if self.build:
            self._build()
        seed = self._seed()
        t0 = time.monotonic()
        try:
            state = self._start_all(seed)
        except BaseException:
            self.stop()
            raise
        state.ready_seconds = round(time.monotonic() - t0, 2)
        if self.stop_at_exit:
            atexit.register(self.stop)
        return state

    def stop(self) -> None:
        """Everything the node started, its pods' containers, mounts, and host network changes."""
        pids = dict(self._running_pids())
        for component in reversed(self.components):
            if component == "containerd" and component in pids:
                self._remove_all_pods()
            if component in pids:
                cp.terminate(pids[component][0], pids[component][1])
        for proc in self._procs.children.values():
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        self._procs.children.clear()
        unmount_below(self.layout.root)
        if self.spec.shared:  # the cluster removes the node's network namespace, and with it its rules
            self._kill_shims(with_containers=True)
            unmount_below(self.spec.run_dir)
            shutil.rmtree(self.spec.run_dir, ignore_errors=True)
            return
        other = running_node_dir()
        if other is not None and other != self.layout.root:
            return  # another node holds the machine: leave its shims, network and state alone
        self._kill_shims(with_containers=True)  # what _remove_all_pods could not reach (containerd gone)
        unmount_below(RUN_DIR)
        cleanup_host_network()
        shutil.rmtree(RUN_DIR, ignore_errors=True)

    def log_file(self, component: str) -> Path:
        return self._procs.log_file(component)

    def ctr_argv(self, *args: str) -> list[str]:
        """ctr's command line against the node's containerd, in Kubernetes' namespace."""
        return [str(self.bin / "ctr"), "--address", str(self.layout.socket), "-n", "k8s.io", *args]

    def ctr(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return run(self.ctr_argv(*args), check=check, timeout=timeout)

    def import_argv(self, tar: Path) -> list[str]:
        """ctr's command line that imports an image tar into the node's containerd, unpacked."""
        return self.ctr_argv("images", "import", "--no-unpack=false", str(tar))

    def import_image(self, tar: Path) -> None:
        run(self.import_argv(tar), timeout=300)

    # -- faults (tests/reliability/test_node_faults.py)

    def kill(self, component: str) -> None:
        """SIGKILL one of the node's processes, as a crash would; what it started (containers) lives on."""
        pid, binary = dict(self._running_pids())[component]
        os.kill(pid, signal.SIGKILL)
        proc = self._procs.children.get(component)
        if proc is not None:
            proc.wait(timeout=30)
        deadline = time.monotonic() + 30  # not our child when another process started the node (tests/tiers.py)
        while cp.pid_runs(pid, binary) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self, component: str) -> None:
        """Start a killed component again, and wait until it serves."""
        self._procs.respawn(component)
        probe = self.spec.probe_ip
        ready: dict[str, Callable[[], bool | str]] = {
            "containerd": lambda: self.ctr("version", check=False, timeout=10).returncode == 0,
            "kubelet": lambda: cp.http_get(f"http://{probe}:10248/healthz")[0] == 200,
        }
        if self.spec.shared:  # their ports are fixed on a node of several (a single node's are picked at start)
            ready["flanneld"] = self._routes_to_other_nodes
            ready["kube-proxy"] = lambda: cp.http_get(f"http://{probe}:{KUBE_PROXY_PORTS[0]}/healthz")[0] == 200
            metrics = f"http://{probe}:{NETWORK_POLICIES_METRICS_PORT}/metrics"
            ready["kube-network-policies"] = lambda: cp.http_get(metrics)[0] == 200
        self._procs.wait(component, ready.get(component, lambda: True))

    def _routes_to_other_nodes(self) -> bool | str:
        """True once flanneld routes every other node's pod subnet from this node (host-gw), else which not."""
        api = cp.Api(self.plane.state().ports.apiserver, self.plane.layout.pki)  # type: ignore[union-attr]
        status, nodes = api.call("GET", "/api/v1/nodes")
        if status != 200:
            return f"nodes not listed ({status})"
        routes = run([*self.in_netns(), "ip", "route"], check=False).stdout
        missing = [n["spec"]["podCIDR"] for n in nodes.get("items", [])
                   if n["metadata"]["name"] != self.spec.name and n["spec"].get("podCIDR")
                   and not any(line.startswith(f"{n['spec']['podCIDR']} via ") for line in routes.splitlines())]
        return not missing or f"no route yet to {', '.join(missing)}"

    def reboot(self) -> None:
        """The whole node at once, as a power cut and a boot: the kubelet, containerd and every container
        die together (SIGKILL), then containerd and the kubelet start again; pods come back as the kubelet
        restarts their containers."""
        self.kill("kubelet")
        self.kill("containerd")
        self._kill_shims(with_containers=True)
        self.restart("containerd")
        self.restart("kubelet")

    def power_off(self) -> None:
        """A power cut of this node alone: every process of the node and every container under its shims die at
        once (SIGKILL). Its Node object stays; the control plane sees it NotReady once its heartbeats stop."""
        for component in reversed(self.components):
            if component in dict(self._running_pids()):
                self.kill(component)
        self._kill_shims(with_containers=True)

    def power_on(self) -> None:
        """The node boots again: its processes start as they were started, and the kubelet brings its pods back."""
        for component in self.components:
            if component not in dict(self._running_pids()):
                self.restart(component)

    # -- steps

    def _running_pids(self) -> list[tuple[str, tuple[int, str]]]:
        found = []
        pids_dir = self.layout.sub('pids')
        for component in self.components:
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid_s, binary = (pids_dir / component).read_text().split(maxsplit=1)
                if cp.pid_runs(int(pid_s), binary.strip()):
                    found.append((component, (int(pid_s), binary.strip())))
        for component, proc in self._procs.children.items():
            if proc.poll() is None and component not in dict(found):
                found.append((component, (proc.pid, str(proc.args[0]))))  # type: ignore[index]
        return found

    def _remove_all_pods(self) -> None:
        """Stop every pod sandbox through CRI, so runc's containers and their mounts go with them."""
        if not self.layout.socket.exists():
            return
        tasks = self.ctr("tasks", "ls", "-q", check=False, timeout=30).stdout.split()
        for task in tasks:
            self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False, timeout=30)
        deadline = time.monotonic() + 15
        while tasks and time.monotonic() < deadline:
            for task in tasks:
                self.ctr("tasks", "delete", "-f", task, check=False, timeout=30)
            tasks = self.ctr("tasks", "ls", "-q", check=False, timeout=30).stdout.split()

    def _kill_shims(self, with_containers: bool = False) -> None:
        """containerd's shims outlive it by design; a node that goes down takes its shims along (and, for a
        reboot, every container process under them first: a container's init outlives its shim). Only this
        node's: every node's shims run the one binary, each with its containerd's socket as -address."""
        shim = str(self.bin / "containerd-shim-runc-v2")
        address = str(self.layout.socket).encode()
        parents: dict[int, int] = {}
        shims = []
        for proc_dir in Path("/proc").iterdir():
            if not proc_dir.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int(proc_dir.name)
                parents[pid] = int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
                argv = (proc_dir / "cmdline").read_bytes().split(b"\0")
                if argv[0].decode() == shim and address in argv:
                    shims.append(pid)
        doomed = set(shims)
        if with_containers:
            grew = True
            while grew:
                below = {pid for pid, parent in parents.items() if parent in doomed} - doomed
                grew = bool(below)
                doomed |= below
        for pid in sorted(doomed, key=lambda p: p not in shims):  # containers first, then their shims
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def _build(self) -> None:
        self.log("build_node.sh (cached when built)")
        for script in (cp.BUILD_SH, BUILD_NODE_SH):
            cp.run_build(script, self.plane.cache)

    def _binary(self, name: str) -> Path:
        return cp.built_binary(self.bin, name, BUILD_NODE_SH)

    def _prepare_dir(self) -> None:
        unmount_below(self.layout.root)
        for sub in ("containerd", "kubelet", "cni", "logs", "pids", "pod-logs", "kube-proxy", "flannel"):
            shutil.rmtree(self.layout.root / sub, ignore_errors=True)
            (self.layout.root / sub).mkdir(parents=True)
        (self.layout.sub('cni') / "net.d").mkdir()
        self.storage.mkdir(parents=True, exist_ok=True)
        # Cluster names only (kubelet adds the cluster DNS server and search path to every pod).
        (self.layout.root / "resolv.conf").write_text("options ndots:5\n")
        self.spec.run_dir.mkdir(parents=True, exist_ok=True)
        if not self.spec.shared:
            OWNER.write_text(f"{self.layout.root}\n")

    def _kubeconfig(self, name: str, cert: str) -> Path:
        pki = self.plane.layout.pki
        doc = cp.kubeconfig_doc(
            self._server(), (pki / "ca.crt").read_bytes(), (pki / f"{cert}.crt").read_bytes(),
            (pki / f"{cert}.key").read_bytes(),
        )
        path = self.layout.root / name / "kubeconfig"
        path.write_text(json.dumps(doc, indent=2))
        path.chmod(0o600)
        return path

    def _server(self) -> str:
        state = self.plane.state()
        if state is None:
            raise NodeError(f"no control plane runs in {self.plane.dir}")
        return f"https://{self.apiserver_ip}:{state.ports.apiserver}"

    def _seed(self) -> tuple[Path, str] | None:
        """The seed of both images as built now (devcluster/imagestore.py) and their IDs; None when they are not
        built (no Docker, or `make images` not run): install() imports them then, as before."""
        ids = built_image_ids()
        if not ids:
            return None
        version = pinned(HERE / "versions.env")["CONTAINERD_VERSION"]
        try:
            return imagestore.seeded(self.plane.cache, self.bin, ids, image_names(), version, self.log), ids
        except imagestore.SeedError as err:
            raise NodeError(f"the images' seed for the node's containerd: {err}") from None

    def _start_all(self, seed: tuple[Path, str] | None = None) -> NodeState:
        spec, layout = self.spec, self.layout
        binaries = {c: self._binary(c) for c in self.components}
        for extra in ("ctr", "containerd-shim-runc-v2", "runc"):
            self._binary(extra)
        cni_bin = Path(os.environ.get("DTR_CNI_BIN", "/usr/lib/cni"))
        if not (cni_bin / "bridge").exists():
            raise NodeError(f"no CNI plugins in {cni_bin}: apt-get install containernetworking-plugins")
        cni_bins = [cni_bin, self.bin / "cni"] if spec.shared else [cni_bin]
        self._prepare_dir()
        imported = layout.root / "imported-images"
        imported.unlink(missing_ok=True)
        if seed is not None:  # both images there before containerd starts: install() imports nothing
            t0 = time.monotonic()
            imagestore.plant(seed[0], layout.sub("containerd") / "root")
            imported.write_text(seed[1])
            self.log(f"images planted from the seed in {time.monotonic() - t0:.1f} s")
        pki = self.plane.layout.pki
        # The kubelet's identity for the Node authorizer.
        kubelet_cert = f"kubelet-{spec.name}"
        cp.make_leaf(pki, "ca", kubelet_cert, f"/O=system:nodes/CN=system:node:{spec.name}", "clientAuth")
        if not spec.shared:
            prepare_host_network()
            conflist = layout.sub("cni") / "net.d" / "10-dtr.conflist"
            conflist.write_text(json.dumps(cni_conflist(layout), indent=2))

        (layout.sub('containerd') / "config.toml").write_text(containerd_config(layout, self.bin, cni_bins))
        env = dict(os.environ, PATH=f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}")
        containerd_toml = layout.sub("containerd") / "config.toml"
        self._procs.spawn("containerd", [str(binaries["containerd"]), f"--config={containerd_toml}"], env)
        self._procs.wait("containerd", lambda: self.ctr("version", check=False, timeout=10).returncode == 0)
        self._import_images()

        kubelet_json = layout.sub("kubelet") / "config.json"
        kubelet_json.write_text(json.dumps(kubelet_config(layout, pki, spec), indent=2))
        self._kubeconfig("kubelet", kubelet_cert)
        self._procs.spawn("kubelet", kubelet_args(binaries["kubelet"], layout, spec), env)
        admin = self._kubeconfig("kube-proxy", "admin")
        api = cp.Api(self.plane.state().ports.apiserver, pki)  # type: ignore[union-attr]
        if spec.shared:
            proxy_healthz, proxy_metrics = KUBE_PROXY_PORTS
            policy_metrics = NETWORK_POLICIES_METRICS_PORT
            self._start_flannel(binaries["flanneld"], admin, env, api)
        else:
            sched_port, proxy_healthz, proxy_metrics, policy_metrics = cp.free_ports(4)
            self._procs.spawn("kube-scheduler", scheduler_args(binaries["kube-scheduler"], admin, sched_port))
        proxy_config = layout.sub("kube-proxy") / "config.json"
        proxy_config.write_text(json.dumps(kube_proxy_config(admin, proxy_healthz, proxy_metrics, spec)))
        self._procs.spawn("kube-proxy", [str(binaries["kube-proxy"]), f"--config={proxy_config}"], env)
        self._procs.spawn("kube-network-policies",
                          network_policies_args(binaries["kube-network-policies"], policy_metrics, spec),
                          {**env, "KUBECONFIG": str(admin)})  # fmt: skip

        def node_ready() -> bool | str:
            status, node = api.call("GET", f"/api/v1/nodes/{spec.name}")
            if status != 200:
                return "not registered"
            ready = [c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"]
            if ready and ready[0].get("status") == "True":
                return True
            return ready[0].get("message", "not ready") if ready else "no Ready condition"

        self._procs.wait("kubelet", node_ready, timeout=START_TIMEOUT, what=f"node {spec.name}")
        proxy_ready = f"http://{spec.probe_ip}:{proxy_healthz}/healthz"
        self._procs.wait("kube-proxy", lambda: cp.http_get(proxy_ready)[0] == 200)
        # Its table exists once its informers have synced: from then on, every NetworkPolicy holds.
        policing = [*self.in_netns(), "nft", "list", "table", "inet", NFT_TABLE]
        self._procs.wait("kube-network-policies", lambda: run(policing, check=False).returncode == 0)
        if not spec.shared:
            self._apply_addons()
        pids = {c: p.pid for c, p in self._procs.children.items()}
        return NodeState(pids, {c: str(b) for c, b in binaries.items()}, time.time())

    def in_netns(self) -> list[str]:
        """The prefix that runs a host command in the node's network namespace (none for the host's)."""
        return ["nsenter", f"--net=/run/netns/{self.spec.netns}"] if self.spec.netns else []

    def _start_flannel(self, binary: Path, kubeconfig: Path, env: dict[str, str], api: cp.Api) -> None:
        """flanneld leases the node's pod subnet (the controller-manager's podCIDR) and routes to the
        others'; once it wrote subnet.env, the CNI configuration lets the kubelet report Ready."""
        layout = self.layout
        # flanneld reads the node's podCIDR once, when it starts, and exits if there is none yet: under load the
        # node IPAM controller assigned the third node's after flanneld had looked ("pod cidr not assigned").
        name = self.spec.name
        self._procs.wait("kubelet", lambda: _pod_cidr(api, name), timeout=START_TIMEOUT, what=f"{name}'s pod CIDR")
        (layout.sub("flannel") / "net-conf.json").write_text(json.dumps(flannel_net_conf(self.spec.cluster_cidr)))
        (self.spec.run_dir / "flannel").mkdir(parents=True, exist_ok=True)
        self._procs.spawn("flanneld", flanneld_args(binary, layout, kubeconfig, self.spec),
                          {**env, "NODE_NAME": self.spec.name})  # fmt: skip
        subnet_env = self.spec.run_dir / "flannel" / "subnet.env"
        lease = f"flannel's lease on {self.spec.name}"
        self._procs.wait("flanneld", subnet_env.exists, timeout=START_TIMEOUT, what=lease)
        conflist = layout.sub("cni") / "net.d" / "10-flannel.conflist"
        conflist.write_text(json.dumps(flannel_conflist(layout), indent=2))

    def _import_images(self) -> None:
        images = sorted((self.plane.cache / "images").glob("*.tar"))
        if not images:
            raise NodeError(f"no node images in {self.plane.cache / 'images'}; run `bash devcluster/build_node.sh`")
        for tar in images:
            self.import_image(tar)
        self.log(f"{len(images)} node images imported")

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 300) -> str:
        proc = run([cp.KUBECTL, f"--kubeconfig={self.plane.kubeconfig}", *args], input=input, timeout=timeout)
        return proc.stdout

    def _apply_addons(self) -> None:
        values = {**pinned(HERE / "versions.env"), "DNS_IP": DNS_IP, "CLUSTER_DOMAIN": CLUSTER_DOMAIN,
                  "LOCAL_PATH_CONFIG": json.dumps(local_path_config(self.storage))}  # fmt: skip
        for addon in ("coredns", "local-path"):
            self.kubectl("apply", "--server-side", "-f", "-", input=render_addon(addon, values))
        for ns, deploy in (("kube-system", "coredns"), ("local-path-storage", "local-path-provisioner")):
            t0 = time.monotonic()
            self.kubectl("-n", ns, "rollout", "status", f"deployment/{deploy}", "--timeout=300s", timeout=320)
            self.log(f"{ns}/{deploy} available ({time.monotonic() - t0:.0f} s)")


    def install(self, settings: Mapping[str, str] | None = None, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """deploy/install.sh as a user runs it on any cluster, images imported with ctr (what
        `k3d image import` does inside a k3s node), the training-operator from its Go module's
        standalone overlay (no GitHub here). The images must be built (`make images`). settings: more
        of install.sh's DTR_* variables; kubeconfig: another user's (default the admin's)."""
        images = built_image_ids()
        imported = self.layout.root / "imported-images"
        # A node shared by several tiers (tests/tiers.py) imports each build once: ~2 GB through ctr.
        same = imported.exists() and imported.read_text() == images and self.has_images()
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig or self.plane.kubeconfig),
            "DTR_IMPORT": "none" if same else "ctr",
            "DTR_CTR": f"{self.bin / 'ctr'} --address {self.layout.socket}",
            "DTR_SKIP_BUILD": "1",
            "DTR_HOST_DIR": str(self.storage),
            "DTR_TRAINING_OPERATOR_KUSTOMIZE": str(training_operator_overlay(self.plane.cache)),
            **(settings or {}),
        }
        if kubeconfig is None and env.get("DTR_TRAINING_OPERATOR") != "skip":
            self.seed_webhook_secret()
        proc = subprocess.run(["bash", str(INSTALL_SH)], env=env, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise NodeError(f"deploy/install.sh failed ({proc.returncode}):\n"
                            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        if proc.returncode == 0:
            imported.write_text(images)
        return proc

    def seed_webhook_secret(self) -> None:
        """The training-operator's webhook Secret, unless there, holding this machine's pair (cp.webhook_secret): its
        pod is then ready at its first probes, not when the kubelet next syncs the Secret its rotator wrote (figures:
        docs/cluster.md#the-real-node). A test rig's shortcut, not install.sh's: its own field manager, so the
        overlay's empty Secret, applied by kubectl's, leaves the data alone."""
        if self.kubectl("-n", cp.OPERATOR_NAMESPACE, "get", "secret", cp.WEBHOOK_SECRET, "--ignore-not-found",
                        "-o", "name").strip():  # fmt: skip
            return
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cp.OPERATOR_NAMESPACE}}
        objects = {"apiVersion": "v1", "kind": "List", "items": [namespace, cp.webhook_secret(cp.webhook_pki())]}
        self.kubectl("apply", "--server-side", "--field-manager=dtr-devcluster", "-f", "-", input=json.dumps(objects))

    def install_s3(self, bucket: str = s3.DEFAULT_BUCKET) -> Path:
        """The S3 server as a pod (devcluster/s3.py's manifests) with new keys, its image imported (`make s3-build`);
        returns an env file for this machine's tools, the Service's cluster IP as endpoint (kube-proxy's rules
        take the host there too; pods use the Service's name and the Secret)."""
        self.import_image(s3_image(self.plane.cache))
        creds = deploy_s3(self.kubectl, bucket, self.log)
        ip = self.kubectl("-n", s3.NAMESPACE, "get", "service", s3.NAME, "-o", "jsonpath={.spec.clusterIP}").strip()
        env = self.layout.root.parent / "s3.env"
        s3.write_private(env, s3.env_file(s3.endpoint(ip, s3.POD_S3_PORT, tls=False), creds, bucket))
        return env

    def has_images(self) -> bool:
        names = self.ctr("images", "ls", "-q", check=False, timeout=60).stdout.split()
        return all(image in names for image in image_names())  # fully qualified: ctr lists them as named


def image_names() -> tuple[str, str]:
    """The operator's and the trainer's image, from their one home in the scripts (deploy/lib.sh)."""
    text = (cp.REPO / "deploy" / "lib.sh").read_text()
    found = dict(re.findall(r'\b(OPERATOR_IMAGE|TRAINER_IMAGE)="([^"]+)"', text))
    return found["OPERATOR_IMAGE"], found["TRAINER_IMAGE"]


def built_image_ids() -> str:
    """Both images' IDs as Docker has them now (empty when either is not built)."""
    proc = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", *image_names()],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return proc.stdout if proc.returncode == 0 else ""


def s3_image(cache: Path) -> Path:
    """The S3 server's image tar (`make s3-build`), or NodeError saying how to build it."""
    tar = cache / "images" / "optional" / "seaweedfs.tar"
    if not tar.exists():
        raise NodeError(f"{tar} is missing; run `make s3-build`")
    return tar


def deploy_s3(kubectl: Callable[..., str], bucket: str, log: Callable[[str], None]) -> s3.Credentials:
    """The S3 server's objects (devcluster/s3.py's manifests) applied with new keys, and its Deployment rolled out;
    its image must be on the nodes already (s3_image). One node's (Node.install_s3) and several nodes'
    (cluster.Cluster.install_s3) alike; returns the keys."""
    creds = s3.new_credentials()
    image = pinned(HERE / "versions.env")["SEAWEEDFS_IMAGE"]
    objects = {"apiVersion": "v1", "kind": "List", "items": s3.manifests(creds, bucket, image)}
    kubectl("apply", "--server-side", "-f", "-", input=json.dumps(objects))
    t0 = time.monotonic()
    kubectl("-n", s3.NAMESPACE, "rollout", "status", f"deployment/{s3.NAME}", "--timeout=180s", timeout=200)
    log(f"{s3.NAMESPACE}/{s3.NAME} available ({time.monotonic() - t0:.0f} s)")
    return creds


def training_operator_overlay(cache: Path) -> Path:
    """The upstream standalone overlay of the pinned training-operator module (read-only in Go's cache)."""
    path = cache / "training-operator" / "manifests" / "overlays" / "standalone"
    if not path.is_dir():
        raise NodeError(f"{path} is missing; run `bash devcluster/build.sh`")
    return path


# ---------------------------------------------------------------- CLI


def up(plane: cp.ControlPlane, node: Node, install: bool, with_s3: bool, say: Callable[[str], None]) -> None:
    plane.start()
    state = node.start()
    say(f"node up in {state.ready_seconds}s; logs in {node.layout.root / 'logs'}")
    if install:
        t1 = time.monotonic()
        installed = node.install()
        print(installed.stdout, file=sys.stderr)  # what install.sh did, with its own times
        say(f"training-operator and the operator installed in {time.monotonic() - t1:.0f}s")
    if with_s3:
        t1 = time.monotonic()
        env = node.install_s3()
        say(f"S3 server installed in {time.monotonic() - t1:.0f}s; for this machine's tools: {env}")
    print(f"export KUBECONFIG={plane.kubeconfig}")


def down(plane: cp.ControlPlane, node: Node, purged: bool, say: Callable[[str], None]) -> None:
    node.stop()
    plane.stop()
    (node.layout.root.parent / "s3.env").unlink(missing_ok=True)  # install_s3's: its keys went with the node
    if purged:
        purge(node.layout.root)
    say("down, images and volumes removed" if purged else "down")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.node", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--dir", default=str(DEFAULT_DIR), help=f"working directory (default {DEFAULT_DIR})")
    parser.add_argument("--install", action="store_true",
                        help="then deploy/install.sh: images (built), training-operator, the operator (deploy/)")
    parser.add_argument("--s3", action="store_true",
                        help="up: and an S3 server as a pod in dtr-s3 (`make s3-build` first; devcluster/s3.py)")
    parser.add_argument("--purge", action="store_true",
                        help="down: then remove the node's images, pods and volumes (about 4 GB); logs stay")
    args = parser.parse_args(argv)
    t0 = time.monotonic()

    def say(msg: str) -> None:
        print(f"[node {time.monotonic() - t0:5.1f}s] {msg}", file=sys.stderr)

    root = Path(args.dir)
    plane = cp.ControlPlane(root / "control-plane", stop_at_exit=False, log=say, node_ip=NODE_IP)
    node = Node(plane, root / "node", stop_at_exit=False, log=say)
    try:
        if args.command == "up":
            up(plane, node, args.install, args.s3, say)
            return 0
        if args.command == "down":
            down(plane, node, args.purge, say)
            return 0
        running = dict(node._running_pids())
        for component in COMPONENTS:
            print(f"{component:24} {'running' if component in running else 'stopped'}")
        return 0 if len(running) == len(COMPONENTS) and all(plane.status().values()) else 1
    except cp.ControlPlaneError as err:
        say(f"error: {err}")
        if args.command == "up":
            say(f"stopping what was started; logs stay in {root}")
            node.stop()
            plane.stop()
        return 1


if __name__ == "__main__":
    sys.exit(main())
