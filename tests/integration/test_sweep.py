"""DistTrainingSweep against a real API server, training-operator and the operator, started and read with `dtr
sweep`: the trials are runs the sweep owns, made two at a time with each trial's point; a weak one is stopped early
(its run deleted, its curve kept) by an operator restarted meanwhile; the sweep ends with the best trial. Bad input
is refused at `kubectl apply` or fails the sweep at once, naming the field. No kubelet: the tests write the pods'
states as one would, and each epoch's figures into the run's status.progress as the operator's poll of the chief's
log does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from operator_support import get, set_pod_state, wait_status, worker_pods

from support.cluster import Cluster
from support.operator import Operator
from support.wait import wait_for

METRIC = "val_accuracy"


def sweep_doc(name: str, **spec: Any) -> dict[str, Any]:
    body = {"template": {"spec": {"restartPolicy": "Never", "training": {"epochs": 3}}},
            "space": {"width": {"choice": [8, 16, 32, 64]}}, "algorithm": "grid", "trials": 4, "parallelTrials": 2,
            "objective": {"metric": METRIC},
            "earlyStopping": {"median": {"warmupEpochs": 1, "minTrials": 2}}}  # fmt: skip
    return {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingSweep", "metadata": {"name": name},
            "spec": {**body, **spec}}  # fmt: skip


def dtr(cluster: Cluster, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "dtr_cli", *argv], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def sweep_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return (get(cluster, namespace, "dts", name) or {}).get("status") or {}


def record(cluster: Cluster, namespace: str, sweep: str, run: str) -> dict[str, Any]:
    return next((t for t in sweep_status(cluster, namespace, sweep).get("trials") or [] if t["run"] == run), {})


def epoch(cluster: Cluster, namespace: str, sweep: str, run: str, n: int, value: float) -> None:
    """Epoch n finished with the objective at value; waits until the sweep has it in its status."""
    progress = {"epoch": n, "epochs": 3, "metrics": [{"name": METRIC, "value": str(value)}]}
    cluster.kubectl("patch", "dtr", run, "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"progress": progress}}))  # fmt: skip
    wait_for(lambda: [n, value] in (record(cluster, namespace, sweep, run).get("curve") or []) or None,
             f"sweep {sweep} has epoch {n} of {run}", timeout=30)  # fmt: skip


def running(cluster: Cluster, namespace: str, run: str) -> list[dict[str, Any]]:
    pods = worker_pods(cluster, namespace, run, 2)
    for pod in pods:
        set_pod_state(cluster, namespace, pod, "Running")
    wait_status(cluster, namespace, run, "running", phase="Running")
    return pods


def succeed(cluster: Cluster, namespace: str, run: str, pods: list[dict[str, Any]], accuracy: float) -> None:
    summary = {"loss": 0.1, "accuracy": accuracy, "epochs": 2, "examplesPerSecond": 100.0,
               "modelPath": f"/mnt/dtr/models/{run}/1", "modelVersion": 1}  # fmt: skip
    set_pod_state(cluster, namespace, pods[1], "Succeeded")
    set_pod_state(cluster, namespace, pods[0], "Succeeded", message=json.dumps(summary))
    wait_status(cluster, namespace, run, "succeeded", phase="Succeeded")


def sweep_events(cluster: Cluster, namespace: str, name: str) -> list[tuple[str, str]]:
    selector = f"involvedObject.kind=DistTrainingSweep,involvedObject.name={name}"
    got = cluster.kubectl_json("get", "events", "-n", namespace, "--field-selector", selector)["items"]
    return [(e["reason"], e.get("message", "")) for e in got]


def test_a_sweep_runs_two_trials_at_a_time_stops_the_weak_one_and_ends_with_the_best(
    control_plane: Cluster, namespace: str, operator: Operator, tmp_path: Path
):
    (tmp_path / "sweep.yaml").write_text(json.dumps(sweep_doc("wide")))
    started = dtr(control_plane, "sweep", "start", str(tmp_path / "sweep.yaml"), "-n", namespace)
    assert started.returncode == 0 and f"DistTrainingSweep wide created in {namespace}" in started.stdout, started
    wait_for(lambda: get(control_plane, namespace, "dtr", "wide-1"), "trials 0 and 1", timeout=30)
    assert get(control_plane, namespace, "dtr", "wide-2") is None, "two at a time"
    first = [get(control_plane, namespace, "dtr", f"wide-{i}") for i in (0, 1)]
    assert [r["spec"]["training"]["params"] for r in first] == [{"width": 8}, {"width": 16}], "grid order"
    assert all(r["metadata"]["ownerReferences"][0]["kind"] == "DistTrainingSweep" for r in first)

    for index, (curve, final) in enumerate((((0.5, 0.8), 0.8), ((0.6, 0.9), 0.9))):
        run = f"wide-{index}"
        pods = running(control_plane, namespace, run)
        for n, value in enumerate(curve, start=1):
            epoch(control_plane, namespace, "wide", run, n, value)
        succeed(control_plane, namespace, run, pods, final)

    wait_for(lambda: get(control_plane, namespace, "dtr", "wide-3"), "trials 2 and 3, once 0 and 1 ended", timeout=30)
    weak, strong = running(control_plane, namespace, "wide-2"), running(control_plane, namespace, "wide-3")
    assert weak and strong
    epoch(control_plane, namespace, "wide", "wide-2", 1, 0.3)  # epoch 1 is the warm-up: not judged
    assert get(control_plane, namespace, "dtr", "wide-2") is not None
    operator.stop()  # epoch 2 finishes while no operator runs: the restarted one finds it and stops the trial
    progress = {"epoch": 2, "epochs": 3, "metrics": [{"name": METRIC, "value": "0.4"}]}
    control_plane.kubectl("patch", "dtr", "wide-2", "-n", namespace, "--subresource=status", "--type=merge",
                          "-p", json.dumps({"status": {"progress": progress}}))  # fmt: skip
    operator.start()
    wait_for(lambda: get(control_plane, namespace, "dtr", "wide-2") is None or None, "weak trial stopped", timeout=60)
    stopped = record(control_plane, namespace, "wide", "wide-2")
    assert stopped["phase"] == "Stopped" and stopped["curve"] == [[1, 0.3], [2, 0.4]], stopped
    assert stopped["reason"] == ("its best val_accuracy by epoch 2, 0.4, is worse than the median of 2 finished "
                                 "trials at epoch 2, 0.85")  # fmt: skip

    epoch(control_plane, namespace, "wide", "wide-3", 1, 0.7)
    succeed(control_plane, namespace, "wide-3", strong, 0.95)
    st = wait_for(lambda: (s := sweep_status(control_plane, namespace, "wide")).get("phase") == "Succeeded" and s,
                  "the sweep succeeded", timeout=30)  # fmt: skip
    assert st["best"] == {"run": "wide-3", "trial": 3, "value": 0.95, "point": {"width": 64},
                          "model": "/mnt/dtr/models/wide-3/1"}, st["best"]  # fmt: skip
    assert st["counts"] == {"created": 4, "running": 0, "succeeded": 3, "failed": 0, "stopped": 1}
    assert st["message"] == "best val_accuracy 0.95: trial wide-3" and st["trialsDone"] == "4/4"
    said = sweep_events(control_plane, namespace, "wide")
    assert ("SweepSucceeded", st["message"]) in said and any(r == "TrialStopped" for r, _ in said), said
    shown = dtr(control_plane, "sweep", "status", "wide", "-n", namespace)
    lines = shown.stdout.splitlines()
    assert shown.returncode == 0 and lines[0] == "Succeeded 4/4: best val_accuracy 0.95: trial wide-3", shown
    assert lines[-1].split()[:7] == ["*", "wide-3", "Succeeded", "1", "0.7", "0.95", "width=64"], lines
    assert lines[-2].split()[:6] == ["wide-2", "Stopped", "2", "0.4", "-", "width=32"], lines
    compared = dtr(control_plane, "sweep", "compare", "wide", "-n", namespace)
    assert compared.returncode == 0 and "training.params.width" in compared.stdout, compared
    assert "wide-3" in compared.stdout and "wide-2" not in compared.stdout, "the stopped trial's run is gone"
    table = control_plane.kubectl("get", "dts", "-n", namespace).stdout.split("\n")
    assert table[0].split() == ["NAME", "PHASE", "TRIALS", "RUNNING", "BEST", "BEST-RUN", "AGE"], table
    assert table[1].split()[:6] == ["wide", "Succeeded", "4/4", "0", "0.95", "wide-3"], table


def test_a_space_or_template_the_api_server_refuses_is_refused_at_apply_naming_the_field(
    control_plane: Cluster, namespace: str
):
    bad = {
        "spec.space.lr": {"space": {"lr": {"normal": {"min": 0, "max": 1}}}},
        "spec.template.spec.workers": {"template": {"spec": {"workers": 0}}},
        "spec.space[lr].logUniform": {"space": {"lr": {"logUniform": {"min": 0, "max": 1}}}},
        "spec.objective.metric": {"objective": {"goal": "maximize"}},
        "spec.earlyStopping median or halving, not both": {"earlyStopping": {"median": {}, "halving": {}}},
        "spec.earlyStopping.halving.reductionFactor": {"earlyStopping": {"halving": {"reductionFactor": 1}}},
    }
    for field, spec in bad.items():
        doc = {**sweep_doc("bad"), "metadata": {"name": "bad", "namespace": namespace}}
        doc["spec"] = {**doc["spec"], **spec}
        proc = control_plane.kubectl("create", "-f", "-", input=json.dumps(doc), check=False)
        assert proc.returncode != 0 and field in proc.stderr, (field, proc.stderr)


def test_a_sweep_the_operator_cannot_run_or_whose_trial_is_refused_fails_at_once_saying_why(
    control_plane: Cluster, namespace: str, operator: Operator
):
    control_plane.create({**sweep_doc("gridless", space={"dropout": {"uniform": {"min": 0, "max": 0.5}}}),
                          "metadata": {"name": "gridless", "namespace": namespace}})  # fmt: skip
    st = wait_for(lambda: (s := sweep_status(control_plane, namespace, "gridless")).get("phase") and s,
                  "the sweep failed", timeout=30)  # fmt: skip
    assert (st["phase"], st["reason"]) == ("Failed", "InvalidSweep"), st
    assert st["message"] == "spec.space.dropout: a uniform range has no grid points; use choice or int"

    twelve = {f"p{i}": i for i in range(12)}  # the params' bound: a thirteenth from the space is one too many
    template = {"spec": {"training": {"params": twelve}}}
    control_plane.create({**sweep_doc("crowded", template=template), "metadata": {"name": "crowded",
                                                                                 "namespace": namespace}})  # fmt: skip
    st = wait_for(lambda: (s := sweep_status(control_plane, namespace, "crowded")).get("phase") == "Failed" and s,
                  "the sweep failed", timeout=30)  # fmt: skip
    assert st["message"].startswith("1 trials failed, more than spec.maxFailedTrials (0); crowded-0: the API "
                                     "server refused its run: "), st["message"]  # fmt: skip
    assert "spec.training.params" in st["message"], st["message"]
    assert get(control_plane, namespace, "dtr", "crowded-1") is None, "no trial left running"
    watched = dtr(control_plane, "sweep", "watch", "crowded", "-n", namespace)
    assert watched.returncode == 1 and watched.stderr.startswith("dtr sweep watch: sweep crowded failed: 1 trials "
                                                                 "failed"), watched  # fmt: skip
