"""Faults on the local control plane, with `dtr operator` as a real subprocess:

- the operator SIGKILLed at random points (seeded) while runs are created and progress, many times;
- kube-apiserver SIGKILLed and restarted mid-run;
- a TFJob deleted out-of-band; a foreign TFJob / PVC holding the run's child names;
- the PVC deleted under a running job.

For each: what the user sees (status phase/reason/message) and that nothing is lost or duplicated
(one TFJob and one PVC per run, the same objects, by uid, from start to end). The suite plays the
kubelet for worker pods (no node runs here); a worker killed for real is the real-node tier's job
(tests/node/test_real_node.py: a worker's container SIGKILLed mid-run resumes from its backup).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dtr_operator.api import RUN_LABEL
from dtr_operator.policy import CLAIM_LABEL, CLAIM_LABEL_VALUE
from faults import (
    bind_pods,
    plane_dir,
    pods_running,
    pods_succeeded,
    restart_apiserver,
)
from ledger import Ledger, Record

from support.api import Api
from support.cluster import Cluster
from support.operator import OperatorProcess
from support.wait import poll, wait_status

KILLS = int(os.environ.get("DTR_RELIABILITY_KILLS", "20"))
SEED = 6


@pytest.fixture
def api(control_plane: Cluster) -> Api:
    return Api.from_kubeconfig(str(control_plane.kubeconfig))


@pytest.fixture
def operator(control_plane: Cluster, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    op = OperatorProcess(namespace, tmp_path / "operator.log", control_plane.kubeconfig)
    op.start()
    yield op
    code = op.stop()
    text = op.text()
    assert "Traceback" not in text, op.tail(80)
    assert code in (0, None), f"the operator exited with {code}:\n{op.tail()}"


def create(api: Api, namespace: str, name: str, spec: dict[str, Any]) -> None:
    code, message = api.create_run(namespace, name, spec)
    assert code == 201, message


def children(api: Api, namespace: str, name: str) -> tuple[list[str], list[str]]:
    """uids of the TFJobs and PVCs labelled for this run."""
    selector = f"{RUN_LABEL}={name}"
    jobs = [j["metadata"]["uid"] for j in api.tfjobs(selector, namespace)]
    pvcs = [p.metadata.uid for p in api.pvcs(selector, namespace)]
    return jobs, pvcs


def wait_phase(api: Api, namespace: str, name: str, phase: str, timeout: float = 60, **more: Any) -> dict[str, Any]:
    return wait_status(lambda: api.status(namespace, name), f"run {name}", timeout, phase=phase, **more)


def sees(st: dict[str, Any]) -> str:
    return f"{st.get('phase')}/{st.get('reason')}: {st.get('message')}"


# ---- the operator SIGKILLed at random points --------------------------------------------------------------


def test_operator_sigkilled_at_random_points(  # noqa: C901 (one scenario, read top to bottom)
    api: Api, namespace: str, operator: OperatorProcess, ledger: Ledger
) -> None:
    rng = random.Random(SEED)
    runs = {f"kill-{i}": 1 + i % 2 for i in range(6)}  # name -> workers
    stage = dict.fromkeys(runs, "new")  # new -> created -> running -> done (pods finished)
    first: dict[str, tuple[list[str], list[str]]] = {}
    points: list[str] = []

    def act() -> str:
        """One step of the world while the operator lives: create a run, or move one run's pods on."""
        waiting = [n for n, s in stage.items() if s == "new"]
        moving = [n for n, s in stage.items() if s in ("created", "running") and api.tfjob(namespace, n)]
        choice = rng.choice(["create"] * bool(waiting) + ["advance"] * bool(moving) + ["idle"])
        if choice == "create":
            name = waiting[0]
            create(api, namespace, name, {"workers": runs[name], "training": {"dataset": "digits", "epochs": 2}})
            stage[name] = "created"
            return f"create {name}"
        if choice == "advance":
            name = rng.choice(moving)
            if stage[name] == "created":
                pods_running(api, namespace, name, runs[name])
                stage[name] = "running"
            else:
                pods_succeeded(api, namespace, name, runs[name])
                stage[name] = "done"
            return f"{stage[name]} {name}"
        return "idle"

    def note_children() -> None:
        for name in runs:
            jobs, pvcs = children(api, namespace, name)
            if jobs and pvcs and name not in first:
                first[name] = (jobs, pvcs)

    for _ in range(KILLS):
        what = act()
        time.sleep(rng.uniform(0.0, 2.5))  # the operator is somewhere in its work, or still starting
        operator.kill()
        points.append(what)
        note_children()
        operator.start(wait_healthy=rng.random() < 0.6)  # sometimes killed again before it is even up
    if not operator.alive() or not poll(lambda: operator.alive(), 1):
        operator.start()
    time.sleep(2)

    # Let the world finish with the operator up: create what is left, move every run to the end.
    for name, workers in runs.items():
        if stage[name] == "new":
            create(api, namespace, name, {"workers": workers, "training": {"dataset": "digits", "epochs": 2}})
            stage[name] = "created"
    for name, workers in runs.items():
        poll(lambda n=name: api.tfjob(namespace, n), 60)
        if stage[name] == "created":
            pods_running(api, namespace, name, workers)
        if stage[name] != "done":
            pods_succeeded(api, namespace, name, workers)
            stage[name] = "done"
    finals = {name: wait_phase(api, namespace, name, "Succeeded", 90) for name in runs}
    note_children()

    lost = duplicated = correct = 0
    problems = []
    for name, st in finals.items():
        jobs, pvcs = children(api, namespace, name)
        duplicated += len(jobs) > 1 or len(pvcs) > 1
        lost += first.get(name) != (jobs, pvcs)  # a child replaced (new uid) or gone
        ok = (
            st.get("metrics", {}).get("accuracy") == 0.973
            and st.get("model", {}).get("path") == f"/mnt/dtr/models/{name}/1"
            and st.get("observedGeneration") == 1
            and len(jobs) == 1
            and len(pvcs) == 1
        )
        correct += ok
        if not ok or first.get(name) != (jobs, pvcs):
            problems.append(f"{name}: {sees(st)} jobs={jobs} pvcs={pvcs} first={first.get(name)}")
    ledger.add(
        Record(
            area="fault",
            case="operator SIGKILLed at random points",
            tried=operator.kills,
            correct=operator.kills if not problems else 0,
            lost=lost,
            duplicated=duplicated,
            user_sees=f"every run Succeeded with its metrics; e.g. {sees(finals['kill-0'])}",
            detail={"runs": len(runs), "runs_correct": correct, "operator_starts": operator.starts,
                    "kill_points": points, "problems": problems},
        )
    )
    assert not problems, problems
    assert operator.kills >= KILLS


# ---- the API server restarted mid-run ---------------------------------------------------------------------


def test_apiserver_restarted_mid_run(
    control_plane: Cluster, api: Api, namespace: str, operator: OperatorProcess, ledger: Ledger
) -> None:
    root = plane_dir(control_plane.kubeconfig, control_plane.dir)
    ours = control_plane.dir is not None  # started by this session's fixture, not reused via DTR_KUBECONFIG
    downtimes = []
    # 1: right after runs are created, while the operator is making their children (a burst, so that some
    # of its calls are in flight when the connection drops).
    burst = [f"api-burst-{i}" for i in range(4)]
    create(api, namespace, "api-restart", {"workers": 2, "training": {"dataset": "digits"}})
    for name in burst:
        create(api, namespace, name, {"workers": 1, "training": {"dataset": "digits"}})
    downtimes.append(restart_apiserver(root, control_plane.kubeconfig, 0.5, ours))
    wait_phase(api, namespace, "api-restart", "Pending", 90, tfJob="api-restart")
    first = children(api, namespace, "api-restart")
    burst_started = time.monotonic()
    burst_ok = all(poll(lambda n=name: api.tfjob(namespace, n) and len(children(api, namespace, n)[1]) == 1, 120)
                   for name in burst)  # fmt: skip
    burst_seconds = time.monotonic() - burst_started
    # 2: while the workers run, and across the next retry of a run that waits for its claim (first retry
    # after 5 s, so the operator's own attempt falls into the outage).
    pods_running(api, namespace, "api-restart", 2)
    running = wait_phase(api, namespace, "api-restart", "Running", 60)
    create(api, namespace, "api-wait", {"workers": 1, "storage": {"claimName": "later"}})
    wait_phase(api, namespace, "api-wait", "Pending", 60, reason="WaitingForPVC")
    downtimes.append(restart_apiserver(root, control_plane.kubeconfig, 8.0, ours))
    # The operator's watches must come back by themselves: the next change reaches the run.
    pods_succeeded(api, namespace, "api-restart", 2)
    final = wait_phase(api, namespace, "api-restart", "Succeeded", 120)
    waiting = wait_phase(api, namespace, "api-wait", "Pending", 30, reason="WaitingForPVC")
    jobs, pvcs = children(api, namespace, "api-restart")
    alive = operator.alive()
    # A lost connection is an expected condition: a one-line log and a retry, not a stack trace.
    tracebacks = operator.text().count("Traceback")
    ok = alive and (jobs, pvcs) == first and len(jobs) == 1 and len(pvcs) == 1 and final["metrics"]["accuracy"] == 0.973
    burst_dups = sum(len(c) > 1 for name in burst for c in children(api, namespace, name))
    ledger.add(
        Record(
            area="fault",
            case="kube-apiserver SIGKILLed and restarted mid-run",
            tried=len(downtimes),
            correct=len(downtimes) if ok and not tracebacks else 0,
            lost=int((jobs, pvcs) != first and len(jobs) + len(pvcs) < 2),
            duplicated=int(len(jobs) > 1 or len(pvcs) > 1) + burst_dups,
            user_sees=(
                f"while down: kubectl fails, the run keeps {sees(running)}; after: {sees(final)}; runs created just "
                f"before the outage got their children {burst_seconds:.0f} s after it; a waiting run "
                f"keeps waiting ({waiting.get('reason')}); operator log stack traces: {tracebacks}"
            ),
            detail={"runs": 2 + len(burst),
                    "runs_correct": int(ok) + int(waiting.get("reason") == "WaitingForPVC") + len(burst) * burst_ok,
                    "burst_children_after_s": round(burst_seconds, 1),
                    "apiserver_ready_after_s": [round(d, 1) for d in downtimes], "operator_survived": alive,
                    "operator_log_tracebacks": tracebacks},
        )
    )
    assert alive, operator.tail()
    assert (jobs, pvcs) == first and len(jobs) == 1 and len(pvcs) == 1
    assert burst_ok and not burst_dups
    assert tracebacks == 0, (
        "the operator logged stack traces while the API server was down (urllib3 MaxRetryError escaped "
        "dtr_operator.kube.Kube._request, which maps only ApiException to ApiError(0, 'Unreachable')):\n"
        + operator.tail(60)
    )


# ---- children removed or taken by someone else -----------------------------------------------------------


def test_tfjob_deleted_out_of_band(api: Api, namespace: str, operator: OperatorProcess, ledger: Ledger) -> None:
    create(api, namespace, "orphan", {"workers": 1, "training": {"dataset": "digits"}})
    wait_phase(api, namespace, "orphan", "Pending", 60, tfJob="orphan")
    pods_running(api, namespace, "orphan", 1)
    wait_phase(api, namespace, "orphan", "Running", 60)
    _, pvcs_before = children(api, namespace, "orphan")
    api.delete_tfjob(namespace, "orphan")
    final = wait_phase(api, namespace, "orphan", "Failed", 60, reason="TFJobDeleted")
    # A restart must not bring the TFJob back behind the user's back, nor lose the volume.
    operator.kill()
    operator.start()
    time.sleep(5)
    jobs, pvcs = children(api, namespace, "orphan")
    after = api.status(namespace, "orphan")
    ok = (not jobs and pvcs == pvcs_before and after["phase"] == "Failed"
          and "create a new DistTrainingRun" in final["message"])
    ledger.add(
        Record(
            area="fault",
            case="TFJob deleted out-of-band (then an operator restart)",
            tried=2,
            correct=2 if ok else 0,
            lost=int(pvcs != pvcs_before),
            duplicated=int(bool(jobs)),
            user_sees=sees(final),
            detail={"runs": 1, "runs_correct": int(ok), "tfjobs_after_restart": len(jobs),
                    "pvc_kept": pvcs == pvcs_before},
        )
    )
    assert ok, (sees(after), jobs, pvcs, pvcs_before)


FOREIGN_TFJOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "TFJob",
    "metadata": {"name": "clash", "labels": {"team": "other"}},
    "spec": {
        "tfReplicaSpecs": {
            "Worker": {
                "replicas": 1,
                "restartPolicy": "Never",
                "template": {"spec": {"containers": [{"name": "tensorflow", "image": "someone/else:1"}]}},
            }
        }
    },
}


def test_foreign_children_with_the_run_names(
    api: Api, namespace: str, operator: OperatorProcess, ledger: Ledger
) -> None:
    from kubernetes import client

    foreign = {**FOREIGN_TFJOB, "metadata": {**FOREIGN_TFJOB["metadata"], "namespace": namespace}}
    api.create_tfjob(foreign)
    before = api.tfjob(namespace, "clash")
    create(api, namespace, "clash", {"workers": 1})
    job_conflict = wait_phase(api, namespace, "clash", "Failed", 60, reason="NameConflict")
    after = api.tfjob(namespace, "clash")
    job_untouched = (
        after["metadata"]["uid"] == before["metadata"]["uid"]
        and not after["metadata"].get("ownerReferences")
        and after["metadata"]["labels"] == {"team": "other"}
        and after["spec"]["tfReplicaSpecs"] == before["spec"]["tfReplicaSpecs"]
    )
    no_pvc = not api.pvcs(f"{RUN_LABEL}=clash", namespace) and api.pvc(namespace, "clash-data") is None

    pvc = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="clash2-data", labels={"team": "other"}),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"], resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"})
        ),
    )
    api.core.create_namespaced_persistent_volume_claim(namespace, pvc)
    pvc_before = api.pvc(namespace, "clash2-data")
    create(api, namespace, "clash2", {"workers": 1})
    pvc_conflict = wait_phase(api, namespace, "clash2", "Failed", 60, reason="NameConflict")
    pvc_after = api.pvc(namespace, "clash2-data")
    pvc_untouched = (
        pvc_after.metadata.uid == pvc_before.metadata.uid
        and not pvc_after.metadata.owner_references
        and pvc_after.metadata.labels == {"team": "other"}
    )
    no_tfjob = api.tfjob(namespace, "clash2") is None
    ok = job_untouched and no_pvc and pvc_untouched and no_tfjob
    ledger.add(
        Record(
            area="fault",
            case="foreign TFJob / PVC already holding the run's child names",
            tried=2,
            correct=int(job_untouched and no_pvc) + int(pvc_untouched and no_tfjob),
            user_sees=f"{sees(job_conflict)} | {sees(pvc_conflict)}",
            detail={"runs": 2, "runs_correct": int(job_untouched and no_pvc) + int(pvc_untouched and no_tfjob),
                    "foreign_objects_untouched": job_untouched and pvc_untouched},
        )
    )
    assert "TFJob named clash" in job_conflict["message"] and "PVC named clash2-data" in pvc_conflict["message"]
    assert ok, (job_untouched, no_pvc, pvc_untouched, no_tfjob)


def test_pvc_deleted_under_a_running_job(api: Api, namespace: str, operator: OperatorProcess, ledger: Ledger) -> None:
    create(api, namespace, "vol-gone", {"workers": 2, "training": {"dataset": "digits"}})
    wait_phase(api, namespace, "vol-gone", "Pending", 60, tfJob="vol-gone")
    (job_uid,), (pvc_uid,) = children(api, namespace, "vol-gone")
    bind_pods(api, namespace, "vol-gone", 2)  # scheduled, as on a real node: the PVC has users now
    pods_running(api, namespace, "vol-gone", 2)
    wait_phase(api, namespace, "vol-gone", "Running", 60)

    api.core.delete_namespaced_persistent_volume_claim("vol-gone-data", namespace)
    time.sleep(3)
    held = api.pvc(namespace, "vol-gone-data")
    terminating_while_used = held is not None and held.metadata.deletion_timestamp is not None
    during = api.status(namespace, "vol-gone")
    # A restart while the volume is Terminating must neither fail the run nor make a second PVC.
    operator.kill()
    operator.start()
    time.sleep(3)
    pods_succeeded(api, namespace, "vol-gone", 2)
    final = wait_phase(api, namespace, "vol-gone", "Succeeded", 60)
    # PVC protection counts every scheduled pod that names the claim, finished or not, and the TFJob keeps
    # its pods (cleanPodPolicy None): the volume, with the model on it, stays until the run is deleted.
    time.sleep(3)
    kept = api.pvc(namespace, "vol-gone-data")
    kept_after_success = (kept is not None and kept.metadata.uid == pvc_uid
                          and kept.metadata.deletion_timestamp is not None)
    jobs, pvcs = children(api, namespace, "vol-gone")
    api.custom.delete_namespaced_custom_object(
        "distml.dev", "v1alpha1", namespace, "disttrainingruns", "vol-gone", propagation_policy="Foreground"
    )
    gone = poll(lambda: api.pvc(namespace, "vol-gone-data") is None, 90)
    ok = (
        terminating_while_used
        and during.get("phase") == "Running"
        and kept_after_success
        and jobs == [job_uid]
        and pvcs == [pvc_uid]
        and bool(gone)
    )
    ledger.add(
        Record(
            area="fault",
            case="PVC deleted under a running job",
            tried=1,
            correct=int(ok),
            duplicated=int(len(jobs) > 1 or len(pvcs) > 1),
            lost=int(not kept_after_success),
            user_sees=(
                f"kubectl get pvc: Terminating (PVC protection) while the workers run and after; the run stays "
                f"{during.get('phase')} and ends {final['phase']} (model readable); the PVC goes when the run "
                f"(and with it the TFJob's pods) is deleted"
            ),
            detail={"runs": 1, "runs_correct": int(ok), "pvc_terminating_while_used": terminating_while_used,
                    "pvc_kept_after_success": kept_after_success, "pvc_gone_after_run_deleted": bool(gone)},
        )
    )
    assert ok, (terminating_while_used, during.get("phase"), kept_after_success, jobs, job_uid, pvcs, pvc_uid, gone)


def test_run_deleted_while_the_operator_is_down(
    api: Api, namespace: str, operator: OperatorProcess, ledger: Ledger
) -> None:
    create(api, namespace, "gone-run", {"workers": 1, "training": {"dataset": "digits"}})
    wait_phase(api, namespace, "gone-run", "Pending", 60, tfJob="gone-run")
    (_,), (pvc_uid,) = children(api, namespace, "gone-run")
    operator.kill()
    api.custom.delete_namespaced_custom_object("distml.dev", "v1alpha1", namespace, "disttrainingruns", "gone-run")
    gc = poll(lambda: api.tfjob(namespace, "gone-run") is None, 60)  # the garbage collector, not the operator
    operator.start()
    time.sleep(5)
    jobs, pvcs = children(api, namespace, "gone-run")
    ok = bool(gc) and not jobs and pvcs == [pvc_uid] and api.run(namespace, "gone-run") is None
    ledger.add(
        Record(
            area="fault",
            case="run deleted while the operator is down",
            tried=1,
            correct=int(ok),
            lost=int(pvcs != [pvc_uid]),
            duplicated=int(bool(jobs) or len(pvcs) > 1),
            user_sees="the TFJob goes with the run (garbage collector); the Retain PVC stays; nothing is recreated "
            "when the operator comes back",
            detail={"runs": 1, "runs_correct": int(ok), "tfjob_collected": bool(gc), "pvc_kept": pvcs == [pvc_uid]},
        )
    )
    assert ok, (gc, jobs, pvcs, pvc_uid)


def test_waiting_run_proceeds_once_its_claim_appears(
    api: Api, namespace: str, operator: OperatorProcess, ledger: Ledger
) -> None:
    from kubernetes import client

    create(api, namespace, "late-claim", {"workers": 1, "storage": {"claimName": "late"}})
    waiting = wait_phase(api, namespace, "late-claim", "Pending", 60, reason="WaitingForPVC")
    operator.kill()  # the wait survives a restart too
    operator.start()
    pvc = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="late", labels={CLAIM_LABEL: CLAIM_LABEL_VALUE}),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"], resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"})
        ),
    )
    api.core.create_namespaced_persistent_volume_claim(namespace, pvc)
    # The next attempt comes within the backoff (5 s, 10 s, ...): well inside a minute.
    got = poll(lambda: api.tfjob(namespace, "late-claim") and (s := api.status(namespace, "late-claim")).get("reason")
               not in (None, "WaitingForPVC") and s, 60)  # fmt: skip
    started = got or api.status(namespace, "late-claim")
    jobs, pvcs = children(api, namespace, "late-claim")
    ok = len(jobs) == 1 and not pvcs and started.get("pvc") == "late"
    ledger.add(
        Record(
            area="fault",
            case="claimName missing, then created (with an operator restart while waiting)",
            tried=1,
            correct=int(ok),
            duplicated=int(len(jobs) > 1 or bool(pvcs)),
            user_sees=f"{sees(waiting)} -> {sees(started)}",
            detail={"runs": 1, "runs_correct": int(ok)},
        )
    )
    assert ok, (jobs, pvcs, started)
