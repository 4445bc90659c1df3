"""`dtr data put` and `dtr model get`, the pure part: the transfer pod, the paths, the versions, progress.

Both commands copy through a short-lived pod in the claim's namespace that mounts the claim (read-only
for model get) and runs nothing but an idle process; dtr execs the copy program (copier.py) in it over
the API server's exec WebSocket, checks every file's SHA-256 at both ends, and deletes the pod. The pod
runs as the trainer does (uid and gid 1000, fsGroup 1000, so the trainer can read and write what is put),
with no ServiceAccount token, a read-only root filesystem, no capabilities, seccomp RuntimeDefault and
resource limits: it passes Pod Security `restricted`. If dtr dies without deleting it, its idle process
exits once no copy has touched its heartbeat file for IDLE_SECONDS, and the pod ends (Succeeded).

The shell, volume.py, orders the API calls (kube.py) and the copy. The TensorBoard pod of `dtr tensorboard`
(tensorboard_pod) is the same pod, read-only, running TensorBoard instead; dtr_client.tensorboard starts it.
"""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtr_contract import layout

from dtr_operator.api import GROUP
from dtr_operator.builders import RUN_AS, SCRATCH_PATH, owner_reference
from dtr_operator.spec import RunSpec, parse_run

CONTAINER = "copy"
COMPONENT = "dtr-transfer"
LABELS = {"app.kubernetes.io/managed-by": "dtr", "app.kubernetes.io/name": COMPONENT}
CLAIM_ANNOTATION = f"{GROUP}/claim"
WHAT_ANNOTATION = f"{GROUP}/transfer"
VOLUME = "volume"
SCRATCH = "tmp"
HEARTBEAT = posixpath.join(SCRATCH_PATH, "dtr-copy-heartbeat")
IDLE_SECONDS = 300
START_TIMEOUT = 120.0  # seconds for the pod to run, by default (--timeout)
RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}

# The pod's own process: waits, and exits once no copy has touched the heartbeat file for IDLE_SECONDS, or
# on SIGTERM (a pod's PID 1 ignores it by default) as soon as no copy runs, within the grace period: a copy
# whose connection dtr has closed (Ctrl-C) sees the end of its input and removes its partial file first.
GRACE_SECONDS = 3
IDLE = f"""import os, signal, sys, time
def stop(*_):
    end = time.time() + {GRACE_SECONDS - 1}
    while time.time() < end and [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
        time.sleep(0.1)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
start = time.time()
while True:
    time.sleep(2)
    try:
        last = max(start, os.stat({HEARTBEAT!r}).st_mtime)
    except OSError:
        last = start
    if time.time() - last > {IDLE_SECONDS}:
        sys.exit(0)
"""

# `python -c BOOTSTRAP SIZE SHA256 ARGS...`: reads the copy program's text (SIZE bytes) from stdin, checks
# it, runs it with ARGS; what follows on stdin is the program's (a tree to receive). Sent this way, not as
# one huge argument, so the exec request, the API server's audit log and `ps` stay short.
BOOTSTRAP = """import hashlib, sys
size, digest = int(sys.argv[1]), sys.argv[2]
text = sys.stdin.buffer.read(size)
if hashlib.sha256(text).hexdigest() != digest:
    print("error: the copy program arrived damaged", file=sys.stderr)
    sys.exit(3)
sys.argv = ["copier.py"] + sys.argv[3:]
exec(compile(text, "copier.py", "exec"), {"__name__": "__main__"})
"""

# A container that cannot start for one of these reasons will not start by waiting.
CANNOT_START = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                          "CreateContainerConfigError", "CreateContainerError", "RunContainerError"})  # fmt: skip
READY, WAITING, FAILED = "ready", "waiting", "failed"


class TransferError(Exception):
    """Why the copy did not happen or did not complete: one line for the user."""


class AmbiguousTarget(TransferError):
    """A bare name that is a run and a claim both (not the run's own): the user must say which (--run, --claim), so
    bad input, as a path that cannot be used is."""


# What a name given to `dtr data put` is (--claim, --run); a bare name (None) is whichever of the two exists.
CLAIM, RUN = "claim", "run"


# ---- paths on the volume -------------------------------------------------------------------------


def default_dest() -> str:
    """Where `dtr data put` puts things by default: the trainer's --data-dir, relative to the volume's root."""
    return layout.in_volume(layout.data_dir()) or ""


def volume_path(dest: str) -> str:
    """DEST as a normalized path relative to the volume's root ('' for the root). A path under the trainer's
    mount path is taken as that place on the volume; any other absolute path, or one leaving the volume
    (`..`), is a TransferError."""
    inside = layout.in_volume(dest)
    relative = inside if inside is not None else dest
    if "\0" in relative or relative.startswith("/"):
        raise TransferError(f"DEST {dest!r} must be a path on the volume relative to its root, such as "
                            f"{default_dest()!r}")  # fmt: skip
    normal = posixpath.normpath(relative) if relative else "."
    if normal == ".." or normal.startswith("../"):
        raise TransferError(f"DEST {dest!r} leaves the volume")
    return "" if normal == "." else normal


def in_pod(relative: str) -> str:
    """A volume-relative path as the transfer pod sees it."""
    return posixpath.join(layout.MOUNT_PATH, relative) if relative else layout.MOUNT_PATH


def shown(relative: str) -> str:
    return relative or "the volume's root"


# ---- the pod ---------------------------------------------------------------------------------------


def pod_name(verb: str, claim: str, token: str) -> str:
    """dtr-<verb>-<claim>-<token>, within a DNS label's 63 characters."""
    head = f"dtr-{verb}-{claim}"[: 62 - len(token)].rstrip("-.")
    return f"{head}-{token}"


def _security() -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod's and the container's securityContext: the trainer's, and Pod Security `restricted`."""
    pod = {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS,
           "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    container = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
                 "runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS}  # fmt: skip
    return pod, container


def _on_node(node: str) -> dict[str, Any]:
    """Required affinity to the node of that name (its name, not a hostname label that may differ)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def pod_manifest(namespace: str, name: str, claim: str, image: str, read_only: bool, what: str,
                 node: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The transfer pod: the claim at the trainer's mount path, an idle process, restricted in every way."""
    pod_security, container_security = _security()
    container = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-c", IDLE],
        "securityContext": container_security,
        "resources": json.loads(json.dumps(RESOURCES)),
        "volumeMounts": [{"name": VOLUME, "mountPath": layout.MOUNT_PATH, "readOnly": read_only},
                         {"name": SCRATCH, "mountPath": SCRATCH_PATH}],
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        "securityContext": pod_security,
        "containers": [container],
        "volumes": [{"name": VOLUME, "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}},
                    {"name": SCRATCH, "emptyDir": {"sizeLimit": "1Mi"}}],
    }
    if node is not None:
        spec["affinity"] = _on_node(node)
    metadata = {"name": name, "namespace": namespace, "labels": dict(LABELS),
                "annotations": {CLAIM_ANNOTATION: claim, WHAT_ANNOTATION: what}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


# ---- the TensorBoard pod (dtr tensorboard, dtr_client.tensorboard) ------------------------------------

TENSORBOARD = "tensorboard"  # the container's name and the pod's app.kubernetes.io/name
TENSORBOARD_PORT = 6006
TENSORBOARD_OF = f"{GROUP}/tensorboard-of"  # the run's name; not RUN_LABEL, which the run's NetworkPolicy admits
TENSORBOARD_DEADLINE = 8 * 3600  # seconds: the pod ends by itself if dtr is gone without deleting it
# TensorBoard 2.11 with the image's TensorFlow: about 400 MB resident serving a run (measured with .venv/trainer).
TENSORBOARD_RESOURCES = {"requests": {"cpu": "100m", "memory": "384Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def tensorboard_labels(run_name: str) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "dtr", "app.kubernetes.io/name": TENSORBOARD, TENSORBOARD_OF: run_name}


def tensorboard_command(log_dir: str, host: str, port: int) -> list[str]:
    """TensorBoard on a run's log dir, run by the image's `python` (locally: the trainer's Python in its place)."""
    return ["python", "-m", "dtr_trainer.board", "--logdir", log_dir, "--host", host, "--port", str(port)]


def tensorboard_pod(run: RunSpec, name: str, node: str | None = None) -> dict[str, Any]:
    """The pod that serves a run's TensorBoard logs: the run's image, its claim read-only, Pod Security
    `restricted`, owned by the run (garbage-collected with it) and ended by TENSORBOARD_DEADLINE at the latest.
    TensorBoard listens on the pod's loopback only: a port-forward reaches it there, other pods cannot."""
    manifest = pod_manifest(run.namespace, name, run.pvc_name, run.image, True, f"tensorboard {run.name}", node)
    spec, container = manifest["spec"], manifest["spec"]["containers"][0]
    container.update(name=TENSORBOARD, imagePullPolicy=run.image_pull_policy,
                     command=tensorboard_command(layout.logs_dir(run.name), "127.0.0.1", TENSORBOARD_PORT),
                     resources=json.loads(json.dumps(TENSORBOARD_RESOURCES)),
                     ports=[{"name": TENSORBOARD, "containerPort": TENSORBOARD_PORT, "protocol": "TCP"}])  # fmt: skip
    scratch = next(v for v in spec["volumes"] if v["name"] == SCRATCH)
    scratch["emptyDir"] = {"sizeLimit": "64Mi"}  # TensorBoard's own files in /tmp (.tensorboard-info, a port file)
    spec["activeDeadlineSeconds"] = TENSORBOARD_DEADLINE
    manifest["metadata"]["labels"] = tensorboard_labels(run.name)
    manifest["metadata"]["ownerReferences"] = [{**owner_reference(run), "controller": False,
                                                "blockOwnerDeletion": False}]  # fmt: skip
    return manifest


def command(program: bytes, op: str, target: str) -> list[str]:
    """The exec command that runs the copy program (its text sent first on stdin) on TARGET in the pod."""
    digest = hashlib.sha256(program).hexdigest()
    return ["python", "-c", BOOTSTRAP, str(len(program)), digest, op, layout.MOUNT_PATH, target, HEARTBEAT]


# ---- where the pod may run -------------------------------------------------------------------------


def _mounts(pod: Mapping[str, Any], claim: str) -> bool:
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return any(((v.get("persistentVolumeClaim") or {}).get("claimName")) == claim for v in volumes)


def claim_users(pods: Iterable[Mapping[str, Any]], claim: str) -> list[tuple[str, str]]:
    """(pod, node) of the pods that mount the claim and have not finished (a node '' when not yet placed)."""
    users = []
    for pod in pods:
        if _mounts(pod, claim) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            users.append((pod["metadata"]["name"], (pod.get("spec") or {}).get("nodeName") or ""))
    return sorted(users)


def placement(pvc: Mapping[str, Any], users: Sequence[tuple[str, str]]) -> str | None:
    """The node the transfer pod must run on, if any: a ReadWriteOnce volume mounted by running pods is
    attached to their node, so the pod joins them there. TransferError for a ReadWriteOncePod claim in use."""
    modes = set((pvc.get("spec") or {}).get("accessModes") or [])
    claim = pvc["metadata"]["name"]
    if "ReadWriteOncePod" in modes and users:
        raise TransferError(f"claim {claim} is ReadWriteOncePod and pod {users[0][0]} uses it; "
                            "try again when that pod has finished")  # fmt: skip
    nodes = sorted({node for _, node in users if node})
    if modes & {"ReadWriteMany", "ReadOnlyMany"} or len(nodes) != 1:
        return None
    return nodes[0]


# ---- the pod starting -------------------------------------------------------------------------------


def _container_status(pod: Mapping[str, Any], container: str) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s.get("name") == container), {})


def _unscheduled(pod: Mapping[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"not scheduled: {condition.get('message') or condition.get('reason')}"
    return None


def _ended(phase: str, state: Mapping[str, Any]) -> str:
    ended = state.get("terminated") or {}
    return f"it ended ({phase}) before the copy: {ended.get('reason') or ended.get('message') or '?'}"


def _cannot_start(waiting: Mapping[str, Any]) -> str:
    return f"{waiting['reason']}: {waiting.get('message') or ''}".rstrip(": ")


def pod_start(pod: Mapping[str, Any], container: str = CONTAINER) -> tuple[str, str]:
    """(READY, WAITING or FAILED, what it is doing) for the transfer pod (or another one-container pod of dtr's,
    the TensorBoard pod) as the API shows it."""
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    state = _container_status(pod, container).get("state") or {}
    waiting = state.get("waiting") or {}
    if phase in ("Succeeded", "Failed"):
        return FAILED, _ended(phase, state)
    if "running" in state:
        return READY, "running"
    if waiting.get("reason") in CANNOT_START:
        return FAILED, _cannot_start(waiting)
    return WAITING, _unscheduled(pod) or waiting.get("reason") or phase


def _when(event: Mapping[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or "")


def events_summary(events: Iterable[Mapping[str, Any]], last: int = 3, besides: str = "") -> str:
    """The last few distinct events of the pod, oldest first, in one line; none whose message `besides`
    already says."""
    said: list[str] = []
    for event in sorted(events, key=_when):
        message = " ".join(str(event.get("message") or "").split())
        text = f"{event.get('reason')}: {message}"
        if text in said:
            said.remove(text)
        if message not in besides:
            said.append(text)
    return "; ".join(said[-last:])


def start_timeout(name: str, seconds: float, doing: str, events: str, node: str | None) -> str:
    where = f" (it must run on node {node}, where the ReadWriteOnce claim is in use)" if node else ""
    tail = f"; events: {events}" if events else ""
    return f"the transfer pod {name} did not start in {seconds:g} s{where}: {doing}{tail}"


# ---- the exec session's end -------------------------------------------------------------------------


def _exit_code(status: Mapping[str, Any]) -> int | None:
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
            return int(cause["message"])
    return None


def exit_status(payload: bytes) -> tuple[int, str]:
    """(exit code, message) from the exec's status channel (a metav1.Status); exit code -1 when the
    process did not run (its message says why)."""
    try:
        status = json.loads(payload)
    except ValueError:
        return -1, payload.decode("utf-8", "replace")[:300]
    if status.get("status") == "Success":
        return 0, ""
    code = _exit_code(status)
    message = str(status.get("message") or status.get("reason") or "the command failed")
    return (-1, message) if code is None else (code, str(status.get("message") or ""))


def program_error(code: int, message: str, stderr: str) -> str:
    """The copy program's own `error: ...` line, else the end of what it said, else the exec's message."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    mine = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    if mine:
        return mine[-1]
    detail = lines[-1] if lines else message
    return f"the copy in the pod failed (exit code {code}): {detail}" if code >= 0 else f"cannot run the copy: {detail}"


# ---- versions (dtr model get) ------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSource:
    """Where a run's model versions are: the claim, the versions' directory relative to the volume's root,
    and the version asked for (None: the latest on the volume)."""

    claim: str
    base: str
    version: int | None


def model_source(run: Mapping[str, Any], version: int | None) -> ModelSource:
    """The exported version in the run's status (or VERSION beside it); for a run with none, its claim and
    model name as the operator uses them and VERSION or the latest. SpecError for a run the operator would
    refuse."""
    model = (run.get("status") or {}).get("model") or {}
    path, claim = str(model.get("path") or ""), model.get("claim")
    base = layout.model_base(path) if path else None
    if base and claim:
        return ModelSource(str(claim), base, version if version is not None else int(path.rstrip("/").rsplit("/")[-1]))
    spec = parse_run(run)
    return ModelSource(spec.pvc_name, layout.in_volume(layout.export_dir(spec.model_name)) or "", version)


def choose_version(names: Iterable[str], wanted: int | None, where: str) -> int:
    """The version to copy among the directory names found at WHERE (numbered directories are versions)."""
    versions = sorted(int(n) for n in names if n.isdigit())
    if not versions:
        raise TransferError(f"no exported version in {where} yet")
    if wanted is None:
        return versions[-1]
    if wanted not in versions:
        raise TransferError(f"no version {wanted} in {where} (there: {', '.join(map(str, versions))})")
    return wanted


def version_path(source: ModelSource, version: int) -> str:
    return layout.version_dir(source.base, version)


# ---- checks and progress ---------------------------------------------------------------------------


def account_mismatch(sent: Mapping[str, str], account: Mapping[str, Any]) -> str | None:
    """Why the receiver's account of what it wrote is not what was sent (name and both digests), or None."""
    written = account.get("files") or {}
    for name, digest in sent.items():
        if written.get(name) != digest:
            return f"SHA-256 mismatch for {name}: local {digest}, in the pod {written.get(name) or 'nothing'}"
    extra = sorted(set(written) - set(sent))
    return f"the pod wrote {extra[0]}, which was not sent" if extra else None


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


@dataclass
class Progress:
    """Bytes copied of a total, as a line at most every `every` seconds, none before `after` seconds from
    the first bytes (a small copy says nothing but its result). Times are the caller's clock."""

    label: str
    total: int = 0
    done: int = 0
    every: float = 0.5
    after: float = 1.0
    started: float | None = None  # when the first bytes were counted
    last: float | None = None  # and the latest
    _shown: float = -math.inf

    def add(self, n: int, now: float) -> str | None:
        """Count n more bytes; the line to show now, or None."""
        self.done += n
        if self.started is None:
            self.started = now
        self.last = now
        if now - self.started < self.after or now - self._shown < self.every:
            return None
        self._shown = now
        return self.line(now)

    @property
    def showed(self) -> bool:
        return self._shown > -math.inf

    def line(self, now: float) -> str:
        elapsed = max(now - (now if self.started is None else self.started), 1e-9)
        percent = f" ({100 * self.done // self.total}%)" if self.total else ""
        return (f"{self.label}: {human_bytes(self.done)} of {human_bytes(self.total)}{percent}, "
                f"{human_bytes(self.done / elapsed)}/s")  # fmt: skip
