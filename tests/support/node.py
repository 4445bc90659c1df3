"""The real node (devcluster/node.py) as the tests and bench/ use it: bring-up, the node tiers' fixtures,
and a look at pods, containers and volumes. Imported as `support.node` by the tests and as
`tests.support.node` by bench/, hence the relative imports."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from devcluster import controlplane as cp
from devcluster import node as realnode

from . import kubectl_subset
from .cluster import Cluster, kubeconfig_set, namespace_name
from .repo import REPO
from .runs import SLOW_EPOCHS_MODEL
from .wait import wait_for

TRAINER_PYTHON = os.environ.get("DTR_TRAINER_PYTHON") or str(REPO / ".venv" / "trainer" / "bin" / "python")
RESTRICTED = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
JOB_LABEL = "training.kubeflow.org/job-name"
OPERATOR_SELECTOR = "app.kubernetes.io/name=dtr-operator"
DTR = Path(sys.executable).parent / "dtr"  # the op environment's console script


@dataclass
class RealNode:
    cluster: Cluster
    node: realnode.Node

    # -- the API

    def create_restricted_namespace(self, name: str) -> None:
        doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": RESTRICTED}}
        self.cluster.create(doc)

    def apply(self, namespace: str, doc: dict[str, Any]) -> None:
        self.cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))

    def apply_slow_epochs(self, namespace: str, doc: dict[str, Any]) -> None:
        """A run of support.runs.slow_epochs_run: its code first, as the ConfigMap <name>-code (as `dtr submit`
        sends a model file), then the run."""
        name = doc["metadata"]["name"]
        self.cluster.kubectl("create", "configmap", f"{name}-code", "-n", namespace,
                             "--from-file", f"model.py={SLOW_EPOCHS_MODEL}")  # fmt: skip
        self.apply(namespace, doc)

    def run_status(self, namespace: str, name: str) -> dict[str, Any]:
        return self._object("dtr", namespace, name).get("status") or {}

    def wait_terminal(
        self, namespace: str, name: str, timeout: float = 900, seen: list[str] | None = None
    ) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            st = self.run_status(namespace, name)
            if seen is not None and st.get("phase") and (not seen or seen[-1] != st["phase"]):
                seen.append(st["phase"])
            return st if st.get("phase") in ("Succeeded", "Failed") else None

        return wait_for(probe, f"run {namespace}/{name} to finish", timeout=timeout, interval=1)

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self._object("pod", namespace, name)

    def _object(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """The object, read in-process (Cluster.read); the test fails when it is not there, as with kubectl."""
        got = self.cluster.read(kind, namespace, name)
        if got is None:
            pytest.fail(f"{kind} {namespace}/{name} not found", pytrace=False)
        return got

    def logs(self, namespace: str, pod: str, previous: bool = False, timestamps: bool = False) -> str:
        flags = {"previous": "true"} if previous else {}
        flags |= {"timestamps": "true"} if timestamps else {}
        return self.cluster.read("pod", namespace, pod, strict=False, log="", container="tensorflow", **flags) or ""

    def wait_log(self, namespace: str, pod: str, text: str, timeout: float = 600) -> None:
        wait_for(lambda: text in self.logs(namespace, pod), f"{text!r} in {pod}'s log", timeout=timeout, interval=1)

    def names(self, kind: str, namespace: str, selector: str) -> list[str]:
        """`kubectl get KIND -n NAMESPACE -l SELECTOR -o name` (read in-process: the tests poll it)."""
        items = self.cluster.kubectl_json("get", kind, "-n", namespace, "-l", selector)["items"]
        return [kubectl_subset.kubectl_name(item) for item in items]

    # -- the node

    def volume(self, namespace: str, claim: str) -> Path:
        """The claim's directory on this machine, where local-path put it (<pv>_<namespace>_<claim>)."""
        pv = self.cluster.kubectl_json("get", "pvc", claim, "-n", namespace)["spec"]["volumeName"]
        return self.node.storage / f"{pv}_{namespace}_{claim}"

    def container_id(self, namespace: str, pod: str) -> str:
        status = tensorflow_status(self.pod(namespace, pod))
        return status["containerID"].removeprefix("containerd://")

    def kill_container(self, namespace: str, pod: str) -> None:
        """SIGKILL the worker's container through containerd: as the OOM killer or a crash would."""
        self.node.ctr("tasks", "kill", "--signal", "SIGKILL", self.container_id(namespace, pod))

    def freeze_container(self, namespace: str, pod: str) -> None:
        """SIGSTOP every process of the worker's container (its PID 1, the trainer, the heartbeat child): a hung
        worker, alive but silent. Each by its PID: `ctr tasks kill --all` signals only the first process with
        runc >= 1.2, which is not the trainer (dtr_trainer/pid1.py)."""
        self._signal_every_process(namespace, pod, signal.SIGSTOP)

    def thaw_container(self, namespace: str, pod: str) -> None:
        """SIGCONT what freeze_container stopped."""
        self._signal_every_process(namespace, pod, signal.SIGCONT)

    def _signal_every_process(self, namespace: str, pod: str, signum: int) -> None:
        listed = self.node.ctr("tasks", "ps", self.container_id(namespace, pod)).stdout.splitlines()[1:]
        pids = [int(line.split()[0]) for line in listed if line.split() and line.split()[0].isdigit()]
        assert pids, f"no process in {pod}'s container"
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # one that ended meanwhile
                os.kill(pid, signum)

    def exec(self, namespace: str, pod: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl("exec", "-n", namespace, pod, "-c", "tensorflow", "--", *argv, check=False)

    def diagnostics(self) -> str:
        parts = []
        for args in (("get", "pods", "-A", "-o", "wide"), ("get", "events", "-A", "--sort-by=.lastTimestamp"),
                     ("logs", "-n", "dtr-system", "-l", OPERATOR_SELECTOR, "--tail=60")):  # fmt: skip
            proc = self.cluster.kubectl(*args, check=False)
            parts.append(f"$ kubectl {' '.join(args)}\n{proc.stdout[-6000:]}{proc.stderr[-2000:]}")
        for component in realnode.COMPONENTS:
            parts.append(f"--- {component} log ---\n{cp.tail(self.node.log_file(component), 20)}")
        return "\n".join(parts)


def dtr(real_node: RealNode, namespace: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`dtr ARGS -n NAMESPACE` as a user runs it (the op environment's console script), timed on stdout."""
    env = {**os.environ, "KUBECONFIG": str(real_node.cluster.kubeconfig)}
    t0 = time.monotonic()
    proc = subprocess.run([str(DTR), *args, "-n", namespace], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)  # fmt: skip
    print(f"dtr {' '.join(args[:2])}: exit {proc.returncode} in {time.monotonic() - t0:.1f} s")
    return proc


def tensorflow_status(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["status"].get("containerStatuses") or [] if c["name"] == "tensorflow")


def score_model(model_dir: Path) -> float:
    """Load the exported SavedModel with the trainer's TensorFlow and score it on digits' held-out split."""
    proc = subprocess.run(
        [TRAINER_PYTHON, str(REPO / "tests" / "node" / "score_model.py"), str(model_dir)],
        capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    assert proc.returncode == 0, f"scoring {model_dir} failed:\n{proc.stderr[-3000:]}"
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["accuracy"])


@contextlib.contextmanager
def restricted_namespace(real_node: RealNode, test_name: str) -> Iterator[str]:
    """A fresh namespace for one test that enforces Pod Security `restricted`; deleted after (not waited for)."""
    name = namespace_name(test_name)
    real_node.create_restricted_namespace(name)
    try:
        yield name
    finally:
        real_node.cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@contextlib.contextmanager
def start_real_node(workdir: Path) -> Iterator[RealNode]:
    existing = os.environ.get("DTR_NODE_DIR")
    plane: cp.ControlPlane | None = None
    node: realnode.Node | None = None
    owned = False
    try:
        if existing:
            root = Path(existing).resolve()
            plane = cp.ControlPlane(root / "control-plane", stop_at_exit=False, node_ip=realnode.NODE_IP)
            node = realnode.Node(plane, root / "node", stop_at_exit=False)
        else:
            plane = cp.ControlPlane(workdir / "control-plane", node_ip=realnode.NODE_IP)
            node = realnode.Node(plane, workdir / "node")
            owned = True
            try:
                plane.start()
                node.start()
            except cp.ControlPlaneError as err:
                pytest.fail(f"the real node did not start: {err}", pytrace=False)
        cluster = Cluster(plane.kubeconfig, plane.dir)
        with kubeconfig_set(cluster.kubeconfig):
            try:
                node.install()
            except cp.ControlPlaneError as err:
                pytest.fail(str(err), pytrace=False)
            yield RealNode(cluster, node)
    finally:
        if owned and node is not None:
            node.stop()
        if owned and plane is not None:
            plane.stop()


@pytest.fixture(scope="session")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    """The real node with everything installed (or DTR_NODE_DIR's), for every test of the session."""
    with start_real_node(tmp_path_factory.mktemp("real-node")) as node:
        yield node


@pytest.fixture(name="namespace")
def node_namespace(real_node: RealNode, request: pytest.FixtureRequest) -> Iterator[str]:
    """`namespace` on the real node: a fresh one per test that enforces Pod Security `restricted`."""
    with restricted_namespace(real_node, request.node.name) as name:
        yield name


# ---- status.progress, as seen from outside (tests/node/test_progress.py, bench/progress/run.py)

# kubectl logs --timestamps: RFC 3339 with nanoseconds; Python reads at most microseconds.
_STAMPED = re.compile(r"^(\S+T\d\d:\d\d:\d\d)(\.\d{1,6})?\d*Z (.*)$")
_EPOCH_END = re.compile(r"^dtr_trainer\[worker-0\]: epoch (\d+)/\d+ end ")


def stamped_lines(log: str) -> list[tuple[float, str]]:
    """A `kubectl logs --timestamps` text as (the container runtime's time, epoch seconds; the line) pairs."""
    out = []
    for line in log.splitlines():
        if match := _STAMPED.match(line):
            out.append((datetime.fromisoformat(f"{match[1]}{match[2] or ''}+00:00").timestamp(), match[3]))
    return out


def epoch_end_times(log: str) -> dict[int, float]:
    """Epoch -> when the chief logged its end (the container runtime's timestamp, epoch seconds)."""
    return {int(m[1]): at for at, text in stamped_lines(log) if (m := _EPOCH_END.match(text))}


@dataclass
class ProgressSeen:
    """What a reader polling the run's status every `interval` seconds saw while it trained."""

    final: dict[str, Any]
    first_seen: dict[int, tuple[float, dict[str, Any]]]  # epoch -> (wall time first seen Running, progress)
    order: list[int]  # epochs in the order they appeared
    running_from: float | None = None  # wall times of the first and last poll that saw it Running
    running_until: float | None = None

    @property
    def running_seconds(self) -> float:
        """About how long the run was Running (to the reader's poll interval)."""
        return self.running_until - self.running_from if self.running_from and self.running_until else 0.0

    def delays(self, log: str) -> list[float]:
        """Seconds from each epoch's end in the chief's log to its first sight in the status."""
        logged = epoch_end_times(log)
        return sorted(self.first_seen[e][0] - logged[e] for e in self.first_seen if e in logged)


def watch_progress(real_node: RealNode, namespace: str, name: str, interval: float = 0.5,
                   on_new_epoch: Callable[[int], None] | None = None) -> ProgressSeen:  # fmt: skip
    seen = ProgressSeen({}, {}, [])

    def probe() -> dict[str, Any] | None:
        st = real_node.run_status(namespace, name)
        progress = st.get("progress")
        if st.get("phase") == "Running":
            seen.running_until = time.time()
            seen.running_from = seen.running_from or seen.running_until
        if st.get("phase") == "Running" and progress:
            epoch = progress["epoch"]
            if not seen.order or seen.order[-1] != epoch:
                seen.order.append(epoch)
            if epoch not in seen.first_seen:
                seen.first_seen[epoch] = (time.time(), progress)
                if on_new_epoch is not None:
                    on_new_epoch(epoch)
        return st if st.get("phase") in ("Succeeded", "Failed") else None

    seen.final = wait_for(probe, f"run {namespace}/{name} to finish", timeout=900, interval=interval)
    return seen


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    return sorted_values[min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))]
