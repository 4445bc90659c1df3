"""`dtr run FILE`: train a DistTrainingRun with local processes, no cluster.

The run is rendered by the operator's own builders (build_tfjob/build_pvc), and each replica of
the TFJob runs as a local process (translate.py): the TF_CONFIG the
training-operator would inject, rewritten to loopback ports; the PVC as ./.dtr/volumes/<claim>
with the mountPath rewritten to it; the termination message in a per-replica file. The TFJob's
restart policy and backoffLimit apply as the training-operator and kubelet would apply them, and
the final status is computed by the operator's status/ package from the TFJob and pod statuses this
runner plays, so it reads exactly like `kubectl get dtr NAME -o yaml` would. That status, as it
changes (each epoch, the end), is also written to DIR/runs/<name>/status.json: what the Python client's local
backend reads (dtr_client), as it reads a run's status from the API server on a cluster. SUSPEND_SIGNAL stops
the workers and leaves the run Suspended; `dtr run` of the same run and DIR resumes it from its backup, and any
other run of that name starts fresh (backups.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml
from dtr_contract import flags, layout
from dtr_contract.container import PORT

from dtr_operator import api, builders, reasons
from dtr_operator.spec import RunSpec
from dtr_operator.status.code import code_status
from dtr_operator.status.compute import tfjob_status
from dtr_operator.status.progress import running_progress

from .. import submit
from . import kubelet, ports, translate
from .console import Console
from .jobs import End, as_created, end_by_exits, end_by_limits, job_restarts, pod_view, replica_labels, tfjob_view
from .source import RunError, code_run, load_run
from .start import before_start, check_network, tracking_uri

STOP_GRACE_SECONDS = 5.0
POLL_SECONDS = 0.2
STATUS_FILE = "status.json"  # in the run's directory: its status as the operator would write it
SUSPEND_SIGNAL = signal.SIGUSR1  # spec.suspend of a local run (dtr_client's suspend): no signal kubectl sends


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the imperative shell ------------------------------------------------------------------------


@dataclass
class Replica:
    rtype: str
    index: int
    pod: str
    container: dict[str, Any]
    dir: Path
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = None
    process: translate.LocalProcess | None = None
    restart_count: int = 0
    attempts: int = 0
    started_at: str = ""
    state: dict[str, Any] = field(default_factory=lambda: kubelet.waiting("ContainerCreating"))
    last_state: dict[str, Any] = field(default_factory=dict)
    next_start: float = 0.0
    final_code: int | None = None

    @property
    def label(self) -> str:
        return f"{self.rtype.lower()}-{self.index}"

    @property
    def log_path(self) -> Path:
        return self.dir / f"{self.label}.log"

    @property
    def termination_path(self) -> Path:
        return self.dir / f"{self.label}.termination-log"


class LocalRun:
    def __init__(self, run: RunSpec, base_dir: Path, python: str, console: Console,
                 code: submit.CodeFile | None = None, tracking_uri: str = "") -> None:  # fmt: skip
        # As the API server would have it once created: generation 1 (status.observedGeneration).
        run = dataclasses.replace(run, generation=run.generation or 1)
        self.run = run
        self.console = console
        self.python = python
        self.code = code  # the local file playing the run's code ConfigMap
        # As the operator makes it: the workers check the file they run against the digest in status.code; its pods
        # name its uid (they are the TFJob's own).
        self.tfjob = as_created(builders.build_tfjob(run, self.code_status().get("code", {}).get("sha256"),
                                                     tracking_uri), str(uuid.uuid4()))  # fmt: skip
        self.pvc = builders.build_pvc(run)
        job = self.tfjob["spec"]
        self.success_policy = job.get("successPolicy", "")
        self.run_policy = job.get("runPolicy") or {}
        (rtype, rspec), *others = job["tfReplicaSpecs"].items()
        if others:
            raise RunError("dtr run handles TFJobs with one replica type (Worker)")
        self.rtype = rtype
        self.policy = rspec.get("restartPolicy", "Never")
        self.template = rspec["template"]
        self.volume_root = base_dir / "volumes"
        self.run_dir = base_dir / "runs" / run.name
        count = int(rspec.get("replicas", 1))
        container = next(c for c in self.template["spec"]["containers"] if c["name"] == api.CONTAINER_NAME)
        self.replicas = [
            Replica(
                rtype,
                i,
                builders.worker_pod_name(run, i),
                self.with_tf_config(container, count, i),
                self.run_dir,
            )
            for i in range(count)
        ]
        self.ports: dict[str, int] = {}
        self.start_time = ""
        self.interrupted = False
        self.suspended = False  # interrupted by SUSPEND_SIGNAL: the run ends Suspended, not Failed
        self.status: dict[str, Any] = {}  # the last status written to status_path
        self.stopping = False  # the job has ended: a container stopped now is not restarted

    def with_tf_config(self, container: Mapping[str, Any], count: int, index: int) -> dict[str, Any]:
        """The container as the training-operator hands it to the pod: TF_CONFIG added when distributed."""
        port = next(
            (p["containerPort"] for p in container.get("ports") or [] if p.get("name") == api.PORT_NAME),
            PORT,
        )
        cfg = translate.tf_config_for(
            self.run.tfjob_name, self.run.namespace, {self.rtype: count}, self.rtype, index, port
        )
        variables = [e for e in container.get("env") or [] if e.get("name") != "TF_CONFIG"]
        if cfg is not None:
            variables.append({"name": "TF_CONFIG", "value": json.dumps(cfg, separators=(",", ":"))})
        return {**container, "env": variables}

    @property
    def status_path(self) -> Path:
        return self.run_dir / STATUS_FILE

    def claim_dir(self, claim: str) -> str:
        return str((self.volume_root / claim).resolve())

    @property
    def code_dir(self) -> Path:
        """The stand-in for the run's code ConfigMap: a directory with the file under its key."""
        return self.run_dir / "code"

    def config_maps(self) -> dict[str, str]:
        """ConfigMap name -> its local directory: the run's code, when it has a file."""
        name = self.run.code.config_map if self.run.code else None
        return {name: str(self.code_dir.resolve())} if self.code is not None and name else {}

    def place_code(self) -> None:
        """The file under its key, read-only, as the kubelet mounts the ConfigMap (a copy: later edits of the
        file do not reach a run that has started)."""
        code, key = self.code, self.run.code.file_key if self.run.code else None
        if code is None or key is None:
            return
        self.code_dir.mkdir(parents=True, exist_ok=True)
        target = self.code_dir / key
        target.unlink(missing_ok=True)
        target.write_bytes(code.content)
        target.chmod(builders.CODE_FILE_MODE)

    def code_status(self) -> dict[str, Any]:
        """status.code as the operator records it, from the local file."""
        code, spec = self.code, self.run.code
        if code is None or spec is None or spec.config_map is None or spec.file_key is None:
            return {}
        return {"code": code_status(spec.config_map, spec.file_key, code.content)}

    # -- processes --

    def start(self, r: Replica) -> None:
        volumes = self.template["spec"].get("volumes") or []
        raw = next((e["value"] for e in r.container["env"] if e["name"] == "TF_CONFIG"), None)
        tf_config = translate.parse_tf_config(raw)
        ports.allocate(translate.tf_config_addresses(tf_config or {}), self.ports)
        proc_spec = translate.translate_container(
            r.container,
            volumes,
            python=self.python,
            ports=self.ports,
            claim_dir=self.claim_dir,
            scratch_dir=str(r.dir / f"{r.label}-volumes"),
            termination_path=str(r.termination_path.resolve()),
            fields={"metadata.name": r.pod, "metadata.namespace": self.run.namespace},
            base_env=translate.base_env(os.environ, r.pod),
            config_maps=self.config_maps(),
            secret_keys=translate.secret_keys_from(os.environ),
        )
        scratch = str(r.dir / f"{r.label}-volumes")
        for local in translate.volume_dirs(volumes, self.claim_dir, scratch, self.config_maps()).values():
            Path(local).mkdir(parents=True, exist_ok=True)
        if r.attempts > 0:
            r.restart_count += 1
        r.attempts += 1
        r.termination_path.write_text("")
        r.process = proc_spec
        try:
            r.proc = subprocess.Popen(
                proc_spec.argv,
                env=proc_spec.env,
                cwd=proc_spec.cwd or str(r.dir),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise RunError(f"cannot start {proc_spec.argv[0]}: {exc.strerror}") from None
        r.started_at = now_rfc3339()
        r.state = kubelet.running(r.started_at)
        r.reader = threading.Thread(target=self.pump, args=(r, r.proc), daemon=True)
        r.reader.start()

    def pump(self, r: Replica, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with open(r.log_path, "ab") as logf:
            logf.write(f"--- attempt {r.attempts} ---\n".encode())
            for raw in iter(proc.stdout.readline, b""):
                logf.write(raw)
                logf.flush()
                for part in raw.decode(errors="replace").replace("\r", "\n").split("\n"):
                    if part.strip():
                        self.console.replica_line(r.label, part.rstrip())

    def on_exit(self, r: Replica, code: int) -> None:
        if r.reader is not None:
            r.reader.join(timeout=5)  # the last lines (the summary) are in the log before we read it
        logs = _read(r.log_path).split(f"--- attempt {r.attempts} ---\n")[-1]
        message = kubelet.termination_message(
            _read(r.termination_path), logs, code, r.container.get("terminationMessagePolicy", "File")
        )
        message = translate.unmap_text(message, r.process.path_map if r.process else [])
        state = kubelet.terminated(code, message, r.started_at, now_rfc3339(), f"local://{r.pod}/{r.attempts}")
        r.proc = None
        if not (self.interrupted or self.stopping) and job_restarts(self.policy, code):
            delay = kubelet.backoff_seconds(r.restart_count)
            self.console.say(f"[dtr] {r.label} exited with code {code}; restarting in {delay:g}s ({self.policy})")
            r.last_state, r.state = state, kubelet.waiting("CrashLoopBackOff")
            r.next_start = time.monotonic() + delay
        else:
            if code != 0:
                self.console.say(f"[dtr] {r.label} exited with code {code} (restartPolicy {self.policy})")
            r.state, r.final_code = state, code

    def stop_all(self) -> None:
        self.stopping = True
        live = [r for r in self.replicas if r.proc is not None]
        for r in live:
            _signal_group(r.proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for r in live:
            assert r.proc is not None
            try:
                r.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _signal_group(r.proc, signal.SIGKILL)
                r.proc.wait()
            code = kubelet.exit_code_of(r.proc.returncode)
            self.on_exit(r, code)
            if r.final_code is None:
                r.final_code = code

    # -- the job --

    def execute(self) -> End:
        """Run to the end: (phase, TFJob condition reason, message)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.place_code()
        for r in self.replicas:
            r.log_path.write_text("")
        self.start_time = now_rfc3339()
        started = time.monotonic()
        for r in self.replicas:
            self.start(r)
        job = f"{self.run.namespace}/{self.run.tfjob_name}"
        while True:
            if not self.interrupted:
                self.step()
            ended = self.ended(time.monotonic() - started)
            if ended is not None:
                self.stop_all()  # only with a worker-0 success policy can others still run after a success
                return ended
            self.record(reasons.RUNNING, "TFJobRunning", f"TFJob {job} is running.")
            time.sleep(POLL_SECONDS)

    def step(self) -> None:
        """Notice exits; start replicas whose restart delay is over (as the kubelet would)."""
        for r in self.replicas:
            if r.proc is not None and (rc := r.proc.poll()) is not None:
                self.on_exit(r, kubelet.exit_code_of(rc))
            if r.proc is None and r.final_code is None and r.next_start and time.monotonic() >= r.next_start:
                r.next_start = 0.0
                self.start(r)

    def ended(self, elapsed: float) -> End | None:
        """The job's end as the training-operator would call it, or None while it goes on."""
        job = f"{self.run.namespace}/{self.run.tfjob_name}"
        if self.suspended:
            return reasons.SUSPENDED, "TFJobSuspended", f"TFJob {job} is suspended."
        if self.interrupted:
            return reasons.FAILED, "Interrupted", f"dtr run of TFJob {job} was interrupted"
        exits = {r.label: r.final_code for r in self.replicas}
        restarts = sum(r.restart_count for r in self.replicas)
        return end_by_exits(exits, self.success_policy, self.rtype, job) or end_by_limits(
            self.policy, self.run_policy, restarts, elapsed, job
        )

    def final_status(self, phase: str, reason: str, message: str) -> dict[str, Any]:
        pods = [
            pod_view(
                r.pod,
                self.run.namespace,
                replica_labels(self.run.tfjob_name, r.rtype, r.index),
                kubelet.pod_status(
                    [
                        kubelet.container_status(
                            api.CONTAINER_NAME,
                            r.container.get("image", ""),
                            r.state,
                            r.restart_count,
                            r.last_state,
                        )
                    ],
                    self.start_time,
                    now_rfc3339(),
                    translate.LOOPBACK,
                ),
                self.tfjob,
            )
            for r in self.replicas
        ]
        counts = {
            "active": sum(1 for r in self.replicas if r.final_code is None),
            "succeeded": sum(1 for r in self.replicas if r.final_code == 0),
            "failed": sum(1 for r in self.replicas if r.final_code not in (None, 0)),
        }
        completion = now_rfc3339() if phase in reasons.TERMINAL else None
        tfjob = tfjob_view(self.tfjob, phase, reason, message, counts, self.start_time, completion)
        # Suspended by SUSPEND_SIGNAL: the run as its spec.suspend would have it, explained by the operator's code.
        run = dataclasses.replace(self.run, suspend=True) if self.suspended else self.run
        # Merged into the last status, as the operator's merge patch leaves the fields it does not set (progress).
        found = {**self.status, **tfjob_status(run, tfjob, pods, self.status, now_rfc3339())}
        return {**running_progress(found, self.console.last_end, now_rfc3339()), **self.code_status()}

    def record(self, phase: str, reason: str, message: str) -> dict[str, Any]:
        """The run's status now (final_status), written to status_path when it changed: atomically, so a reader
        never sees half a file."""
        found = self.final_status(phase, reason, message)
        if found != self.status:
            self.status = found
            partial = self.status_path.with_suffix(".tmp")
            partial.write_text(json.dumps(found, indent=1))
            partial.replace(self.status_path)
        return found


def _signal_group(proc: subprocess.Popen[bytes] | None, sig: int) -> None:
    if proc is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


def _read(path: Path | str, missing: bool = False) -> str:
    """A file's text; "" when it cannot be read, or with missing, RunError saying why."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError as exc:
        if missing:
            raise RunError(f"cannot read {path}: {exc.strerror}") from None
        return ""


def run_file(
    path: str,
    *,
    base_dir: Path,
    python: str,
    out: TextIO = sys.stdout,
    on_signal: Callable[[int, Callable[[int, Any], None]], Any] = signal.signal,
    code: str | None = None,
    given: Mapping[str, Any] | None = None,
    network: Callable[[], str | None] = lambda: None,
    loopback_only: bool = False,
    backup: str | None = None,
    data: str | None = None,
) -> int:
    """`dtr run FILE` (a run file, with --code its code's file) or `dtr run FILE.py` (the run `dtr submit FILE.py`
    would send, `given` its options): exit 0 when the run Succeeded, 1 when it Failed, 130 interrupted; bad input
    is a RunError, or a translate.TranslateError for a pod a local process cannot play (both one line, exit 2 in
    dtr_cli). network() readies the network the workers will share, once the input is good: None, or a warning to
    print (netns.py); loopback_only: it gives them loopback only, where no object store answers; backup and data:
    start.before_start's (--resume or --fresh, --data)."""
    uri, note = tracking_uri(os.environ, loopback_only)  # the operator's --mlflow-tracking-uri, played
    local = _prepare_run(path, base_dir, python, Console(out), code, given or {}, uri)
    check_network(local.run, loopback_only)
    sha = local.code_status().get("code", {}).get("sha256")
    for line in [*before_start(local.run, local.claim_dir(local.run.pvc_name), local.run_dir, STATUS_FILE, sha,
                              backup, data), *([note] if note else [])]:  # fmt: skip
        local.console.say(line)
    if (warning := network()) is not None:
        print(warning, file=sys.stderr, flush=True)

    def interrupt(signum: int, _frame: Any) -> None:
        local.suspended = local.suspended or signum == SUSPEND_SIGNAL
        local.interrupted = True

    run, console = local.run, local.console
    previous = {s: on_signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM, SUSPEND_SIGNAL)}
    volume = f"volume {run.pvc_name} -> {local.claim_dir(run.pvc_name)}" if run.has_volume else \
        f"no volume: each worker its own directory, backups in {run.storage.backup_uri}"  # fmt: skip
    console.say(
        f"[dtr] run {run.name}: {len(local.replicas)} {local.rtype.lower()}(s), restartPolicy {local.policy}; "
        f"{volume}; logs in {local.run_dir}"
    )
    if recorded := local.code_status().get("code"):
        console.say(f"[dtr] code {recorded['key']} (sha256 {recorded['sha256']}) -> {local.code_dir}")
    try:
        phase, reason, message = local.execute()
    except (RunError, translate.TranslateError):
        local.stop_all()
        raise
    finally:
        for s, handler in previous.items():
            on_signal(s, handler)
    return _report_end(local, local.record(phase, reason, message), local.claim_dir(run.pvc_name))


def _prepare_run(path: str, base_dir: Path, python: str, console: Console, code_path: str | None,
                 given: Mapping[str, Any], tracking: str = "") -> LocalRun:  # fmt: skip
    """The run of the file, ready to execute; RunError (one line) when a file or the Python cannot be used."""
    if path.endswith(".py"):
        if code_path is not None:
            raise RunError(f"{path} is the run's code already: {flags.CODE} goes with a run file")
        run, code = code_run(path, given)
    else:
        if any(value is not None for value in given.values()):
            raise RunError(f"{path}: the training options go with FILE.py; a run file says them itself")
        code = _read_code(code_path)
        run = load_run(_read(path, missing=True), path, code)
    if not Path(python).exists():
        raise RunError(
            f"the trainer's Python {python} does not exist: run `make setup-trainer` (or set DTR_TRAINER_PYTHON)"
        )
    return LocalRun(run, base_dir, python, console, code, tracking)


def _read_code(path: str | None) -> submit.CodeFile | None:
    try:
        return None if path is None else submit.read_code(path)
    except submit.SubmitError as exc:
        raise RunError(str(exc)) from None


def _report_end(local: LocalRun, final: Mapping[str, Any], claim: str) -> int:
    """Print the final status and where the model is on disk; the exit code of `dtr run`."""
    local.console.say(yaml.safe_dump({"status": final}, sort_keys=False).rstrip())
    model = final.get("model") or {}
    if (inside := layout.in_volume(model.get("path", ""))) is not None:
        local.console.say(f"[dtr] model on disk: {claim}/{inside}")
    elif model.get("path"):
        local.console.say(f"[dtr] model published at {model['path']}")
    if local.interrupted:
        return 130
    return 0 if final.get("phase") == reasons.SUCCEEDED else 1


def default_base_dir() -> Path:
    return Path(os.environ.get("DTR_RUN_DIR") or ".dtr")


def default_python() -> str:
    return translate.default_python(os.environ, str(Path(__file__).resolve().parents[3]))
