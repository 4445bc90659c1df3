"""The workers' logs of a run, merged and prefixed, from the API: what `dtr logs` and the client's logs() show.

Pods go with the TFJob (ttlSecondsAfterFinished, or the run deleted); the trainer also writes each
worker's log to the run's volume (docs/models.md), which outlives them.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

from dtr_contract import layout

from dtr_operator.api import CONTAINER_NAME, KIND, REPLICA_INDEX_LABEL
from dtr_operator.grammar import DNS1123_LABEL
from dtr_operator.status.state import harmless

VOLUME_LOGS = f"{layout.logs_dir('<run>')}/ on the run's volume"
KUBELET_GONE = "unable to retrieve container logs for "
MAX_LABEL_VALUE = 63


class LogsError(Exception):
    """Why there is nothing to show: one line for the user."""


# ---- pure -------------------------------------------------------------------------------------


def worker_index(pod: Mapping[str, Any]) -> int:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    try:
        return int(labels.get(REPLICA_INDEX_LABEL, ""))
    except ValueError:
        return -1


def select_workers(pods: Sequence[Mapping[str, Any]], worker: int | None) -> list[tuple[int, str]]:
    """(index, pod name) of the worker pods asked for, by index."""
    found = sorted((worker_index(p), (p.get("metadata") or {}).get("name", "")) for p in pods)
    return [(i, name) for i, name in found if i >= 0 and (worker is None or i == worker)]


def job_name(run: Mapping[str, Any], asked: str) -> str:
    """The TFJob name to select the run's pods by: the run's own metadata.name (the operator names the TFJob
    after it), never status text, which whoever may write the run's status chooses. A name that is not a
    label value would change the selector's meaning: LogsError."""
    name = str((run.get("metadata") or {}).get("name") or asked)
    if len(name) > MAX_LABEL_VALUE or re.fullmatch(DNS1123_LABEL, name) is None:
        raise LogsError(f"{KIND} name {harmless(name)[:80]!r} is not a DNS label: cannot select its pods by it")
    return name


def merged(logs: Iterable[tuple[int, str]]) -> list[str]:
    """Lines of several workers' logs (`kubectl logs --timestamps` form: "<RFC 3339 time> <line>"),
    in time order, each prefixed with its worker and made harmless to a terminal (status.harmless); a line
    without a time keeps its place after the one before it. RFC 3339 times of one clock (the node's) sort as
    text once their widths agree."""
    keyed = []
    for index, text in logs:
        last = ""
        for seq, line in enumerate(text.splitlines()):
            stamp, sep, rest = line.partition(" ")
            if sep and stamp[:1].isdigit() and stamp.endswith("Z"):
                last = stamp.rstrip("Z").ljust(30, "0")
            else:
                rest = line
            keyed.append((last, index, seq, f"[worker-{index}] {harmless(rest)}"))
    return [line for *_, line in sorted(keyed)]


# ---- the shell --------------------------------------------------------------------------------


def _pods(kube: Any, namespace: str, name: str, worker: int | None) -> list[tuple[int, str]]:
    run = kube.get_run(namespace, name)
    if run is None:
        raise LogsError(f"no {KIND} {name} in namespace {namespace}")
    workers = select_workers(kube.list_job_pods(namespace, job_name(run, name)), worker)
    if not workers:
        which = f"worker {worker}" if worker is not None else "worker pods"
        raise LogsError(
            f"{name} has no {which} now (not started yet, or removed with the TFJob); "
            f"every worker's log is also in {VOLUME_LOGS}"
        )
    return workers


def show(kube: Any, namespace: str, name: str, worker: int | None, previous: bool, tail: int | None,
         out: TextIO) -> None:  # fmt: skip
    logs = []
    for index, pod in _pods(kube, namespace, name, worker):
        text = kube.pod_log(namespace, pod, CONTAINER_NAME, tail_lines=tail, previous=previous, timestamps=True)
        if text is None:
            what = "no previous container (it has not restarted)" if previous else "no log yet (not started)"
            print(f"dtr logs: worker {index} ({pod}): {what}; every attempt's lines are in {VOLUME_LOGS}",
                  file=sys.stderr)  # fmt: skip
            continue
        if text.startswith(KUBELET_GONE):
            # The kubelet answers 200 with this line once it has removed the container (a finished pod's
            # earlier containers go soon after the pod ends).
            print(f"dtr logs: worker {index} ({pod}): the kubelet no longer has this container's log; every "
                  f"attempt's lines are in {VOLUME_LOGS}", file=sys.stderr)  # fmt: skip
            continue
        logs.append((index, text))
    for line in merged(logs):
        out.write(line + "\n")


def follow(kube: Any, namespace: str, name: str, worker: int | None, tail: int | None, out: TextIO) -> bool:
    """One thread per worker; lines are written whole, as they come. False when a worker's log could not
    be followed (said in one line on stderr: a container still starting, a pod gone)."""
    from dtr_operator.kube import ApiError

    lock = threading.Lock()
    failed: list[int] = []

    def pump(index: int, pod: str) -> None:
        try:
            for line in kube.follow_pod_log(namespace, pod, CONTAINER_NAME, tail):
                with lock:
                    out.write(f"[worker-{index}] {harmless(line)}\n")
                    out.flush()
        except ApiError as err:
            with lock:
                failed.append(index)
                print(f"dtr logs: worker {index} ({pod}): cannot follow its log: {err.message[:200]}", file=sys.stderr)

    threads = [threading.Thread(target=pump, args=w, daemon=True) for w in _pods(kube, namespace, name, worker)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)  # wakes up for Ctrl-C
    return not failed
