"""--lazy-metrics (metrics all-reduced once per execution) trains and reports exactly as Keras' own loop.

Two real MWMS workers, 25 steps per epoch with 10 steps per execution, so every epoch also ends
with a shortened execution (10, 10, 5): the epoch logs and the summary must match the default
loop's to the printed digit, on both workers.
"""

from __future__ import annotations

import json
import re

import pytest

from devcluster.controlplane import free_ports
from support.trainer import Volume, kill_all, start_workers

ARGS = ["--model", "cnn", "--dataset", "synthetic", "--epochs", "2", "--steps-per-epoch", "25",
        "--steps-per-execution", "10", "--batch-size-per-worker", "32", "--seed", "3"]
# The epoch's end and its metrics; the timing figures after them (examples_per_second, remaining_seconds)
# differ from run to run.
EPOCH_END = re.compile(r"epoch \d+/\d+ end .*?(?= examples_per_second=|$)", re.MULTILINE)


def train(tmp_path_factory, mode: str) -> tuple[list[list[str]], dict]:
    volume = Volume(tmp_path_factory.mktemp(mode) / "mnt-dtr")
    workers = start_workers(volume, free_ports(2), [*ARGS, f"--{mode}", *volume.args()])
    try:
        codes = [w.wait() for w in workers]
    finally:
        kill_all(workers)
    assert codes == [0, 0], "\n".join(w.log()[-2000:] for w in workers)
    epochs = [EPOCH_END.findall(w.log()) for w in workers]
    (summary,) = workers[0].stdout_lines()
    return epochs, json.loads(summary)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    return train(tmp_path_factory, "no-lazy-metrics"), train(tmp_path_factory, "lazy-metrics")


def test_epoch_logs_match_keras_own_loop(both):
    (keras_epochs, _), (lazy_epochs, _) = both
    assert len(keras_epochs[0]) == 2 and "accuracy=" in keras_epochs[0][0] and "loss=" in keras_epochs[0][0]
    assert lazy_epochs == keras_epochs


def test_summary_matches_keras_own_loop(both):
    (_, keras_summary), (_, lazy_summary) = both
    for key in ("loss", "accuracy", "epochs"):
        assert lazy_summary[key] == keras_summary[key], key
