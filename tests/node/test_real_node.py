"""Full runs on a real node: containers from the built images, the operator as its Deployment.

What the process node could not show: the images, the restricted pod settings under Pod Security
`restricted`, volume permissions for uid 1000 on local-path, cluster DNS between workers, a
container killed by the runtime, the operator's ServiceAccount and RBAC from deploy/. The operator's own pod
deleted: test_operator_pod.py; deploy/namespaced/ in its place: test_namespaced_deploy.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.node import JOB_LABEL, RealNode, tensorflow_status
from support.runs import saved_models, slow_epochs_run
from support.wait import wait_for

TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
DTR = Path(sys.executable).parent / "dtr"
# Runs of support/slow_epochs_model.py, whose epochs sleep: what these tests prove is a run's life on the node (a
# killed container, a deleted run), not training; the digits CNN's 20 epochs of 30 steps cost about 80 CPU s of the
# node's pods for the four runs here (a cold CI run of f6c6aba). The kill must land mid-training: a finished run
# deletes its backup, and a worker restarted then trains from the start.
EPOCHS, EPOCH_SECONDS = 12, 3


def test_worker_container_killed_resumes_from_backup_and_succeeds_and_pods_hold_no_token(
    real_node: RealNode, namespace: str
) -> None:
    name = "heal"
    worker = f"{name}-worker-1"
    real_node.apply_slow_epochs(namespace, slow_epochs_run(name, EPOCHS, EPOCH_SECONDS, backoff=8))
    real_node.wait_log(namespace, worker, f"epoch 1/{EPOCHS} end")

    # While it runs: no credential in the container, and nothing writable but the volume and /tmp.
    assert real_node.exec(namespace, worker, "test", "-e", TOKEN).returncode == 1, "a token is mounted"
    refused = real_node.exec(namespace, worker, "python", "-c", "open('/home/dtr/x', 'w')")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr, refused.stderr
    for ok in ("/tmp/x", "/mnt/dtr/x"):
        wrote = real_node.exec(namespace, worker, "python", "-c", f"open({ok!r}, 'w').write('ok')")
        assert wrote.returncode == 0, (ok, wrote.stderr)
    real_node.exec(namespace, worker, "rm", "-f", "/mnt/dtr/x")

    real_node.wait_log(namespace, worker, f"epoch 3/{EPOCHS} end")  # a backup exists
    real_node.kill_container(namespace, worker)
    real_node.wait_log(namespace, worker, "resumed from backup at epoch")
    # While the pod runs (once it has finished, the kubelet removes its earlier containers and their logs):
    # the killed container's own log, and only worker 1's.
    before = dtr_logs(real_node, namespace, name, "--worker", "1", "--previous")
    assert before.returncode == 0, before.stderr
    assert f"[worker-1] dtr_trainer[worker-1]: epoch 1/{EPOCHS} begin" in before.stdout, before.stdout[-2000:]
    assert "[worker-0]" not in before.stdout and "resumed from backup" not in before.stdout
    st = real_node.wait_terminal(namespace, name)
    assert st["phase"] == "Succeeded", st
    status = tensorflow_status(real_node.pod(namespace, worker))
    assert status["restartCount"] >= 1
    assert status["lastState"]["terminated"]["exitCode"] == 137, status
    later = real_node.logs(namespace, worker)
    assert "resumed from backup at epoch" in later, (
        f"the restarted worker started over instead of resuming; before the kill:\n"
        f"{real_node.logs(namespace, worker, previous=True)[-3000:]}\nafter:\n{later[-3000:]}"
    )
    assert f"epoch 1/{EPOCHS} begin" not in later
    volume = real_node.volume(namespace, f"{name}-data")
    assert saved_models(volume) == [volume / "models" / name / "1"]
    assert st["workerRestarts"] >= 1, st

    # dtr logs after the run: both workers merged and prefixed.
    both = dtr_logs(real_node, namespace, name)
    assert both.returncode == 0, both.stderr
    assert f"[worker-0] dtr_trainer[worker-0]: epoch {EPOCHS}/{EPOCHS} end" in both.stdout, both.stdout[-2000:]
    assert "[worker-1] dtr_trainer[worker-1]: resumed from backup at epoch" in both.stdout, both.stdout[-2000:]
    # Worker 0 restarted too (its peer was lost): a finished pod's earlier container is the kubelet's to
    # remove, and then dtr logs says so and where the lines are kept, instead of printing nothing.
    gone = dtr_logs(real_node, namespace, name, "--worker", "0", "--previous")
    assert gone.returncode == 0 and gone.stdout == "", gone
    assert "worker 0 (heal-worker-0): " in gone.stderr and "/mnt/dtr/logs/" in gone.stderr, gone.stderr


def dtr_logs(real_node: RealNode, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(real_node.cluster.kubeconfig)}
    return subprocess.run([str(DTR), "logs", "-n", namespace, *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)  # fmt: skip


def test_a_killed_worker_under_never_fails_its_run_and_runs_deleted_mid_training_stop_keeping_the_pvc_with_retain(
    real_node: RealNode, namespace: str
) -> None:
    """Three runs at once, each ended mid-training: one by its worker killed under restartPolicy Never, two by
    their deletion (reclaimPolicy Retain and Delete)."""
    never, worker = "never", "never-worker-1"
    deleted = {"keep": ("Retain", 2), "drop": ("Delete", 1)}
    real_node.apply_slow_epochs(namespace, slow_epochs_run(never, EPOCHS, EPOCH_SECONDS, restart="Never"))
    for name, (reclaim, workers) in deleted.items():
        real_node.apply_slow_epochs(namespace, slow_epochs_run(name, 100, EPOCH_SECONDS, workers=workers,
                                                               reclaim=reclaim))  # fmt: skip
    real_node.wait_log(namespace, worker, f"epoch 1/{EPOCHS} end")
    real_node.kill_container(namespace, worker)
    for name in deleted:
        real_node.wait_log(namespace, f"{name}-worker-0", "epoch 1/100 end")
    keep_volume = real_node.volume(namespace, "keep-data")
    # The operator's finalizer holds the delete until it has stopped the runs: beside the node step, which replaces
    # the operator's pod (test_operator_pod.py), that may wait for the new one.
    real_node.cluster.kubectl("delete", "distrainingruns", *deleted, "-n", namespace, "--timeout=180s", timeout=200)

    st = real_node.wait_terminal(namespace, never)
    assert st["phase"] == "Failed", st
    assert f"worker {worker} exited with code 137" in st["message"], st["message"]
    # worker-0 sees the peer gone (exit 138) within a second; when the TFJob fails on it before the
    # kubelet has reported worker-1's phase, the training-operator deletes worker-1 as still running
    # (cleanPodPolicy Running). The status above is what stays; the pod is checked when it stays too.
    pods = real_node.cluster.kubectl_json("get", "pods", "-n", namespace, "--field-selector",
                                          f"metadata.name={worker}")["items"]
    for pod in pods:
        assert pod["status"]["phase"] == "Failed"
        status = tensorflow_status(pod)
        assert status["restartCount"] == 0 and status["state"]["terminated"]["exitCode"] == 137

    def all_gone() -> bool:
        return not (real_node.names("tfjobs", namespace, "distml.dev/run in (keep,drop)")
                    or real_node.names("pods", namespace, f"{JOB_LABEL} in (keep,drop)"))

    wait_for(all_gone, "the deleted runs' TFJobs and pods to go", timeout=180, interval=1)
    wait_for(lambda: not real_node.names("pvc", namespace, "distml.dev/run=drop"), "the Delete run's PVC to go",
             timeout=120)
    kept = real_node.cluster.kubectl_json("get", "pvc", "keep-data", "-n", namespace)
    assert "deletionTimestamp" not in kept["metadata"]
    assert (keep_volume / "backup" / "keep").exists(), "the retained volume keeps its data"
