"""A real MLflow tracking server (the `mlflow` package's, its SQLite store) as a local process, for the tests/mlflow
tier; and reading it back through its REST API with the standard library, in either Python.

The server runs from its own environment, .venv/mlflow (`make setup-mlflow`, tests/mlflow/requirements.txt),
never the trainer's or the operator's. Without it the tier is skipped with a loud reason; under
DTR_MLFLOW_REQUIRED=1 (`make test-mlflow`, CI) it fails instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devcluster.controlplane import free_ports
from support.repo import REPO

MLFLOW = REPO / ".venv" / "mlflow" / "bin" / "mlflow"
START_TIMEOUT = 90.0  # seconds: the server's first start creates its SQLite schema (alembic), slow on a busy machine


def require() -> Path:
    """The server's command: skip, saying why and how to get it, when it is missing; fail instead under
    DTR_MLFLOW_REQUIRED=1, as `make test-mlflow` and CI set it."""
    if MLFLOW.exists():
        return MLFLOW
    why = (f"NO MLFLOW SERVER: {MLFLOW} is missing, so the MLflow tracking tests did not run; "
           "`make setup-mlflow` makes it (tests/mlflow/requirements.txt)")
    if os.environ.get("DTR_MLFLOW_REQUIRED"):
        pytest.fail(why, pytrace=False)
    print(f"\n{'!' * 8} {why}", flush=True)
    pytest.skip(f"{why} (under DTR_MLFLOW_REQUIRED=1, as `make test-mlflow` and CI set it, this fails)")


@dataclass
class Server:
    uri: str
    proc: subprocess.Popen
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: gunicorn and its worker
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start(root: Path, host: str = "127.0.0.1") -> Server:
    """The server on host (the real node's pods reach the host at its bridge address, bench/sweep/acceptance.py)."""
    mlflow = require()
    port = free_ports(1)[0]
    log = root / "mlflow-server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(mlflow), "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
             "--default-artifact-root", str(root / "artifacts"), "--host", host, "--port", str(port),
             "--workers", "1"],
            cwd=root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PYTHON"))},
        )  # fmt: skip
    server = Server(f"http://{host}:{port}", proc, log)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the MLflow server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{server.uri}/health", timeout=2) as answer:
                if answer.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.5)
    server.stop()
    raise AssertionError(f"the MLflow server did not answer in {START_TIMEOUT:.0f} s:\n{log.read_text()[-3000:]}")


def server_fixture(scope: str = "session") -> Any:
    """The `mlflow_server` fixture (tests/mlflow/conftest.py): one server for the tier's tests, stopped after them;
    each test names its own experiment."""

    @pytest.fixture(scope=scope)  # type: ignore[call-overload]
    def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
        server = start(tmp_path_factory.mktemp("mlflow"))
        try:
            yield server
        finally:
            server.stop()

    return mlflow_server


def api(uri: str, path: str, body: dict | None = None, **query: str) -> dict[str, Any]:
    """One REST call (GET with query, POST with body), its JSON answer; an HTTP error raises with MLflow's text."""
    url = f"{uri}/api/2.0/mlflow/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as err:
        raise AssertionError(f"{path}: HTTP {err.code} {err.read()[:500]!r}") from None


def runs(uri: str, experiment: str) -> list[dict[str, Any]]:
    found = api(uri, "experiments/get-by-name", experiment_name=experiment)["experiment"]["experiment_id"]
    return api(uri, "runs/search", {"experiment_ids": [found], "max_results": 100}).get("runs", [])


def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    answer = api(uri, "metrics/get-history", run_id=run_id, metric_key=key, max_results="1000")
    return sorted((int(m["step"]), float(m["value"])) for m in answer.get("metrics", []))


def last_by_step(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    """Each step's last value (by its timestamp): a resumed run logs the epochs it trains again once more."""
    answer = api(uri, "metrics/get-history", run_id=run_id, metric_key=key, max_results="1000")
    last: dict[int, tuple[int, float]] = {}
    for m in answer.get("metrics", []):
        step, when = int(m["step"]), int(m["timestamp"])
        if step not in last or when >= last[step][0]:
            last[step] = (when, float(m["value"]))
    return [(step, last[step][1]) for step in sorted(last)]


def model_versions(uri: str, name: str) -> list[dict[str, Any]]:
    return api(uri, "model-versions/search", filter=f"name='{name}'").get("model_versions", [])


def as_dict(pairs: list[dict[str, str]]) -> dict[str, str]:
    return {p["key"]: p["value"] for p in pairs}
