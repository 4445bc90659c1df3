"""The operator's Prometheus /metrics, scraped from a real `dtr operator` process (as the Deployment
runs it) against the real local control plane. Names: docs/performance.md."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster.controlplane import free_port
from support.cluster import Cluster
from support.operator import OperatorProcess, scrape
from support.runs import run_doc
from support.wait import wait_for


@pytest.fixture
def operator_process(control_plane: Cluster, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    op = OperatorProcess(namespace, tmp_path / "operator.log", control_plane.kubeconfig, metrics_port=free_port())
    op.start()
    try:
        yield op
    finally:
        op.stop()
        assert "Traceback" not in op.text(), op.tail(80)


def test_metrics_move_with_runs_reconciles_and_api_errors(
    control_plane: Cluster, namespace: str, operator_process: OperatorProcess
) -> None:
    op = operator_process
    before = wait_for(lambda: scrape(op.metrics_port), "the operator's /metrics endpoint")
    # The phase gauge is there from the start, at zero, so a dashboard shows 0 rather than no data.
    for phase in ("Pending", "Running", "Succeeded", "Failed"):
        assert before[f'dtr_runs{{phase="{phase}"}}'] == 0.0, before

    # A quota of zero PVCs: the API refuses the operator's PVC create with 403 Forbidden. Admission
    # enforces the quota's status; no quota controller runs here, so the test writes it as one would.
    control_plane.kubectl("create", "quota", "no-pvcs", "-n", namespace, "--hard=persistentvolumeclaims=0")
    control_plane.kubectl(
        "patch", "quota", "no-pvcs", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", '{"status": {"hard": {"persistentvolumeclaims": "0"}, "used": {"persistentvolumeclaims": "0"}}}',
    )  # fmt: skip
    control_plane.create(run_doc("blocked", namespace))
    # The reconcile's duration is observed when its handler returns, after the 403 it counted: wait for both.
    after = wait_for(
        lambda: ((m := op.metrics()).get('dtr_api_errors_total{status="403"}', 0) >= 1
                 and m.get('dtr_reconcile_seconds_count{handler="run"}', 0) >= 1 and m),
        "dtr_api_errors_total{status=\"403\"} and a timed reconcile after a PVC create over quota",
    )
    assert after['dtr_runs{phase="Pending"}'] == 1.0, after
    assert after['dtr_reconcile_seconds_count{handler="run"}'] >= 1, after
    assert after["dtr_api_requests_total"] > before.get("dtr_api_requests_total", 0), after
    # A NotFound on the get-before-create is an answer, not an error.
    assert 'dtr_api_errors_total{status="404"}' not in after, after

    # Without the quota a second run expands; its TFJob's events go through the tfjob handler.
    control_plane.kubectl("delete", "quota", "no-pvcs", "-n", namespace)
    control_plane.create(run_doc("fine", namespace))
    wait_for(
        lambda: control_plane.kubectl("get", "tfjob", "fine", "-n", namespace, check=False).returncode == 0,
        "TFJob fine",
    )
    # The tfjob handler may finish before the run handler that created the TFJob returns (a loaded machine):
    # wait for both durations.
    runs_before = after['dtr_reconcile_seconds_count{handler="run"}']
    final = wait_for(
        lambda: ((m := op.metrics()).get('dtr_reconcile_seconds_count{handler="tfjob"}', 0) >= 1
                 and m['dtr_reconcile_seconds_count{handler="run"}'] > runs_before and m),
        "a reconcile of the tfjob handler and a second of the run handler",
    )
    assert final['dtr_runs{phase="Pending"}'] == 2.0, final
    assert final['dtr_reconcile_seconds_sum{handler="run"}'] > 0

    # Deleting a run takes it out of the gauge.
    control_plane.kubectl("delete", "dtr", "fine", "-n", namespace)
    wait_for(lambda: op.metrics().get('dtr_runs{phase="Pending"}') == 1.0, "dtr_runs{phase=Pending} back to 1")


def test_per_run_figures_come_from_the_runs_status_and_go_with_the_run(
    control_plane: Cluster, namespace: str, operator_process: OperatorProcess
) -> None:
    op = operator_process
    wait_for(lambda: scrape(op.metrics_port), "the operator's /metrics endpoint")
    control_plane.create(run_doc("done", namespace))
    # A finished status, as the operator would have written it: the operator never writes a finished run again.
    status = {"phase": "Succeeded", "startTime": "2099-01-01T00:00:00Z", "completionTime": "2099-01-01T00:01:40Z",
              "workerRestarts": 1, "metrics": {"accuracy": 0.93, "examplesPerSecond": 512.5},
              "progress": {"epoch": 3, "epochs": 3, "epochsDone": "3/3", "progressPercentage": 100}}  # fmt: skip
    control_plane.kubectl("patch", "dtr", "done", "-n", namespace, "--subresource=status", "--type=merge",
                          "-p", json.dumps({"status": status}))  # fmt: skip
    labels = f'{{namespace="{namespace}",run="done"}}'
    seen = wait_for(lambda: (m := op.metrics()).get(f"dtr_run_accuracy{labels}") == 0.93 and m, "dtr_run_accuracy")
    assert seen[f"dtr_run_examples_per_second{labels}"] == 512.5, seen
    assert seen[f"dtr_run_worker_restarts{labels}"] == 1, seen
    assert seen[f"dtr_run_progress_percent{labels}"] == 100, seen
    # Times from the run's creation (the API server's clock) to the status's times, in the future here.
    assert seen[f"dtr_run_duration_seconds{labels}"] - seen[f"dtr_run_time_to_running_seconds{labels}"] == 100, seen

    control_plane.kubectl("delete", "dtr", "done", "-n", namespace)
    wait_for(lambda: not any(k.startswith("dtr_run_") for k in op.metrics()), "every dtr_run_* series gone")
