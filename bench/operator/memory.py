"""Operator memory with many runs of the largest size the CRD admits (issue 26, H2): peak and settled RSS of
`dtr operator` against the Deployment's memory limit.

    .venv/op/bin/python -m bench.operator.memory [--runs 1000] [--out bench/operator]

(from the repository root). It starts its own control plane (devcluster) in a temp dir, creates --runs runs of
tests/support/maximal.py (suspended, naming a code ConfigMap and a claim that do not exist: each waits,
CodeNotFound, and no training-operator or kubelet is needed), then starts `dtr operator` on their namespace, as
after a restart (the case that crash-looped: the initial listing and every run at once), allowing what they ask
(maximal.py EXPANDING_ARGS: without, they fail at once instead of waiting), and samples its RSS every 0.5 s until
every run says it waits, and for --settle seconds more.

    .venv/op/bin/python -m bench.operator.memory --metadata [--runs 1000]

measures twice on one control plane with deploy/base/admission.yaml applied (security review R1): --runs runs of
the largest spec as above, then --runs more of it that each carry the largest metadata the policy admits
(tests/support/maximal.py largest_metadata: ~130 KB more a run), each with an operator of its own, and writes
memory-metadata.json with the two peaks and their ratio (goal: under 200 MB, within 10%).

Writes memory.json (results, compared by hand across runs: nothing here is a timed test).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from dtr_operator.api import GROUP, PLURAL, VERSION

from bench.operator.run import proc_status_kb
from devcluster import controlplane
from tests.support.maximal import (
    EXPANDING_ARGS,
    EXPANDING_IMAGE,
    MAX_OWNER_REFERENCES,
    largest_metadata,
    maximal_spec,
)
from tests.support.runs import run_doc

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NS = "bench-memory"
BATCH = 50  # runs per `kubectl create` (ordinary runs)
WAITING = ("WaitingForPVC", "CodeNotFound")  # a run that waits: held by kopf between its handler's retries
DEPLOYMENT = REPO / "deploy" / "base" / "deployment.yaml"
ADMISSION = REPO / "deploy" / "base" / "admission.yaml"


def log(message: str) -> None:
    print(f"[memory {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def memory_limit_mib(path: Path = DEPLOYMENT) -> int:
    """The operator container's memory limit in the shipped Deployment, in MiB (it is written in Mi)."""
    doc = yaml.safe_load(path.read_text())
    limit = doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    assert limit.endswith("Mi"), limit
    return int(limit.removesuffix("Mi"))


def _chars(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.base = [controlplane.KUBECTL, f"--kubeconfig={kubeconfig}"]

    def __call__(self, *args: str, input: str | None = None) -> str:
        proc = subprocess.run([*self.base, *args], input=input, capture_output=True, text=True, check=False,
                              timeout=600)  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])}: {proc.stderr.strip()[:500]}")
        return proc.stdout


def waiting_spec() -> dict[str, Any]:
    """maximal_spec with a valid image (its own is no valid reference: the run would fail, ImageNotAllowed)."""
    return {**maximal_spec(), "image": EXPANDING_IMAGE}


def create_runs(
    kubectl: Kubectl, count: int, ns: str = NS, metadata: dict[str, Any] | None = None
) -> tuple[int, float]:
    """count maximal runs in ns (each with `metadata`); returns the size of one spec (characters of JSON) and the
    seconds it took. Runs with metadata are posted one by one as they are: `kubectl create` would rewrite their
    last-applied-configuration to the object itself (and a List is not a resource one can post)."""
    spec = waiting_spec()
    t0 = time.monotonic()
    if metadata is None:
        for start in range(0, count, BATCH):
            items = [run_doc(f"max-{i:04d}", ns, spec) for i in range(start, min(start + BATCH, count))]
            kubectl("create", "-f", "-", "-o", "name", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                          "items": items}))  # fmt: skip
    else:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}"
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: kubectl("create", "--raw", path, "-f", "-",
                                            input=json.dumps(run_doc(f"max-{i:04d}", ns, spec, **metadata))),
                          range(count)))  # fmt: skip
    return _chars(spec), time.monotonic() - t0


def reasons(kubectl: Kubectl, ns: str = NS, tries: int = 5) -> dict[str, int]:
    """How many runs have each status.reason (a list of every run, in pages a loaded API server answers within its
    timeout: read once at the end, it is large). A loaded API server may refuse a page ("Too large resource
    version"): tried again, and at worst the figure says it could not be read instead of losing the others."""
    for attempt in range(tries):
        try:
            out = kubectl("get", "disttrainingruns", "-n", ns, "--chunk-size=50",
                          "-o", "jsonpath={range .items[*]}{.status.reason}{'\\n'}{end}")
            break
        except RuntimeError as exc:
            log(f"listing the runs failed ({exc}); again in 10 s")
            if attempt == tries - 1:
                return {"unread": 1}
            time.sleep(10)
    found: dict[str, int] = {}
    for reason in out.splitlines():
        found[reason or "none"] = found.get(reason or "none", 0) + 1
    return found


def waiting_runs(kubectl: Kubectl, ns: str = NS) -> int:
    """Runs that said they wait, from the operator's events (one per run when it starts waiting): cheap to poll,
    unlike a list of large runs."""
    return sum(len(kubectl("get", "events", "-n", ns, "--field-selector", f"reason={reason}", "-o", "name").split())
               for reason in WAITING)  # fmt: skip


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.t0 = pid, time.monotonic()
        self.series: list[tuple[float, float]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            try:
                self.series.append((round(time.monotonic() - self.t0, 1), proc_status_kb(self.pid, "VmRSS") / 1024))
            except (OSError, KeyError):
                return


def start_operator(kubeconfig: Path, workdir: Path, metrics_port: int, ns: str = NS) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    args = [sys.executable, "-m", "dtr_cli", "operator", "--namespace", ns,
            "--metrics-port", str(metrics_port), "--liveness-port", str(controlplane.free_port()),
            *EXPANDING_ARGS]  # fmt: skip
    out = open(workdir / f"operator-{ns}.log", "wb")  # noqa: SIM115 (lives as long as the process)
    return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL, cwd=REPO)


def _wait_for_all(kubectl: Kubectl, op: subprocess.Popen[bytes], sampler: Sampler, runs: int,
                  timeout: float, ns: str = NS) -> tuple[int, float | None]:  # fmt: skip
    """Runs waiting, and the seconds until all were (None: not within timeout, or the operator died)."""
    t0, waiting = time.monotonic(), 0
    while waiting < runs and time.monotonic() - t0 < timeout and op.poll() is None:
        time.sleep(5)
        waiting = waiting_runs(kubectl, ns)
        log(f"{waiting} runs waiting, RSS {sampler.series[-1][1] if sampler.series else 0:.0f} MB")
    return waiting, (round(time.monotonic() - t0, 1) if waiting >= runs else None)


def _figures(sampler: Sampler, all_waiting: float | None) -> dict[str, Any]:
    series = sampler.series
    settled = [mb for t, mb in series if all_waiting is not None and t >= all_waiting]
    return {"peak_sampled_rss_mb": round(max(mb for _, mb in series), 1) if series else None,
            "settled_rss_mb": round(sum(settled) / len(settled), 1) if settled else None,
            "rss_series_mb": series[::4]}  # fmt: skip


def measure(kubectl: Kubectl, kubeconfig: Path, workdir: Path, runs: int, settle: float, timeout: float,
            ns: str = NS) -> dict:
    op = start_operator(kubeconfig, workdir, controlplane.free_port(), ns)
    sampler = Sampler(op.pid)
    sampler.start()
    try:
        waiting, all_waiting = _wait_for_all(kubectl, op, sampler, runs, timeout, ns)
        time.sleep(settle)
        alive = op.poll() is None
        peak = round(proc_status_kb(op.pid, "VmHWM") / 1024, 1) if alive else None
        seen = reasons(kubectl, ns)
    finally:
        sampler.stopped.set()
        controlplane.stop_child(op)
    return {"operator_alive": alive, "runs_waiting": waiting, "reasons": seen, "seconds_to_all_waiting": all_waiting,
            "peak_rss_mb": peak, **_figures(sampler, all_waiting)}  # fmt: skip


def owners(kubectl: Kubectl, ns: str) -> list[dict[str, str]]:
    """Eight ConfigMaps in ns to own each run (largest_metadata): owners that exist, so the runs stay."""
    refs = []
    for i in range(MAX_OWNER_REFERENCES):
        made = json.loads(kubectl("create", "configmap", f"owner-{i}", "-n", ns, "-o", "json"))
        refs.append({"apiVersion": "v1", "kind": "ConfigMap", "name": made["metadata"]["name"],
                     "uid": made["metadata"]["uid"]})
    return refs


def case(kubectl: Kubectl, kubeconfig: Path, workdir: Path, args: argparse.Namespace, ns: str,
         largest: bool) -> dict[str, Any]:
    """--runs maximal runs in a namespace of their own (with the largest metadata when `largest`), measured."""
    kubectl("create", "namespace", ns)
    metadata = largest_metadata(owners(kubectl, ns)) if largest else None
    spec_chars, create_seconds = create_runs(kubectl, args.runs, ns, metadata)
    log(f"{args.runs} runs of {spec_chars} characters created in {create_seconds:.0f}s in {ns}")
    body_chars = _chars(json.loads(kubectl("get", "disttrainingrun", "max-0000", "-n", ns, "-o", "json")))
    figures = measure(kubectl, kubeconfig, workdir, args.runs, args.settle, args.timeout, ns)
    return {"spec_chars": spec_chars, "stored_body_chars": body_chars, "create_seconds": round(create_seconds, 1),
            **figures}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--settle", type=float, default=30.0, help="seconds sampled after every run waits")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds to wait for every run to wait")
    p.add_argument("--metadata", action="store_true",
                   help="the admission policy applied; ordinary runs, then runs of the largest metadata it admits")
    p.add_argument("--out", type=Path, default=HERE)
    args = p.parse_args(argv)
    cases = {NS: False, f"{NS}-metadata": True} if args.metadata else {NS: False}
    with tempfile.TemporaryDirectory(prefix="dtr-bench-memory-") as tmp:
        workdir = Path(tmp)
        cp = controlplane.ControlPlane(workdir / "cluster", log=lambda m: log(f"control plane: {m}"))
        cp.start()
        try:
            kubectl = Kubectl(cp.kubeconfig)
            if args.metadata:
                kubectl("apply", "-f", str(ADMISSION))
                time.sleep(5)  # the policy takes effect a moment after it is created
            figures = {ns: case(kubectl, cp.kubeconfig, workdir, args, ns, largest) for ns, largest in cases.items()}
        finally:
            cp.stop()
    results = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "command": f"python -m bench.operator.memory --runs {args.runs}" + (" --metadata" if args.metadata else ""),
        "cpus": os.cpu_count(),
        "runs": args.runs,
        "memory_limit_mib": memory_limit_mib(),
    }
    if args.metadata:
        ordinary, largest = figures[NS], figures[f"{NS}-metadata"]
        peaks = (ordinary["peak_rss_mb"], largest["peak_rss_mb"])
        results.update(ordinary=ordinary, largest_metadata=largest,
                       peak_ratio=round(peaks[1] / peaks[0], 3) if all(peaks) else None)
        out = args.out / "memory-metadata.json"
    else:
        results.update(figures[NS])
        out = args.out / "memory.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    log(json.dumps({k: v for k, v in results.items() if k != "rss_series_mb"})[:2000])
    return 0 if all(f["operator_alive"] for f in figures.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
