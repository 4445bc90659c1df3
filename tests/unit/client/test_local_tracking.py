"""dtr run's stand-in for the operator's --mlflow-tracking-uri (start.tracking_uri; docs/tracking.md): its
environment twin, checked as the operator checks it; none for workers on a loopback of their own, said in a line. (A
local run logged to a real MLflow server: tests/mlflow/test_dtr_run_tracking.py.)"""

from __future__ import annotations

import io
import signal
import sys

import pytest
import yaml
from dtr_cli.command import run_command
from dtr_client.local import runner
from dtr_client.local.source import RunError
from dtr_client.local.start import tracking_uri

from support.runs import digits_run

URI = "http://127.0.0.1:5000"


def test_none_unless_set():
    assert tracking_uri({}, loopback_only=False) == ("", None) == tracking_uri({}, loopback_only=True)


def test_with_the_hosts_network_the_workers_get_it():
    assert tracking_uri({"DTR_MLFLOW_TRACKING_URI": URI + "/"}, loopback_only=False) == (URI, None)


def test_on_a_loopback_of_their_own_they_get_none_and_dtr_run_says_so():
    uri, note = tracking_uri({"DTR_MLFLOW_TRACKING_URI": URI}, loopback_only=True)
    assert uri == "" and note is not None
    assert "DTR_MLFLOW_TRACKING_URI: not given to the workers" in note and "--host-network" in note


def test_what_the_operator_refuses_dtr_run_refuses():
    with pytest.raises(RunError, match="DTR_MLFLOW_TRACKING_URI: must be an MLflow server's"):
        tracking_uri({"DTR_MLFLOW_TRACKING_URI": "http://user:secret@mlflow:5000"}, loopback_only=False)


def ran_to_the_workers(tmp_path, monkeypatch, loopback_only: bool) -> tuple[str, list[dict]]:
    """dtr run of a run file up to its workers' start (an env var from a Secret stops it there, exit 2): what it
    said, and each worker container's env in the TFJob it built."""
    built: list[dict] = []
    build_tfjob = runner.builders.build_tfjob

    def build(run, code_sha256=None, tracking_uri=""):
        tfjob = build_tfjob(run, code_sha256, tracking_uri)
        (container,) = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
        built.append({e["name"]: e.get("value") for e in container["env"]})
        container["env"].append({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
        return tfjob

    monkeypatch.setattr(runner.builders, "build_tfjob", build)
    monkeypatch.setenv("DTR_MLFLOW_TRACKING_URI", URI)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(digits_run("tracked")))
    out = io.StringIO()
    code = run_command("run", lambda _: runner.run_file(str(tmp_path / "run.yaml"), base_dir=tmp_path / "state",
                                                        python=sys.executable, out=out, loopback_only=loopback_only,
                                                        on_signal=lambda _s, _h: signal.SIG_DFL), None)  # fmt: skip
    assert code == 2 and len(built) == 1
    return out.getvalue(), built


def test_dtr_run_gives_the_workers_the_uri_with_the_hosts_network(tmp_path, monkeypatch):
    said, (worker_env,) = ran_to_the_workers(tmp_path, monkeypatch, loopback_only=False)
    assert worker_env["MLFLOW_TRACKING_URI"] == URI and "DTR_MLFLOW_TRACKING_URI" not in said


def test_dtr_run_says_why_workers_on_their_own_loopback_get_none(tmp_path, monkeypatch):
    said, (worker_env,) = ran_to_the_workers(tmp_path, monkeypatch, loopback_only=True)
    assert "MLFLOW_TRACKING_URI" not in worker_env
    assert "[dtr] DTR_MLFLOW_TRACKING_URI: not given to the workers" in said
