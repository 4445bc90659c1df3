"""A process-backed node for the local control plane: development and test infrastructure only.

It registers a Node (Ready, heartbeats through its Lease), binds pending pods to itself through the
pods/binding subresource (pods of TFJobs; every unbound pod with --all-pods), runs each pod's
container as a local process in the trainer's Python environment, and writes pod status as a
kubelet would. How a container maps to a process (network, volumes, command) is in translate.py,
the kubelet's decisions (restart, status, termination message) in kubelet.py; docs/local.md
tells the whole story.

    python -m dtr_operator.local.node [--kubeconfig FILE] [--name dtr-local] [--state-dir DIR]
        [--image IMAGE=PYTHON ...] [--all-pods]

One thread owns the processes and all pod writes (the loop in `Node.run`); a watch thread feeds
it pod events, a heartbeat thread keeps the Node and its Lease fresh.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from dtr_operator.local import kubelet, ports, translate

log = logging.getLogger("dtr.node")

JOB_LABEL = "training.kubeflow.org/job-name"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
HEARTBEAT_SECONDS = 10.0
NODE_STATUS_SECONDS = 60.0
STOP_GRACE_CAP_SECONDS = 10.0  # a deleted pod's processes get SIGTERM, then SIGKILL after at most this
PVC_RETRY_SECONDS = 2.0

Pod = dict[str, Any]


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_python() -> str:
    return translate.default_python(os.environ, str(Path(__file__).resolve().parents[3]))


def default_state_dir() -> Path:
    cache = os.environ.get("DTR_CACHE") or str(Path.home() / ".cache" / "dtr")
    return Path(cache) / "node"


def main_container(pod: Pod) -> dict[str, Any] | None:
    """The container the node plays: `tensorflow` in a TFJob pod, else a pod's only container."""
    containers = pod["spec"].get("containers") or []
    named = [c for c in containers if c.get("name") == "tensorflow"]
    if named:
        return named[0]
    return containers[0] if len(containers) == 1 else None


def pod_fields(pod: Pod, node: str) -> dict[str, str]:
    """Values for env fieldRefs (the downward API) that a local process can have."""
    meta = pod["metadata"]
    fields = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": node,
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "status.podIP": translate.LOOPBACK,
        "status.hostIP": translate.LOOPBACK,
    }
    for key in ("labels", "annotations"):
        for k, v in (meta.get(key) or {}).items():
            fields[f"metadata.{key}['{k}']"] = v
    return fields


def _die_with_parent() -> None:
    """In the child: get SIGKILL when the node dies, so no trainer outlives a killed node."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class Run:
    """One pod's container as the node plays it."""

    namespace: str
    pod: str
    uid: str
    container: str
    image: str
    restart_policy: str
    message_policy: str
    grace_seconds: float
    dir: Path
    start_time: str = field(default_factory=now_rfc3339)
    proc: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    restart_count: int = 0
    attempts: int = 0
    state: dict[str, Any] = field(default_factory=lambda: kubelet.waiting("ContainerCreating"))
    last_state: dict[str, Any] = field(default_factory=dict)
    next_start: float = 0.0  # monotonic time of the next (re)start attempt
    final: bool = False  # terminated for good: nothing more to run
    stopping_until: float | None = None  # deletion: SIGKILL after this monotonic time
    deleting: bool = False
    path_map: list[tuple[str, str]] = field(default_factory=list)  # of the current process
    reported: str = ""  # the last status written, to skip identical writes

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}"

    @property
    def log_path(self) -> Path:
        return self.dir / f"{self.container}.{self.attempts}.log"

    @property
    def termination_path(self) -> Path:
        return self.dir / f"{self.container}.termination-log"

    @property
    def container_id(self) -> str:
        return f"dtr-local://{self.uid}/{self.container}/{self.attempts}"


class Node:
    def __init__(
        self,
        api: client.ApiClient,
        name: str,
        state_dir: Path,
        python: str,
        images: dict[str, str],
        all_pods: bool,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.name = name
        self.state_dir = state_dir
        self.python = python
        self.images = images
        self.all_pods = all_pods
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.stop = threading.Event()
        self.runs: dict[str, Run] = {}  # pod uid -> run
        self.pods: dict[str, Pod] = {}  # pod uid -> latest pod seen
        self.ports: dict[str, int] = {}  # TF_CONFIG address -> loopback port, shared by a job's replicas

    # --- registration and heartbeats (heartbeat thread) ---------------------------------------

    def node_status(self) -> dict[str, Any]:
        t = now_rfc3339()

        def cond(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": t,
                "lastTransitionTime": t,
            }

        capacity = {"cpu": str(os.cpu_count() or 1), "memory": f"{_memory_kib()}Ki", "pods": "110"}
        return {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "local node"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "local node"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "local node"),
                cond("Ready", "True", "KubeletReady", "dtr process node is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": translate.LOOPBACK},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": os.uname().release,
                "osImage": "dtr local processes",
                "containerRuntimeVersion": "dtr-local://0.1.0",
                "kubeletVersion": "v0.0.0-dtr-local",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "distml.dev/local-node": "true",
                },
            },
        }
        try:
            self.core.create_node(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        self.core.patch_node_status(self.name, {"status": self.node_status()})
        self.renew_lease()
        log.info("node %s registered and Ready", self.name)

    def renew_lease(self) -> None:
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now_micro()}
        try:
            self.coord.patch_namespaced_lease(self.name, LEASE_NAMESPACE, {"spec": spec})
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = {"metadata": {"name": self.name, "namespace": LEASE_NAMESPACE}, "spec": spec}
            self.coord.create_namespaced_lease(LEASE_NAMESPACE, body)

    def heartbeat(self) -> None:
        last_status = time.monotonic()
        while not self.stop.wait(HEARTBEAT_SECONDS):
            try:
                self.renew_lease()
                if time.monotonic() - last_status >= NODE_STATUS_SECONDS:
                    self.core.patch_node_status(self.name, {"status": self.node_status()})
                    last_status = time.monotonic()
            except ApiException as exc:
                if exc.status == 404:
                    with contextlib.suppress(Exception):
                        self.register()
                else:
                    log.warning("heartbeat failed: %s", exc.reason)
            except Exception as exc:  # the API server may be restarting; try again next beat
                log.warning("heartbeat failed: %s", exc)

    # --- pod events (watch thread) --------------------------------------------------------------

    def watch_pods(self) -> None:
        while not self.stop.is_set():
            try:
                resp = self.core.list_pod_for_all_namespaces(_preload_content=False)
                listing = json.loads(resp.data)
                self.events.put(("SYNC", listing["items"]))
                rv = listing["metadata"]["resourceVersion"]
                while not self.stop.is_set():
                    w = watch.Watch()
                    for ev in w.stream(
                        self.core.list_pod_for_all_namespaces,
                        resource_version=rv,
                        timeout_seconds=30,
                        allow_watch_bookmarks=True,
                    ):
                        obj = ev["raw_object"]
                        if ev["type"] == "ERROR":
                            raise ApiException(status=obj.get("code", 500), reason=obj.get("message", ""))
                        rv = obj["metadata"]["resourceVersion"]
                        if ev["type"] != "BOOKMARK":
                            self.events.put((ev["type"], obj))
                        if self.stop.is_set():
                            w.stop()
            except ApiException as exc:
                if exc.status != 410:  # 410 Gone: the resourceVersion is too old, list again
                    log.warning("pod watch: %s %s", exc.status, exc.reason)
                    self.stop.wait(1.0)
            except Exception as exc:  # connection refused while the API server restarts, ...
                log.warning("pod watch: %s", exc)
                self.stop.wait(1.0)

    # --- the loop that owns processes and pod writes (main thread) -------------------------------

    def run(self) -> None:
        self.register()
        threading.Thread(target=self.heartbeat, name="heartbeat", daemon=True).start()
        threading.Thread(target=self.watch_pods, name="watch", daemon=True).start()
        try:
            while not self.stop.is_set():
                try:
                    kind, obj = self.events.get(timeout=0.5)
                    self.on_event(kind, obj)
                    while True:
                        kind, obj = self.events.get_nowait()
                        self.on_event(kind, obj)
                except queue.Empty:
                    pass
                self.tick()
        finally:
            self.kill_all()

    def on_event(self, kind: str, obj: Any) -> None:
        if kind == "SYNC":
            seen = {p["metadata"]["uid"]: p for p in obj}
            for uid in list(self.pods):
                if uid not in seen:
                    self.forget(uid)
            for uid, pod in seen.items():
                self.pods[uid] = pod
                self.reconcile(pod)
        elif kind == "DELETED":
            self.forget(obj["metadata"]["uid"])
        else:
            self.pods[obj["metadata"]["uid"]] = obj
            self.reconcile(obj)

    def forget(self, uid: str) -> None:
        """The pod is gone from the API (deleted with grace 0 or by us): stop its processes."""
        self.pods.pop(uid, None)
        run = self.runs.get(uid)
        if run is not None:
            run.deleting = True
            self.begin_stop(run)

    def eligible(self, pod: Pod) -> bool:
        return self.all_pods or JOB_LABEL in (pod["metadata"].get("labels") or {})

    def reconcile(self, pod: Pod) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        uid, phase = meta["uid"], (pod.get("status") or {}).get("phase", "Pending")
        node = spec.get("nodeName")
        if meta.get("deletionTimestamp"):
            if node == self.name:
                run = self.runs.get(uid)
                if run is None:
                    self.finish_delete(meta["namespace"], meta["name"], uid)
                elif not run.deleting:
                    run.deleting = True
                    self.begin_stop(run, float(meta.get("deletionGracePeriodSeconds") or run.grace_seconds))
            return
        if not node:
            if phase == "Pending" and self.eligible(pod):
                self.bind(pod)
            return
        if node != self.name or uid in self.runs or phase in ("Succeeded", "Failed"):
            return
        self.adopt(pod)

    def bind(self, pod: Pod) -> None:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.name},
        }
        try:
            # _preload_content=False: the client cannot deserialize the Binding it gets back.
            self.core.create_namespaced_pod_binding(meta["name"], meta["namespace"], body, _preload_content=False)
            log.info("bound %s/%s", meta["namespace"], meta["name"])
        except ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("binding %s/%s: %s %s", meta["namespace"], meta["name"], exc.status, exc.reason)

    def adopt(self, pod: Pod) -> None:
        """A pod bound here with no process yet: start it (or, after a node restart, its process was lost)."""
        meta, spec = pod["metadata"], pod["spec"]
        container = main_container(pod)
        uid = meta["uid"]
        pod_dir = self.state_dir / "pods" / f"{meta['namespace']}_{meta['name']}_{uid[:8]}"
        run = Run(
            namespace=meta["namespace"],
            pod=meta["name"],
            uid=uid,
            container=(container or {}).get("name", "main"),
            image=(container or {}).get("image", ""),
            restart_policy=spec.get("restartPolicy", "Always"),
            message_policy=(container or {}).get("terminationMessagePolicy", "File"),
            grace_seconds=float(spec.get("terminationGracePeriodSeconds", 30)),
            dir=pod_dir,
        )
        self.runs[uid] = run
        if container is None:
            self.fail(run, "the local node runs pods with one container (or one named tensorflow)")
            return
        prev = next(
            (s for s in (pod.get("status") or {}).get("containerStatuses") or [] if s["name"] == run.container),
            {},
        )
        prev_state = prev.get("state") or {}
        if "running" in prev_state or prev.get("restartCount"):
            # This pod ran under an earlier life of this node: keep its counts going.
            run.restart_count = prev.get("restartCount", 0)
            run.attempts = run.restart_count + 1
            run.last_state = prev.get("lastState") or {}
        if "running" in prev_state:
            # Its process died with the previous node (PDEATHSIG): a container exit, and the
            # restart policy decides what happens next.
            run.started_at = prev_state["running"].get("startedAt", run.start_time)
            self.on_exit(run, 137, "the process was lost when the local node restarted")
            return
        self.try_start(run)

    def try_start(self, run: Run) -> None:
        pod = self.pods.get(run.uid)
        if pod is None:
            return
        container = main_container(pod)
        assert container is not None
        volumes = pod["spec"].get("volumes") or []
        missing = self.missing_claims(run.namespace, volumes)
        if missing:
            run.state = kubelet.waiting("ContainerCreating", f'persistentvolumeclaim "{missing}" not found')
            run.next_start = time.monotonic() + PVC_RETRY_SECONDS
            self.write_status(run)
            return
        try:
            tf_config = translate.parse_tf_config(
                next((e.get("value") for e in container.get("env") or [] if e.get("name") == "TF_CONFIG"), None)
            )
            ports.allocate(translate.tf_config_addresses(tf_config or {}), self.ports)
            run.dir.mkdir(parents=True, exist_ok=True)
            spec = translate.translate_container(
                container,
                volumes,
                python=translate.python_for_image(run.image, self.images, self.python),
                ports=self.ports,
                claim_dir=lambda claim: str(self.state_dir / "volumes" / run.namespace / claim),
                scratch_dir=str(run.dir / "volumes"),
                termination_path=str(run.termination_path),
                fields=pod_fields(pod, self.name),
                base_env=translate.base_env(os.environ, run.pod),
            )
        except translate.TranslateError as exc:
            self.fail(run, str(exc))
            return
        for local in translate.volume_dirs(
            volumes, lambda c: str(self.state_dir / "volumes" / run.namespace / c), str(run.dir / "volumes")
        ).values():
            Path(local).mkdir(parents=True, exist_ok=True)
        if run.attempts > 0 or run.state.get("waiting", {}).get("reason") == "CrashLoopBackOff":
            run.restart_count += 1
        run.attempts += 1
        run.termination_path.write_text("")  # a fresh file per container instance, as the kubelet mounts
        with open(run.log_path, "wb") as logf:
            try:
                run.proc = subprocess.Popen(
                    spec.argv,
                    env=spec.env,
                    cwd=spec.cwd or str(run.dir),
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            except OSError as exc:
                run.proc = None
                logf.write(f"cannot start {spec.argv[0]}: {exc}\n".encode())
                self.on_exit(run, 127, f"cannot start {spec.argv[0]}: {exc.strerror}")
                return
        run.path_map = spec.path_map
        run.started_at = now_rfc3339()
        run.state = kubelet.running(run.started_at)
        log.info("started %s (pid %d, attempt %d): %s", run.key, run.proc.pid, run.attempts, " ".join(spec.argv))
        self.write_status(run)

    def missing_claims(self, namespace: str, volumes: list[dict[str, Any]]) -> str | None:
        for vol in volumes:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                try:
                    self.core.read_namespaced_persistent_volume_claim(claim, namespace, _preload_content=False)
                except ApiException as exc:
                    if exc.status == 404:
                        return claim
                    raise
        return None

    def tick(self) -> None:
        t = time.monotonic()
        for uid, run in list(self.runs.items()):
            if run.proc is not None:
                rc = run.proc.poll()
                if rc is None:
                    if run.stopping_until is not None and t >= run.stopping_until:
                        _signal_group(run.proc, signal.SIGKILL)
                        run.stopping_until = t + 60  # once; reap on a later tick
                    continue
                run.proc = None
                self.on_exit(run, kubelet.exit_code_of(rc))
            if run.deleting:
                if uid in self.pods:
                    self.finish_delete(run.namespace, run.pod, uid)
                self.runs.pop(uid, None)
            elif not run.final and run.next_start and t >= run.next_start:
                run.next_start = 0.0
                self.try_start(run)

    def on_exit(self, run: Run, code: int, note: str = "") -> None:
        text = _read(run.termination_path)
        logs = _read(run.log_path) or note
        message = translate.unmap_text(kubelet.termination_message(text, logs, code, run.message_policy), run.path_map)
        state = kubelet.terminated(code, message, run.started_at or now_rfc3339(), now_rfc3339(), run.container_id)
        log.info("%s exited with %d", run.key, code)
        if run.deleting:
            run.state, run.final = state, True
            return
        if kubelet.restarts(run.restart_policy, code):
            delay = kubelet.backoff_seconds(run.restart_count)
            run.last_state = state
            run.state = kubelet.waiting(
                "CrashLoopBackOff",
                f"back-off {delay:g}s restarting failed container={run.container} pod={run.pod}",
            )
            run.next_start = time.monotonic() + delay
        else:
            run.state, run.final = state, True
        self.write_status(run)

    def fail(self, run: Run, message: str) -> None:
        """The pod cannot run here at all: Failed with the reason, as a kubelet rejecting a pod."""
        log.warning("%s: %s", run.key, message)
        run.state = kubelet.terminated(128, message, now_rfc3339(), now_rfc3339(), run.container_id)
        run.final = True
        self.write_status(run, message)

    def write_status(self, run: Run, message: str | None = None) -> None:
        status = kubelet.pod_status(
            [
                kubelet.container_status(
                    run.container,
                    run.image,
                    run.state,
                    run.restart_count,
                    run.last_state,
                    run.container_id if run.attempts else None,
                )
            ],
            run.start_time,
            now_rfc3339(),
            translate.LOOPBACK,
            message,
        )
        key = json.dumps([run.state, run.last_state, run.restart_count, message], sort_keys=True)
        if key == run.reported:
            return
        try:
            self.core.patch_namespaced_pod_status(run.pod, run.namespace, {"status": status})
            run.reported = key
        except ApiException as exc:
            if exc.status != 404:
                log.warning("status of %s: %s %s", run.key, exc.status, exc.reason)

    def begin_stop(self, run: Run, grace: float | None = None) -> None:
        if run.proc is None or run.stopping_until is not None:
            return
        log.info("stopping %s (pid %d)", run.key, run.proc.pid)
        _signal_group(run.proc, signal.SIGTERM)
        run.stopping_until = time.monotonic() + min(
            grace if grace is not None else run.grace_seconds, STOP_GRACE_CAP_SECONDS
        )

    def finish_delete(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet's last word on a deleted pod: its containers are stopped, remove it now."""
        try:
            self.core.delete_namespaced_pod(
                name,
                namespace,
                grace_period_seconds=0,
                body={"preconditions": {"uid": uid}, "gracePeriodSeconds": 0},
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("deleting %s/%s: %s %s", namespace, name, exc.status, exc.reason)

    def kill_all(self) -> None:
        procs = [r.proc for r in self.runs.values() if r.proc is not None]
        for p in procs:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for p in procs:
            try:
                p.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _memory_kib() -> int:
    try:
        with open("/proc/meminfo") as f:
            return int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        return 8 * 1024 * 1024


def parse_images(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        image, sep, python = item.partition("=")
        if not sep or not image or not python:
            raise SystemExit(
                f"dtr node: --image wants IMAGE=PYTHON (a glob is fine: 'distml/trainer:*=...'), got {item!r}"
            )
        out[image] = python
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dtr_operator.local.node", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="kubeconfig file [$KUBECONFIG]")
    parser.add_argument("--name", default="dtr-local", help="Node name [dtr-local]")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="volumes, logs, termination files [$DTR_CACHE/node]",
    )
    parser.add_argument(
        "--python",
        default=default_python(),
        help="Python for images not in --image [$DTR_TRAINER_PYTHON or .venv/trainer/bin/python]",
    )
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="IMAGE=PYTHON",
        help="run containers of IMAGE (glob allowed) with this Python; repeatable",
    )
    parser.add_argument("--all-pods", action="store_true", help="bind every unbound pod, not only TFJob pods")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not Path(args.python).exists():
        print(
            f"dtr node: the trainer Python {args.python} does not exist (run `make setup-trainer` "
            "or set DTR_TRAINER_PYTHON)",
            file=sys.stderr,
        )
        return 2
    try:
        api = config.new_client_from_config(config_file=args.kubeconfig)
    except Exception as exc:
        print(f"dtr node: cannot load kubeconfig {args.kubeconfig or '~/.kube/config'}: {exc}", file=sys.stderr)
        return 2
    node = Node(api, args.name, args.state_dir.resolve(), args.python, parse_images(args.image), args.all_pods)

    def on_signal(signum: int, _frame: Any) -> None:
        node.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    node.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
