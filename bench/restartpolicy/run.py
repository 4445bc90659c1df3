"""restartPolicy OnFailure vs ExitCode on the real node (issue 14, finding 10): which should be the default?

Three cases, each under both policies, backoffLimit 3 (examples/mnist.yaml's):

- permanent: examples/mnist.yaml offline (the node's DNS resolves cluster names only), every worker exits 5
  ("cannot download mnist"). Seconds from apply to Failed, restarts, the final message.
- killed: a digits run whose worker 1 is SIGKILLed through containerd after epoch 3 (as the node tier's
  killed-worker test does). Does it resume from its backup and succeed; seconds; restarts.
- oom: a digits run with a 160Mi memory limit (TensorFlow alone needs more: tests/reliability's OOM case),
  so every start is OOM-killed (137, "retryable"). Does the run fail at the backoff limit, or restart
  without end? Watched for --oom-seconds, then deleted. Both policies' OOM runs are watched side by side.

Restarts are counted two ways, because the policies restart differently: OnFailure keeps the pod and the
kubelet restarts its container (restartCount); ExitCode gives the pod restartPolicy Never and the
training-operator deletes and recreates it (new pod uids seen by a 1 s poll; its SuccessfulCreatePod events
are also counted, but the event recorder folds a fast loop's events, so they undercount: 5 events for 117 pods).

    python -m bench.restartpolicy.run [--oom-seconds 240] [--only permanent,killed,oom]   (from the repository root)

Needs root, the built images (make images) and the node build (make node-build): `make bench-restart-policy`.
Writes bench/restartpolicy/results.json and results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.support.node import (
    JOB_LABEL,
    RealNode,
    restricted_namespace,
    start_real_node,
    tensorflow_status,
)
from tests.support.repo import REPO
from tests.support.runs import digits_run

HERE = Path(__file__).resolve().parent

POLICIES = ("OnFailure", "ExitCode")
BACKOFF = 3
CASES = ("permanent", "killed", "oom")


@dataclass
class Watch:
    """What polling one run (its status, its pods, its TFJob's events) every second saw."""

    name: str
    started: float = field(default_factory=time.monotonic)
    phases: list[str] = field(default_factory=list)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # uid -> {name, restarts, exits}
    status: dict[str, Any] = field(default_factory=dict)
    ended_after: float | None = None
    restarts_at_end: int | None = None  # container restarts + pod recreations when the run ended

    def poll(self, node: RealNode, namespace: str) -> bool:
        """One look; True once the run is Succeeded or Failed."""
        self.status = node.run_status(namespace, self.name)
        phase = self.status.get("phase")
        if phase and (not self.phases or self.phases[-1] != phase):
            self.phases.append(phase)
        pods = node.cluster.kubectl_json("get", "pods", "-n", namespace, "-l", f"{JOB_LABEL}={self.name}")["items"]
        for pod in pods:
            seen = self.pods.setdefault(pod["metadata"]["uid"], {"name": pod["metadata"]["name"], "restarts": 0,
                                                                 "exits": {}})  # fmt: skip
            try:
                cs = tensorflow_status(pod)
            except StopIteration:
                continue
            seen["restarts"] = max(seen["restarts"], int(cs.get("restartCount") or 0))
            for key in ("state", "lastState"):
                term = (cs.get(key) or {}).get("terminated")
                if term and term.get("exitCode"):  # one entry per container (its start time), not per look
                    seen["exits"][f"{term.get('startedAt')}"] = f"{term['exitCode']} {term.get('reason', '')}".strip()
        if phase in ("Succeeded", "Failed") and self.ended_after is None:
            self.ended_after = time.monotonic() - self.started
            self.restarts_at_end = self.restarts()
        return self.ended_after is not None

    def restarts(self) -> int:
        return sum(p["restarts"] for p in self.pods.values()) + max(0, len(self.pods) - 2)

    def events(self, node: RealNode, namespace: str, reason: str) -> int:
        selector = f"involvedObject.kind=TFJob,involvedObject.name={self.name},reason={reason}"
        out = node.cluster.kubectl_json("get", "events", "-n", namespace, "--field-selector", selector)
        return sum(int(e.get("count") or (e.get("series") or {}).get("count") or 1) for e in out["items"])

    def summary(self, node: RealNode, namespace: str) -> dict[str, Any]:
        exits: dict[str, int] = {}
        for pod in self.pods.values():
            for code in pod["exits"].values():
                exits[code] = exits.get(code, 0) + 1
        created = self.events(node, namespace, "SuccessfulCreatePod")
        return {
            "run": self.name,
            "phase": self.status.get("phase"),
            "reason": self.status.get("reason"),
            "message": self.status.get("message"),
            "seconds_to_end": None if self.ended_after is None else round(self.ended_after, 1),
            "watched_s": round(time.monotonic() - self.started, 1),
            "phases": self.phases,
            "status_workerRestarts": self.status.get("workerRestarts"),
            "pods_seen": len(self.pods),
            "pods_created": created,
            "pod_recreations": max(created, len(self.pods)) - 2,
            "container_restarts": sum(p["restarts"] for p in self.pods.values()),
            "exits_seen": exits,
            "restarts_at_end": self.restarts_at_end,
            "restarts_after_end": None if self.restarts_at_end is None else self.restarts() - self.restarts_at_end,
        }


def watch_until(node: RealNode, namespace: str, watches: list[Watch], limit: float) -> None:
    while True:
        done = [w.poll(node, namespace) for w in watches]
        if all(done) or all(time.monotonic() - w.started > limit for w in watches):
            return
        time.sleep(1)


def permanent(node: RealNode, namespace: str, policy: str) -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "examples" / "mnist.yaml").read_text())
    doc["metadata"]["name"] = name = f"mnist-{policy.lower()}"
    doc["spec"]["restartPolicy"] = policy
    doc["spec"]["backoffLimit"] = BACKOFF
    doc["spec"]["export"]["modelName"] = name
    w = Watch(name)
    node.apply(namespace, doc)
    watch_until(node, namespace, [w], limit=600)
    return w.summary(node, namespace)


def killed(node: RealNode, namespace: str, policy: str) -> dict[str, Any]:
    name = f"kill-{policy.lower()}"
    worker = f"{name}-worker-1"
    w = Watch(name)
    node.apply(namespace, digits_run(name, epochs=20, steps=30, restart=policy, backoff=BACKOFF))
    node.wait_log(namespace, worker, "epoch 3/20 end")  # a backup exists
    w.poll(node, namespace)
    killed_at = time.monotonic()
    node.kill_container(namespace, worker)
    watch_until(node, namespace, [w], limit=600)
    out = w.summary(node, namespace)
    log = (node.volume(namespace, f"{name}-data") / "logs" / name / "worker-1.log").read_text()
    out["resumed_from_backup"] = "resumed from backup at epoch" in log
    out["seconds_kill_to_end"] = None if w.ended_after is None else round(w.started + w.ended_after - killed_at, 1)
    return out


def oom(node: RealNode, namespace: str, seconds: float) -> list[dict[str, Any]]:
    watches = []
    for policy in POLICIES:
        doc = digits_run(f"oom-{policy.lower()}", epochs=12, steps=40, restart=policy, backoff=BACKOFF)
        doc["spec"]["resources"] = {"limits": {"memory": "160Mi"}}
        node.apply(namespace, doc)
        watches.append(Watch(doc["metadata"]["name"]))
    watch_until(node, namespace, watches, limit=seconds)
    out = []
    for policy, w in zip(POLICIES, watches, strict=True):
        s = w.summary(node, namespace)
        s["ended"] = s["phase"] in ("Succeeded", "Failed")
        s["restarts_per_minute"] = round((s["pod_recreations"] + s["container_restarts"]) / (s["watched_s"] / 60), 1)
        out.append({"policy": policy, **s})
        node.cluster.kubectl("delete", "dtr", w.name, "-n", namespace, "--wait=false", check=False)
    return out


def measure(cases: list[str], oom_seconds: float) -> dict[str, Any]:
    started = time.time()
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="dtr-bench-restart-") as tmp,
        start_real_node(Path(tmp)) as node,
        restricted_namespace(node, "bench-restart-policy") as namespace,
    ):
        for case in cases:
            if case == "oom":
                results["oom"] = oom(node, namespace, oom_seconds)
            else:
                fn = permanent if case == "permanent" else killed
                results[case] = [{"policy": p, **fn(node, namespace, p)} for p in POLICIES]
            for row in results[case]:
                print(f"{case} {row['policy']}: {json.dumps(row)}", flush=True)
    return {
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(time.time() - started),
        "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "backoff_limit": BACKOFF,
        "oom_watch_s": oom_seconds,
        "results": results,
    }


def _n(value: Any) -> str:
    return "-" if value is None else str(value)


def markdown(r: dict[str, Any]) -> str:
    res = r["results"]
    lines = [
        "# restartPolicy OnFailure vs ExitCode on the real node",
        "",
        (f"Measured {r['finished']} on {r['cpus']} CPUs (load average before {r['loadavg_before']}, after "
         f"{r['loadavg_after']}), the real node (containerd, kubelet, training-operator v1.9.4 and the operator as "
         f"pods), backoffLimit {r['backoff_limit']}; {r['seconds']} s in all, node start included. Produced by "
         f"`make bench-restart-policy` (bench/restartpolicy/run.py); every sample in results.json. Restarts: the "
         f"kubelet's container restarts (OnFailure) + pods the training-operator deleted and recreated (ExitCode)."),
        "",
        *([f"Note: {r['note']}", ""] if r.get("note") else []),
    ]  # fmt: skip
    if "permanent" in res:
        lines += ["## A permanent error: examples/mnist.yaml offline (each worker exits 5)", "",
                  ("| policy | ends | apply -> end s | container restarts | pods recreated | workerRestarts | "
                   "exits seen | message |"),
                  "|---|---|---:|---:|---:|---:|---|---|"]  # fmt: skip
        for x in res["permanent"]:
            lines.append(f"| {x['policy']} | {_n(x['phase'])} | {_n(x['seconds_to_end'])} | "
                         f"{x['container_restarts']} | "
                         f"{x['pod_recreations']} | {_n(x['status_workerRestarts'])} | {x['exits_seen']} | "
                         f"{_n(x['message'])} |")  # fmt: skip
        lines.append("")
    if "killed" in res:
        lines += ["## A worker SIGKILLed once mid-training (after epoch 3 of 20)", "",
                  ("| policy | ends | apply -> end s | kill -> end s | resumed from backup | container restarts | "
                   "pods recreated | workerRestarts | exits seen |"),
                  "|---|---|---:|---:|---|---:|---:|---:|---|"]  # fmt: skip
        for x in res["killed"]:
            lines.append(f"| {x['policy']} | {_n(x['phase'])} | {_n(x['seconds_to_end'])} | "
                         f"{_n(x['seconds_kill_to_end'])} | "
                         f"{x['resumed_from_backup']} | {x['container_restarts']} | {x['pod_recreations']} | "
                         f"{_n(x['status_workerRestarts'])} | {x['exits_seen']} |")  # fmt: skip
        lines.append("")
    if "oom" in res:
        lines += [f"## An OOM loop: 160Mi memory limit, every start OOM-killed (137); "
                  f"watched up to {r['oom_watch_s']:.0f} s", "",
                  ("| policy | ends | after s | watched s | container restarts | pods recreated | restarts/min | "
                   "restarts after the end | phases | workerRestarts | message |"),
                  "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|"]  # fmt: skip
        for x in res["oom"]:
            lines.append(f"| {x['policy']} | {x['phase'] if x['ended'] else 'never (deleted)'} | "
                         f"{_n(x['seconds_to_end'])} | {x['watched_s']} | {x['container_restarts']} | "
                         f"{x['pod_recreations']} | {x['restarts_per_minute']} | {_n(x['restarts_after_end'])} | "
                         f"{' -> '.join(x['phases'])} | {_n(x['status_workerRestarts'])} | "
                         f"{_n(x['message'])} |")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--oom-seconds", type=float, default=240)
    p.add_argument("--only", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES))
    p.add_argument("--out", type=Path, default=HERE)
    p.add_argument("--note", default="", help="a line for results.md (what was unusual about this run)")
    args = p.parse_args()
    cases = [c for c in args.only.split(",") if c]
    if unknown := set(cases) - set(CASES):
        p.error(f"unknown cases {sorted(unknown)}")
    result = measure(cases, args.oom_seconds)
    result["note"] = args.note
    (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "results.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
