"""Per-run Prometheus figures from a run's status (metrics.run_figures), and their series' lifetime."""

from __future__ import annotations

from dtr_operator import metrics
from dtr_operator.status.pods import worker_restarts
from prometheus_client import REGISTRY

CREATED = "2026-11-30T18:00:00Z"


def run(status):
    return {"metadata": {"name": "r", "namespace": "ns", "creationTimestamp": CREATED}, "status": status}


def test_a_running_run_has_time_to_running_progress_and_the_last_epochs_rate():
    body = run({"phase": "Running", "startTime": "2026-11-30T18:00:12Z",
                "progress": {"progressPercentage": 40, "examplesPerSecond": 900.5}})  # fmt: skip
    assert metrics.run_figures(body) == {"timeToRunningSeconds": 12.0, "progressPercentage": 40.0,
                                         "examplesPerSecond": 900.5}  # fmt: skip


def test_a_succeeded_run_has_duration_accuracy_restarts_and_its_own_rate():
    body = run({"phase": "Succeeded", "startTime": "2026-11-30T18:00:12Z", "completionTime": "2026-11-30T18:01:40Z",
                "workerRestarts": 1, "metrics": {"accuracy": 0.97, "examplesPerSecond": 800.0},
                "progress": {"progressPercentage": 100, "examplesPerSecond": 900.5}})  # fmt: skip
    assert metrics.run_figures(body) == {"timeToRunningSeconds": 12.0, "durationSeconds": 100.0,
                                         "workerRestarts": 1.0, "accuracy": 0.97, "examplesPerSecond": 800.0,
                                         "progressPercentage": 100.0}  # fmt: skip


def test_a_run_that_failed_before_it_ran_ends_when_its_failed_condition_did():
    body = run({"phase": "Failed", "conditions": [
        {"type": "Failed", "status": "True", "lastTransitionTime": "2026-11-30T18:00:03Z"}]})  # fmt: skip
    assert metrics.run_figures(body) == {"durationSeconds": 3.0}
    assert metrics.run_figures(run({"phase": "Pending", "startTime": "not a time"})) == {}


def test_restarts_are_the_tensorflow_containers_restart_counts():
    def pod(count, name="tensorflow"):
        return {"status": {"containerStatuses": [{"name": name, "restartCount": count}]}}

    assert worker_restarts([pod(1), pod(2), pod(5, "sidecar"), {}]) == 3


def sample(name):
    return REGISTRY.get_sample_value(name, {"namespace": "ns", "run": "r"})


def test_series_follow_the_run_and_go_with_it():
    figures = metrics.RunFigures()
    figures.seen("ns", "r", run({"phase": "Running", "progress": {"progressPercentage": 40}}))
    assert sample("dtr_run_progress_percent") == 40
    figures.seen("ns", "r", run({"phase": "Succeeded", "completionTime": "2026-11-30T18:00:30Z",
                                 "metrics": {"accuracy": 0.9}}))  # fmt: skip
    assert sample("dtr_run_progress_percent") is None  # no progress in that status: the series went
    assert sample("dtr_run_accuracy") == 0.9 and sample("dtr_run_duration_seconds") == 30
    figures.gone("ns", "r")
    assert sample("dtr_run_accuracy") is None and sample("dtr_run_duration_seconds") is None
