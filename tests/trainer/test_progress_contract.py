"""The trainer's epoch-end log lines, read by the operator's own parser (status.progress).

A real trainer process writes its log; the operator's Python (3.11, its own venv) parses every prefix
of that log that ends at an epoch's end, as the operator would when it reads the chief's log tail.
"""

from __future__ import annotations

import json
import subprocess

from test_contract import OPERATOR_PYTHON

from support.trainer import Volume, run_trainer

EPOCHS = 4
ARGS = ["--dataset", "digits", "--epochs", str(EPOCHS), "--steps-per-epoch", "8", "--batch-size-per-worker", "16"]
PARSE = """
import json, sys
from dtr_operator import status
logs = json.load(sys.stdin)
out = []
for log in logs:
    end = status.parse_epoch_end(log)
    out.append(status.progress_of(end, "2026-11-30T00:00:00Z") if end else None)
print(json.dumps(out))
"""


def test_the_operator_reads_every_epoch_the_trainer_logs(tmp_path) -> None:
    volume = Volume(tmp_path / "mnt-dtr")
    proc = run_trainer(ARGS + volume.args(), volume)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    ends = [i for i, line in enumerate(lines) if " end " in line and "epoch " in line]
    assert len(ends) == EPOCHS, proc.stderr[-3000:]
    prefixes = ["\n".join(lines[: i + 1]) + "\n" for i in ends]
    parsed = subprocess.run([OPERATOR_PYTHON, "-c", PARSE], input=json.dumps(prefixes), capture_output=True,
                            text=True, check=False, timeout=120)  # fmt: skip
    assert parsed.returncode == 0, parsed.stderr[-2000:]
    progress = json.loads(parsed.stdout)

    assert [p["epochsDone"] for p in progress] == [f"{n}/{EPOCHS}" for n in range(1, EPOCHS + 1)]
    assert [p["progressPercentage"] for p in progress] == [n * 100 // EPOCHS for n in range(1, EPOCHS + 1)]
    for p, i in zip(progress, ends):
        names = [m["name"] for m in p["metrics"]]
        assert names == ["accuracy", "loss"], p
        for metric in p["metrics"]:
            assert f"{metric['name']}={metric['value']}" in lines[i], (metric, lines[i])
        assert p["examplesPerSecond"] > 0, p
        assert p["estimatedRemainingSeconds"] >= 0, p
    assert progress[-1]["estimatedRemainingSeconds"] == 0
