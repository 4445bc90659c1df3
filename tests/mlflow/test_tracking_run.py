"""A real 2-worker trainer run with MLFLOW_TRACKING_URI set, against a real MLflow server (its SQLite store, a
local process: support.mlflow_server), read back through MLflow's REST API: one MLflow run (the chief's), its
params the lineage's, its per-epoch figures the run's own history file, the exported version registered. Then a
dead and a silent server: the run succeeds all the same, with one warning line.

The trainer's Python (TensorFlow) runs it: `make test-mlflow` (DTR_MLFLOW_REQUIRED=1).
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import pytest
from dtr_contract import env
from dtr_contract.history import read_history

from devcluster.controlplane import free_ports
from support.mlflow_server import api, as_dict, last_by_step, metric_history, model_versions, runs
from support.trainer import Volume, kill_all, restart_to_the_end, start_workers, wait_for_line, worker_log_file

EPOCHS, STEPS = 3, 4
MODEL = "digits-tracked"
ARGS = ["--model", "cnn", "--dataset", "digits", "--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS),
        "--batch-size-per-worker", "16", "--learning-rate", "0.003", "--seed", "11"]
# What the operator's builder puts in each worker's env (builders.trainer_env) besides the tracking URI.
IDENTITY = {env.RUN_NAME: "run1", env.RUN_NAMESPACE: "team-a", env.RUN_UID: "uid-1",
            env.RUN_SPEC: json.dumps({"storage": {"claimName": None}})}


def run_workers(volume: Volume, count: int, uri: str) -> tuple[list, list[int], float]:
    started = time.monotonic()
    workers = start_workers(volume, free_ports(count), ARGS + volume.args(model_name=MODEL),
                            env_extra={**IDENTITY, env.MLFLOW_TRACKING_URI: uri})
    try:
        codes = [w.wait() for w in workers]
    finally:
        kill_all(workers)
    return workers, codes, time.monotonic() - started


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, mlflow_server):
    volume = Volume(tmp_path_factory.mktemp("tracked") / "mnt-dtr")
    workers, codes, _ = run_workers(volume, 2, mlflow_server.uri)
    assert codes == [0, 0], "\n".join(w.log()[-3000:] for w in workers)
    found = runs(mlflow_server.uri, MODEL)
    return volume, workers, found


def test_exactly_one_mlflow_run_the_chiefs(tracked, mlflow_server):
    _, workers, found = tracked
    assert len(found) == 1, found
    info, data = found[0]["info"], found[0]["data"]
    assert info["status"] == "FINISHED"
    tags = as_dict(data["tags"])
    assert (tags["dtr.run"], tags["dtr.namespace"], tags["dtr.uid"], tags["dtr.modelVersion"]) == \
        ("run1", "team-a", "uid-1", "1")  # fmt: skip
    assert tags["mlflow.runName"] == "run1-v1"
    chief, other = workers
    assert "tracked in MLflow at" in chief.log() and "MLflow" not in other.log()
    page = f"{mlflow_server.uri}/#/experiments/{info['experiment_id']}/runs/{info['run_id']}"
    assert f"({page})" in chief.log()  # the run's page in the web UI, in the chief's log


def test_params_are_the_lineages_training(tracked):
    volume, _, found = tracked
    params = as_dict(found[0]["data"]["params"])
    lineage = json.loads((volume.root / "models" / MODEL / "1" / "lineage.json").read_text())
    expected = {}
    for key, value in lineage["training"].items():
        for name, leaf in (value.items() if isinstance(value, dict) else [(None, value)]):
            if leaf is not None:
                expected[f"{key}.{name}" if name else key] = str(leaf)
    assert params == expected
    assert (params["learningRate"], params["batchSizePerWorker"], params["globalBatchSize"], params["epochs"],
            params["stepsPerEpoch"], params["workers"], params["model"], params["dataset"]) == \
        ("0.003", "16", "32", str(EPOCHS), str(STEPS), "2", "cnn", "digits")  # fmt: skip


def test_each_epochs_figures_are_the_history_files(tracked, mlflow_server):
    volume, workers, found = tracked
    run_id = found[0]["info"]["run_id"]
    history = read_history((volume.root / "logs" / "run1" / "history.jsonl").read_text())
    assert [e.epoch for e in history] == list(range(1, EPOCHS + 1))
    names = sorted(history[0].metrics)
    assert "loss" in names and "accuracy" in names
    for name in names:
        assert metric_history(mlflow_server.uri, run_id, name) == [(e.epoch, e.metrics[name]) for e in history]
    assert metric_history(mlflow_server.uri, run_id, "epoch.seconds") == [(e.epoch, e.seconds) for e in history]
    assert metric_history(mlflow_server.uri, run_id, "epoch.examplesPerSecond") == \
        [(e.epoch, e.examples_per_second) for e in history]  # fmt: skip
    # the final evaluation, as the summary has it (rounded there to 6 places)
    summary = json.loads(workers[0].stdout_lines()[-1])
    final = {k[len("final."):]: v for k, v in as_dict_metrics(found[0]).items() if k.startswith("final.")}
    assert final.keys() == summary["metrics"].keys()
    assert all(round(final[k], 6) == summary["metrics"][k] for k in final)


def as_dict_metrics(run: dict) -> dict[str, float]:
    return {m["key"]: float(m["value"]) for m in run["data"]["metrics"]}


def test_the_exported_version_is_registered(tracked, mlflow_server):
    volume, _, found = tracked
    versions = model_versions(mlflow_server.uri, MODEL)
    assert len(versions) == 1, versions
    version = versions[0]
    assert version["source"] == f"pvc://run1-data/models/{MODEL}/1"  # KServe's form; the claim the operator made
    assert version["run_id"] == found[0]["info"]["run_id"]
    path = volume.root / "models" / MODEL / "1"
    assert (path / "saved_model.pb").exists()
    assert as_dict(found[0]["data"]["tags"])["dtr.modelPath"] == str(path)
    registered = api(mlflow_server.uri, "registered-models/get", name=MODEL)["registered_model"]
    assert registered["name"] == MODEL


def test_a_dead_server_fails_nothing(tmp_path):
    """Nothing listens at the URI: the run succeeds and exports, the chief says once that tracking was skipped."""
    volume = Volume(tmp_path / "mnt-dtr")
    dead = free_ports(1)[0]
    workers, codes, _ = run_workers(volume, 1, f"http://127.0.0.1:{dead}")
    assert codes == [0], workers[0].log()[-3000:]
    warnings = [ln for ln in workers[0].log().splitlines() if "MLflow tracking at" in ln]
    assert len(warnings) == 1 and "skipped" in warnings[0] and "training goes on" in warnings[0], warnings
    assert (volume.root / "models" / MODEL / "1" / "saved_model.pb").exists()
    assert "skipped" in worker_log_file(volume, 0)


def test_a_silent_server_stalls_nothing(tmp_path):
    """A server that takes the connection and never answers: each call waits at most tracking.TIMEOUT, training
    never waits on it, and the run succeeds with one warning."""
    volume = Volume(tmp_path / "mnt-dtr")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        held: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            listener.settimeout(0.5)
            while not stop.is_set():
                try:
                    held.append(listener.accept()[0])  # never read, never answered
                except OSError:
                    continue

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            workers, codes, took = run_workers(volume, 1, f"http://127.0.0.1:{listener.getsockname()[1]}")
        finally:
            stop.set()
            thread.join()
            for conn in held:
                conn.close()
    log = workers[0].log()
    assert codes == [0], log[-3000:]
    warnings = [ln for ln in log.splitlines() if "MLflow tracking at" in ln]
    assert len(warnings) == 1 and "timed out" in warnings[0], warnings
    assert (volume.root / "models" / MODEL / "1" / "saved_model.pb").exists()
    print(f"a run beside a silent tracking server: {took:.1f} s")


def test_a_run_restarted_after_a_lost_worker_is_one_mlflow_run(tmp_path, mlflow_server):
    """Worker 1 killed after epoch 2: the chief fails (a lost peer) and marks the MLflow run FAILED; both restarted
    (restartPolicy OnFailure), the chief resumes from the backup into the same MLflow run, which ends FINISHED with
    each epoch's last figures the history's and the one version registered once."""
    volume, model, epochs = Volume(tmp_path / "mnt-dtr"), "digits-restarted", 4
    ports = free_ports(2)
    args = [*ARGS[:ARGS.index("--epochs")], "--epochs", str(epochs), *ARGS[ARGS.index("--epochs") + 2:],
            *volume.args(model_name=model)]
    extra = {**IDENTITY, env.RUN_UID: "uid-restarted", env.MLFLOW_TRACKING_URI: mlflow_server.uri}
    first = start_workers(volume, ports, args, attempt="a", env_extra=extra)
    try:
        wait_for_line(first[1], f"epoch 2/{epochs} end")
        first[1].proc.send_signal(signal.SIGKILL)
        assert first[0].wait(timeout=180) == 138, first[0].log()[-3000:]  # lost a peer: restart
    finally:
        kill_all(first)
    (found,) = runs(mlflow_server.uri, model)
    assert found["info"]["status"] == "FAILED"
    second = restart_to_the_end(volume, ports, args, env_extra=extra)
    assert "resumed from backup" in second[0].log()
    (again,) = runs(mlflow_server.uri, model)
    assert again["info"]["run_id"] == found["info"]["run_id"] and again["info"]["status"] == "FINISHED"
    history = read_history((volume.root / "logs" / "run1" / "history.jsonl").read_text())
    assert [e.epoch for e in history] == list(range(1, epochs + 1))
    for name in history[0].metrics:
        assert last_by_step(mlflow_server.uri, again["info"]["run_id"], name) == \
            [(e.epoch, e.metrics[name]) for e in history]  # fmt: skip
    (version,) = model_versions(mlflow_server.uri, model)
    assert version["source"] == f"pvc://run1-data/models/{model}/1"


def test_a_chief_told_to_stop_marks_its_run_killed(tmp_path, mlflow_server):
    """SIGTERM to the chief after epoch 2 (a suspend, a drain, a sweep stopping a trial): it stops as terminated, and
    its MLflow run says KILLED with the epochs it reached, not RUNNING for ever. One worker: only the chief tracks, and
    two told to stop at once are test_sigterm_save.py's (trainer tier)."""
    volume, model, epochs = Volume(tmp_path / "mnt-dtr"), "digits-stopped", 6
    args = [*ARGS[:ARGS.index("--epochs")], "--epochs", str(epochs), *ARGS[ARGS.index("--epochs") + 2:],
            *volume.args(model_name=model)]
    extra = {**IDENTITY, env.RUN_UID: "uid-stopped", env.MLFLOW_TRACKING_URI: mlflow_server.uri}
    workers = start_workers(volume, free_ports(1), args, env_extra=extra)
    try:
        wait_for_line(workers[0], f"epoch 2/{epochs} end")
        for worker in workers:
            worker.proc.send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=120) for w in workers]
    finally:
        kill_all(workers)
    assert codes == [143], "\n".join(w.log()[-2000:] for w in workers)  # errors.EXIT_TERMINATED
    (found,) = runs(mlflow_server.uri, model)
    assert found["info"]["status"] == "KILLED" and found["info"].get("end_time"), found["info"]
    reached = [step for step, _ in metric_history(mlflow_server.uri, found["info"]["run_id"], "loss")]
    assert reached[:2] == [1, 2] and max(reached) < epochs, reached
    assert model_versions(mlflow_server.uri, model) == []
