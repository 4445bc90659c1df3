"""Operator benchmark: latency, throughput and memory of `dtr operator` against a real local control
plane, side by side with the Kubeflow training-operator in the same run.

    .venv/op/bin/python -m bench.operator.run [--samples 40] [--runs 200] [--out bench/operator]

(from the repository root, or `make bench-operator`). It starts its own control plane (devcluster) in a temp
dir, with an apiserver audit log, and `dtr operator` as a subprocess watching one namespace. No
kubelet runs: pods stay Pending, so this measures the control loops, not training.

Every timestamp is taken in this process when a watch event arrives (no polling), with the same
client for our operator and the reference, so watch delivery costs both sides the same.

Writes results.json, results.md and results.png (if matplotlib is installed: bench/operator/requirements.txt).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from dtr_operator.builders import build_tfjob
from dtr_operator.spec import parse_run

from bench.operator.analysis import audit_requests, goals, history_row, latency_summary, markdown
from devcluster import controlplane
from tests.support.maximal import EXPANDING_ARGS, code_config_map, expanding_spec
from tests.support.runs import run_doc

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]  # where `-m bench.operator.tuned` is found
HISTORY = HERE / "history.json"  # every recorded run's figures (analysis.history_row)

NS = "bench"  # watched by our operator
REF_NS = "bench-ref"  # reference TFJobs, created directly (the operator does not watch it)
IMAGE = "localhost/distml/trainer:bench"
USER_AGENT = "dtr-bench/1"
DTR = "/apis/distml.dev/v1alpha1"
TFJOBS = "/apis/kubeflow.org/v1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
"""


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- process figures from /proc -----------------------------------------------------------------


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15 of stat)


def proc_status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


# ---- API client ---------------------------------------------------------------------------------


class Api:
    """The admin identity over aiohttp (its own user agent, so the audit log tells it apart).

    Not the tests' client (tests.support.api, blocking): here 32 creates are in flight while five watches
    stream in the same event loop, and each watch event is timed the moment it arrives."""

    def __init__(self, base: str, pki: Path) -> None:
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.base = base
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, limit=64),
            headers={"User-Agent": USER_AGENT},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )

    async def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = json.dumps(body) if body is not None else None
        for _ in range(60):
            async with self.session.request(
                method, self.base + path, data=data, headers={"Content-Type": content_type}
            ) as resp:
                text = await resp.text()
                if resp.status == 429:  # e.g. a new CRD's storage still initializing: not processed, retry
                    await asyncio.sleep(0.5)
                    continue
                if resp.status >= 300:
                    raise RuntimeError(f"{method} {path}: {resp.status} {text[:300]}")
                return json.loads(text) if text else {}
        raise RuntimeError(f"{method} {path}: still 429 after 30 s")

    async def close(self) -> None:
        await self.session.close()


class Hub:
    """Waiters woken on every event of every watch (a condition may span several watches)."""

    def __init__(self) -> None:
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    def wake(self) -> None:
        for pred, fut in self._waiters:
            if not fut.done() and pred():
                fut.set_result(None)
        self._waiters = [(p, f) for p, f in self._waiters if not f.done()]

    async def wait(self, pred: Callable[[], bool], timeout: float, what: str) -> None:
        if pred():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((pred, fut))
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}") from None


class Watch:
    """One watch on a collection: the monotonic time each object was first seen, its latest version,
    and the first time each tracked key held a value."""

    def __init__(self, api: Api, hub: Hub, path: str) -> None:
        self.api, self.hub, self.path = api, hub, path
        self.first_seen: dict[str, float] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        self.transitions: dict[tuple[str, str], float] = {}  # (name, "key=value") -> first time it held
        self.keys: dict[str, Callable[[dict[str, Any]], str | None]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        listing = await self.api.call("GET", self.path)
        rv = listing["metadata"]["resourceVersion"]
        for obj in listing.get("items") or []:
            self._record(obj, time.perf_counter())
        self._task = asyncio.create_task(self._loop(rv))

    async def _loop(self, rv: str) -> None:
        while True:
            url = (f"{self.api.base}{self.path}?watch=1&allowWatchBookmarks=true&timeoutSeconds=1800"
                   f"&resourceVersion={rv}")
            async with self.api.session.get(url) as resp:
                async for line in resp.content:
                    now = time.perf_counter()
                    event = json.loads(line)
                    obj = event["object"]
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._record(obj, now)
                    self.hub.wake()

    def _record(self, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        self.first_seen.setdefault(name, now)
        self.objects[name] = obj
        for label, key in self.keys.items():
            value = key(obj)
            if value is not None:
                self.transitions.setdefault((name, f"{label}={value}"), now)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


# ---- manifests ----------------------------------------------------------------------------------


def reference_tfjob(name: str) -> dict[str, Any]:
    """The very TFJob our operator would create for run_doc(name), without our labels, in REF_NS."""
    run = parse_run({**run_doc(name), "metadata": {"name": name, "namespace": REF_NS, "uid": "x"}}, IMAGE)
    tfjob = build_tfjob(run)
    tfjob["metadata"] = {"name": name, "namespace": REF_NS}
    for spec in tfjob["spec"]["tfReplicaSpecs"].values():
        spec["template"].get("metadata", {}).pop("labels", None)
    return tfjob


def run_reason(obj: dict[str, Any]) -> str | None:
    return (obj.get("status") or {}).get("reason")


def run_phase(obj: dict[str, Any]) -> str | None:
    return (obj.get("status") or {}).get("phase")


@dataclass(frozen=True)
class BurstRuns:
    """What the burst creates: each run's document (by name), the status.reason that says its status mirrors its
    TFJob, the objects it needs first and the `dtr operator` flags that let it expand."""

    doc: Callable[[str], dict[str, Any]]
    mirrored_reason: str
    needs: tuple[dict[str, Any], ...] = ()
    operator_args: tuple[str, ...] = ()
    timeout: float = 120.0  # seconds until all are expanded; as long again for their status


ORDINARY = BurstRuns(run_doc, "TFJobCreated")


def largest() -> BurstRuns:
    """Runs of the largest spec that expands (tests/support/maximal.py, ~67 KB each): suspended, so the status
    the create handler writes (RunSuspended) is the one their TFJob's conditions keep; no worker pod is asked for."""
    spec = expanding_spec()
    return BurstRuns(lambda name: run_doc(name, spec=spec), "RunSuspended", (code_config_map(NS),), EXPANDING_ARGS,
                     timeout=600.0)


# ---- the benchmark ------------------------------------------------------------------------------


def start_control_plane(workdir: Path) -> controlplane.ControlPlane:
    """The project's control plane, with the apiserver writing an audit log (Metadata level)."""
    policy = workdir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    audit_log = workdir / "audit.log"
    plain_args = controlplane.apiserver_args

    def with_audit(*args: Any, **kwargs: Any) -> list[str]:
        return [*plain_args(*args, **kwargs), f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}",
                "--audit-log-format=json", "--audit-log-mode=batch"]  # fmt: skip

    controlplane.apiserver_args = with_audit
    cp = controlplane.ControlPlane(workdir / "cluster", log=lambda m: log(f"control plane: {m}"))
    cp.start()
    return cp


def start_operator(
    kubeconfig: Path, workdir: Path, metrics_port: int, extra: list[str], kopf_settings: list[str]
) -> subprocess.Popen[bytes]:
    """`dtr operator`; with kopf_settings, the same through tuned.py with those settings overridden."""
    command = [str(Path(sys.executable).parent / "dtr")]
    if kopf_settings:
        command = [sys.executable, "-m", "bench.operator.tuned"]
    args = [*command, "operator", "--namespace", NS, "--trainer-image", IMAGE,
            "--metrics-port", str(metrics_port), "--liveness-port", str(controlplane.free_port()), *extra]  # fmt: skip
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "DTR_BENCH_KOPF": ",".join(kopf_settings)}
    out = open(workdir / "operator.log", "wb")  # noqa: SIM115 (lives as long as the process)
    return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL, cwd=REPO)


class Sampler:
    """RSS of the operator and the training-operator every 0.25 s, for the plot."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.t0 = time.perf_counter()
        self.series: dict[str, list[tuple[float, float]]] = {k: [] for k in pids}
        self.marks: dict[str, float] = {}

    async def run(self) -> None:
        while True:
            now = time.perf_counter() - self.t0
            for name, pid in self.pids.items():
                with contextlib.suppress(OSError, KeyError):
                    self.series[name].append((round(now, 2), proc_status_kb(pid, "VmRSS") / 1024))
            await asyncio.sleep(0.25)

    def mark(self, label: str) -> None:
        self.marks[label] = round(time.perf_counter() - self.t0, 2)


async def latency_phase(
    api: Api, hub: Hub, w: dict[str, Watch], samples: int
) -> tuple[list[float], list[float], list[str]]:
    """Interleaved: one run (-> its TFJob and PVC), then one reference TFJob (-> its pods and services)."""
    ours: list[float] = []
    ref: list[float] = []
    names = []
    for i in range(samples):
        name = f"lat-{i:03d}"
        t0 = time.perf_counter()
        await api.call("POST", f"{DTR}/namespaces/{NS}/disttrainingruns", run_doc(name))
        await hub.wait(lambda n=name: n in w["tfjobs"].first_seen and f"{n}-data" in w["pvcs"].first_seen,
                               30, f"TFJob and PVC of {name}")  # fmt: skip
        ours.append(max(w["tfjobs"].first_seen[name], w["pvcs"].first_seen[f"{name}-data"]) - t0)
        names.append(name)
        await asyncio.sleep(0.3)  # let the status writes that follow settle

        ref_name = f"ref-{i:03d}"
        t0 = time.perf_counter()
        await api.call("POST", f"{TFJOBS}/namespaces/{REF_NS}/tfjobs", reference_tfjob(ref_name))
        want = [f"{ref_name}-worker-0", f"{ref_name}-worker-1"]

        def ready(want: list[str] = want) -> bool:
            return all(p in w["ref_pods"].first_seen and p in w["ref_svcs"].first_seen for p in want)

        # Both pods and services must be there; each watch wakes its own waiters, so wait on both.
        await hub.wait(ready, 30, f"pods and services of {ref_name}")
        ref.append(max(max(w["ref_pods"].first_seen[p], w["ref_svcs"].first_seen[p]) for p in want) - t0)
        await asyncio.sleep(0.3)
    return ours, ref, names


async def status_phase(api: Api, hub: Hub, w: dict[str, Watch], names: list[str]) -> list[float]:
    """Patch each TFJob's status subresource to Running; time until the run's status says Running."""
    runs = w["runs"]
    out = []
    for name in names:
        await hub.wait(lambda n=name: n in runs.objects and run_reason(runs.objects[n]) == "TFJobCreated", 30,
                        f"run {name} to mirror its TFJob's Created condition")  # fmt: skip
        tfjob = await api.call("GET", f"{TFJOBS}/namespaces/{NS}/tfjobs/{name}")
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        running = {"type": "Running", "status": "True", "reason": "TFJobRunning",
                   "message": f"TFJob {name} is running.", "lastUpdateTime": stamp,
                   "lastTransitionTime": stamp}  # fmt: skip
        conditions = [*(tfjob.get("status") or {}).get("conditions", []), running]
        t0 = time.perf_counter()
        await api.call("PATCH", f"{TFJOBS}/namespaces/{NS}/tfjobs/{name}/status",
                       {"status": {"conditions": conditions}}, "application/merge-patch+json")  # fmt: skip
        await hub.wait(lambda n=name: (n, "phase=Running") in runs.transitions, 30, f"run {name} to be Running")
        out.append(runs.transitions[(name, "phase=Running")] - t0)
        await asyncio.sleep(0.2)
    return out


async def running_phase(audit_log: Path, running: int, seconds: float) -> dict[str, Any]:
    """The operator's requests while `running` runs are Running and nothing else happens: the cost of
    status.progress (a chief-log read per running run per --progress-interval), from the audit log."""
    offset = audit_log.stat().st_size
    await asyncio.sleep(seconds)
    lines, _ = read_from(audit_log, offset)
    requests = audit_requests(lines)
    total = sum(requests.values())
    return {
        "running_runs": running,
        "seconds": seconds,
        "operator_requests": dict(requests),
        "requests_per_running_run_per_minute": round(total / running / seconds * 60, 2) if running else 0.0,
    }


def read_from(path: Path, offset: int) -> tuple[list[str], int]:
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1  # only whole lines; the rest is read next time
    return data[:end].decode("utf-8", "replace").splitlines(), offset + end


async def burst_phase(api: Api, hub: Hub, w: dict[str, Watch], runs_n: int, audit_log: Path, sampler: Sampler,
                      pids: dict[str, int], kind: BurstRuns = ORDINARY) -> dict[str, Any]:  # fmt: skip
    names = [f"burst-{i:03d}" for i in range(runs_n)]
    offset = audit_log.stat().st_size
    cpu0 = {name: proc_cpu_seconds(pid) for name, pid in pids.items()}
    gate = asyncio.Semaphore(32)

    async def create(name: str) -> None:
        async with gate:
            await api.call("POST", f"{DTR}/namespaces/{NS}/disttrainingruns", kind.doc(name))

    def expanded() -> int:
        return sum(1 for n in names if n in w["tfjobs"].first_seen and f"{n}-data" in w["pvcs"].first_seen)

    def mirrored() -> int:
        return sum(1 for n in names if (n, f"reason={kind.mirrored_reason}") in w["runs"].transitions)

    sampler.mark("burst start")
    t0 = time.perf_counter()
    await asyncio.gather(*(create(n) for n in names))
    t_created = time.perf_counter()
    result: dict[str, Any] = {"runs": runs_n, "largest": kind is not ORDINARY, "mirrored_reason": kind.mirrored_reason,
                              "seconds_to_create": round(t_created - t0, 2)}
    try:
        await hub.wait(lambda: expanded() == runs_n, kind.timeout, "all TFJobs and PVCs")
    except TimeoutError as err:
        result["error"] = f"{err}: {expanded()} of {runs_n} expanded"
    done = [max(w["tfjobs"].first_seen[n], w["pvcs"].first_seen[f"{n}-data"]) - t0 for n in names
            if n in w["tfjobs"].first_seen and f"{n}-data" in w["pvcs"].first_seen]  # fmt: skip
    t_all = max(done) if done else float("nan")
    sampler.mark("all expanded")
    result |= {
        "expanded": len(done),
        "seconds_to_all_expanded": round(t_all, 2),
        "runs_per_second": round(len(done) / t_all, 1) if done else 0.0,
        "expansion_seconds": sorted(round(d, 3) for d in done),
    }
    try:
        await hub.wait(lambda: mirrored() == runs_n, max(180, kind.timeout), "every run's status to mirror its TFJob")
        result["seconds_to_all_status"] = round(
            max(w["runs"].transitions[(n, f"reason={kind.mirrored_reason}")] for n in names) - t0, 2
        )
    except TimeoutError as err:
        result["seconds_to_all_status"] = None
        result.setdefault("error", f"{err}: {mirrored()} of {runs_n}")
    sampler.mark("all status")
    # Wait for the operator to go quiet (no request from it in the audit log for 3 s), then count.
    lines: list[str] = []
    quiet_since = time.perf_counter()
    deadline = quiet_since + 60
    while time.perf_counter() < deadline and time.perf_counter() - quiet_since < 3:
        await asyncio.sleep(0.5)
        new, offset = read_from(audit_log, offset)
        if sum(audit_requests(new).values()):
            quiet_since = time.perf_counter()
        lines += new
    requests = audit_requests(lines)
    total = sum(requests.values())
    result |= {
        "operator_requests": dict(requests),
        "operator_requests_total": total,
        "operator_requests_per_run": round(total / runs_n, 2),
        "window_seconds": round(time.perf_counter() - t0, 1),
        "cpu_seconds": {name: round(proc_cpu_seconds(pid) - cpu0[name], 2) for name, pid in pids.items()},
    }
    return result


async def reference_burst(api: Api, hub: Hub, w: dict[str, Watch], n: int, sampler: Sampler) -> dict[str, Any]:
    """The same burst for the training-operator: n TFJobs at once -> all their pods and services exist."""
    names = [f"refburst-{i:03d}" for i in range(n)]
    children = [f"{name}-worker-{i}" for name in names for i in (0, 1)]
    gate = asyncio.Semaphore(32)

    async def create(name: str) -> None:
        async with gate:
            await api.call("POST", f"{TFJOBS}/namespaces/{REF_NS}/tfjobs", reference_tfjob(name))

    def done() -> bool:
        return all(c in w["ref_pods"].first_seen and c in w["ref_svcs"].first_seen for c in children)

    sampler.mark("reference burst")
    t0 = time.perf_counter()
    await asyncio.gather(*(create(name) for name in names))
    result: dict[str, Any] = {"tfjobs": n, "seconds_to_create": round(time.perf_counter() - t0, 2)}
    try:
        await hub.wait(done, 240, "pods and services of every reference TFJob")
    except TimeoutError as err:
        result["error"] = str(err)
    seen = [max(w["ref_pods"].first_seen[f"{name}-worker-{i}"], w["ref_svcs"].first_seen[f"{name}-worker-{i}"])
            for name in names for i in (0, 1)
            if f"{name}-worker-{i}" in w["ref_pods"].first_seen
            and f"{name}-worker-{i}" in w["ref_svcs"].first_seen]  # fmt: skip
    per_job = sorted(
        round(max(w["ref_pods"].first_seen[f"{name}-worker-{i}"] for i in (0, 1)) - t0, 3)
        for name in names
        if all(f"{name}-worker-{i}" in w["ref_pods"].first_seen for i in (0, 1))
    )
    result |= {
        "seconds_to_all_pods_and_services": round(max(seen) - t0, 2) if seen else None,
        "tfjobs_per_second": round(n / (max(seen) - t0), 1) if len(seen) == 2 * n else None,
        "pods_seconds": per_job,
    }
    return result


def scrape(port: int) -> dict[str, float]:
    """The operator's dtr_* samples from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("dtr_") and not line.startswith("dtr_reconcile_seconds_bucket"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


async def wait_operator_ready(api: Api, w: dict[str, Watch], op: subprocess.Popen[bytes]) -> None:
    """A warm-up run, expanded end to end: kopf has listed, watched and handled once."""
    await api.call("POST", f"{DTR}/namespaces/{NS}/disttrainingruns", run_doc("warmup"))
    for _ in range(120):
        if op.poll() is not None:
            raise RuntimeError(f"dtr operator exited with {op.returncode}")
        if "warmup" in w["tfjobs"].first_seen:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError("the operator did not expand the warm-up run in 60 s")


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    load_before = os.getloadavg()
    kind = largest() if args.largest else ORDINARY
    operator_args = [*kind.operator_args, *args.operator_arg]
    cp = start_control_plane(workdir)
    state = cp.state()
    assert state is not None
    pki = cp.layout.pki
    api = Api(f"https://127.0.0.1:{state.ports.apiserver}", pki)
    op: subprocess.Popen[bytes] | None = None
    watches: dict[str, Watch] = {}
    sampler_task = None
    try:
        for ns in (NS, REF_NS):
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            await api.call("POST", "/api/v1/namespaces", namespace)
        for obj in kind.needs:
            await api.call("POST", f"/api/v1/namespaces/{NS}/{obj['kind'].lower()}s", obj)
        hub = Hub()
        watches = {
            "runs": Watch(api, hub, f"{DTR}/namespaces/{NS}/disttrainingruns"),
            "tfjobs": Watch(api, hub, f"{TFJOBS}/namespaces/{NS}/tfjobs"),
            "pvcs": Watch(api, hub, f"/api/v1/namespaces/{NS}/persistentvolumeclaims"),
            "ref_pods": Watch(api, hub, f"/api/v1/namespaces/{REF_NS}/pods"),
            "ref_svcs": Watch(api, hub, f"/api/v1/namespaces/{REF_NS}/services"),
        }
        watches["runs"].keys = {"phase": run_phase, "reason": run_reason}
        for watch in watches.values():
            await watch.start()
        metrics_port = controlplane.free_port()
        op = start_operator(cp.kubeconfig, workdir, metrics_port, operator_args, args.kopf_setting)
        pids = {"dtr-operator": op.pid, **{c: state.pids[c] for c in ("training-operator", "kube-apiserver")}}
        sampler = Sampler({"dtr-operator": op.pid, "training-operator": pids["training-operator"]})
        sampler_task = asyncio.create_task(sampler.run())
        await wait_operator_ready(api, watches, op)
        cpu_start = {name: proc_cpu_seconds(pid) for name, pid in pids.items()}
        log("operator ready; latency phase")
        sampler.mark("latency")
        ours, ref, names = await latency_phase(api, hub, watches, args.samples)
        log("status phase")
        sampler.mark("status")
        status = await status_phase(api, hub, watches, names)
        log(f"{len(names)} runs Running for {args.running_seconds} s")
        sampler.mark("running")
        running = await running_phase(workdir / "audit.log", len(names), args.running_seconds)
        log(f"burst of {args.runs} {'largest ' if args.largest else ''}runs")
        burst = await burst_phase(api, hub, watches, args.runs, workdir / "audit.log", sampler, pids, kind)
        log(f"reference burst of {args.runs} TFJobs")
        ref_burst = await reference_burst(api, hub, watches, args.runs, sampler)
        metrics = scrape(metrics_port)
        results: dict[str, Any] = {
            "create_to_children": latency_summary(ours),
            "reference_tfjob_to_pods": latency_summary(ref),
            "tfjob_status_to_run": latency_summary(status),
            "running": running,
            "burst": burst,
            "reference_burst": ref_burst,
            "processes": {
                name: {
                    "peak_rss_mb": round(proc_status_kb(pid, "VmHWM") / 1024, 1),
                    "cpu_seconds_total": round(proc_cpu_seconds(pid), 2),
                    "cpu_seconds_after_startup": round(proc_cpu_seconds(pid) - cpu_start[name], 2),
                    "cpu_seconds_burst": burst["cpu_seconds"][name],
                }
                for name, pid in pids.items()
            },
            "operator_metrics": metrics,
            "samples_seconds": {"create_to_children": ours, "reference_tfjob_to_pods": ref,
                                "tfjob_status_to_run": status},
            "rss_series_mb": sampler.series,
            "marks": sampler.marks,
        }
        ref_p50 = results["reference_tfjob_to_pods"]["p50_ms"]
        results["ratio_ours_to_reference_p50"] = round(results["create_to_children"]["p50_ms"] / ref_p50, 2)
        results["environment"] = {
            "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "cpus": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "operator_args": " ".join(["dtr operator", "--namespace", NS, *operator_args]),
            "kopf_overrides": args.kopf_setting,
            "control_plane_versions": {c: (cp.bin / f"{c}.version").read_text().strip()
                                       for c in controlplane.COMPONENTS if (cp.bin / f"{c}.version").exists()},
            "request_count_method": "kube-apiserver audit log (Metadata level, ResponseComplete; watches at "
            "ResponseStarted), requests whose user agent starts with dtr-operator/ or kopf/, from the first "
            "create of the burst until the operator made no request for 3 s",
        }
        results["goals"] = goals(results)
        return results
    finally:
        if sampler_task:
            sampler_task.cancel()
        for watch in watches.values():
            await watch.stop()
        await api.close()
        if op is not None:
            controlplane.stop_child(op)
        cp.stop()


def plot(results: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed (pip install -r bench/operator/requirements.txt): no plot")
        return False
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(16, 4.5))
    labels = {
        "create_to_children": "dtr-operator: run -> TFJob+PVC",
        "reference_tfjob_to_pods": "training-operator: TFJob -> pods+services",
        "tfjob_status_to_run": "dtr-operator: TFJob status -> run status",
    }
    for key, label in labels.items():
        ms = sorted(s * 1000 for s in results["samples_seconds"][key])
        a.step(ms, [(i + 1) / len(ms) for i in range(len(ms))], where="post", label=label)
    a.set(xlabel="latency (ms)", ylabel="fraction of samples", title="Latency (CDF)")
    a.set_xscale("log")
    a.legend(fontsize=7)
    burst = results["burst"]
    xs = burst["expansion_seconds"]
    b.step(xs, range(1, len(xs) + 1), where="post", label="dtr-operator: run -> TFJob+PVC")
    rb = results.get("reference_burst", {}).get("pods_seconds") or []
    if rb:
        b.step(rb, range(1, len(rb) + 1), where="post", label="training-operator: TFJob -> pods")
    b.axvline(20, color="red", linestyle=":", label="goal: 20 s")
    b.set(xlabel="seconds since the first create", ylabel="runs (TFJobs) expanded",
          title=f"{burst['runs']} runs at once: {burst['seconds_to_all_expanded']} s")  # fmt: skip
    b.legend(fontsize=7)
    for name, series in results["rss_series_mb"].items():
        if series:
            c.plot([t for t, _ in series], [m for _, m in series], label=name)
    c.axhline(150, color="red", linestyle=":", label="goal: 150 MB (dtr-operator)")
    for label, t in results["marks"].items():
        c.axvline(t, color="grey", linewidth=0.5)
        c.text(t, c.get_ylim()[1] * 0.95, label, rotation=90, fontsize=6, va="top")
    c.set(xlabel="seconds", ylabel="RSS (MB)", title="Memory over the benchmark")
    c.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def add_to_history(path: Path, row: dict[str, Any]) -> None:
    runs = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps([*runs, row], indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=40, help="latency samples per measurement (default 40)")
    p.add_argument("--runs", type=int, default=200, help="runs created at once (default 200)")
    p.add_argument("--running-seconds", type=float, default=30.0,
                   help="how long to count requests while the latency samples' runs are Running (default 30)")
    p.add_argument("--out", type=Path, default=HERE, help="where results.json/.md/.png go (default bench/operator)")
    p.add_argument("--name", default="results", help="file name stem of the outputs (default results)")
    p.add_argument("--largest", action="store_true",
                   help="the burst's runs of the largest spec that expands (tests/support/maximal.py expanding_spec, "
                   "~67 KB each; suspended), the operator allowing what they ask; the reference burst stays the same")
    p.add_argument("--operator-arg", action="append", default=[], help="extra argument for `dtr operator`")
    p.add_argument("--kopf-setting", action="append", default=[], metavar="PATH=VALUE",
                   help="override a kopf setting, e.g. execution.max_workers=32 "
                        "(runs bench/operator/tuned.py instead of dtr)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, audit log)")
    p.add_argument("--history", metavar="WHAT", help="also add this run, described as WHAT, to "
                   "bench/operator/history.json (docs/performance.md's table after `make docs`)")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="dtr-bench-op-"))
    log(f"work dir {workdir}")
    try:
        results = asyncio.run(bench(args, workdir))
    except (controlplane.ControlPlaneError, RuntimeError, TimeoutError) as err:
        print(f"bench: {err} (logs in {workdir})", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(results))
    if args.history:
        add_to_history(HISTORY, history_row(results, args.history))
    plot(results, args.out / f"{args.name}.png")
    print(markdown(results))
    if not args.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
