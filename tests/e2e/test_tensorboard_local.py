"""TensorBoard on a local run's logs, end to end: a real run (one worker, three short epochs on the bundled digits
data), then TrainingClient.tensorboard and `dtr tensorboard --local`, read over HTTP as a browser reads them."""

from __future__ import annotations

import json
import math
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from dtr_client import TrainingClient

from support.runs import digits_run

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 3


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read())


def scalars(base: str, run: str, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one scalar of one TensorBoard run, as its scalars plugin serves them (TensorBoard 2.11)."""
    query = urllib.parse.urlencode({"run": run, "tag": tag})
    return [(int(step), float(value)) for _, step, value in get(f"{base}data/plugin/scalars/scalars?{query}")]


def port_closed(url: str) -> bool:
    port = urllib.parse.urlsplit(url).port
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


def url_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The first line `dtr tensorboard` prints on stdout, within timeout seconds."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"dtr tensorboard printed nothing in {timeout} s"
    return proc.stdout.readline().strip()


def test_tensorboard_serves_a_local_runs_epoch_loss_one_point_per_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)  # no cluster involved
    client = TrainingClient("local", local_dir=tmp_path / ".dtr")
    run = digits_run("tb-local", workers=1, epochs=EPOCHS, steps=5)
    name = client.create(run)
    assert client.wait(name, timeout=600).phase == "Succeeded"
    losses = [p.metrics["loss"] for p in client.progress(name)]  # the chief's per-epoch lines
    assert len(losses) == EPOCHS

    with client.tensorboard(name) as board:
        assert board.url.startswith("http://127.0.0.1:")
        assert "train" in get(board.url + "data/runs")
        tags = get(board.url + "data/plugin/scalars/tags")
        assert "epoch_loss" in tags["train"], tags
        points = scalars(board.url, "train", "epoch_loss")
        assert [step for step, _ in points] == list(range(EPOCHS)), points  # Keras counts epochs from 0
        assert all(math.isfinite(value) for _, value in points)
        assert [value for _, value in points] == pytest.approx(losses, abs=2e-4)  # the lines round to 4 places
    assert port_closed(board.url)

    env = {**os.environ, "DTR_RUN_DIR": str(tmp_path / ".dtr")}
    env.pop("KUBECONFIG", None)
    proc = subprocess.Popen([sys.executable, "-m", "dtr_cli", "tensorboard", name, "--local"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = url_line(proc, timeout=200)
        assert line.startswith(f"TensorBoard for {name}: http://127.0.0.1:"), line
        url = line.split(": ", 1)[1]
        assert [step for step, _ in scalars(url, "train", "epoch_loss")] == list(range(EPOCHS))
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(timeout=30) == 130, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.5)
        assert port_closed(url)
    finally:
        if proc.poll() is None:
            proc.kill()
