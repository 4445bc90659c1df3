"""The worker log's cap through the real CLI (dtr_trainer.worker_log, dtr_contract.disk): a run's own code that prints
20 MiB keeps the file on the volume under its cap and its reserve, every epoch-end line is still in it after the line
saying it was cut, and the process's stderr (what the pod log shows) has every line."""

from __future__ import annotations

from pathlib import Path

from dtr_contract import disk
from dtr_contract.progress import parse_epoch_end_line

from support.trainer import Volume, run_trainer

CHATTY = """
import sys

import numpy as np
import tensorflow as tf


def load_data(ctx):
    for _ in range(20):  # 20 MiB, a MiB a write
        sys.stderr.write(("chatter " * 127 + "\\n") * 1024)
    rng = np.random.RandomState(0)
    x, y = rng.normal(size=(256, 4)).astype("float32"), rng.randint(0, 2, 256)
    return (x, y), (x[:64], y[:64])


def build_model(ctx):
    inputs = tf.keras.Input(shape=ctx.input_shape, name="features")
    return tf.keras.Model(inputs, tf.keras.layers.Dense(ctx.num_classes, activation="softmax")(inputs))
"""


def test_a_run_printing_far_past_the_cap_keeps_its_log_file_under_it_with_every_epoch_end(
    volume: Volume, tmp_path: Path
) -> None:
    code = tmp_path / "chatty.py"
    code.write_text(CHATTY)
    args = ["--code", str(code), "--dataset", "none", "--epochs", "3", "--batch-size-per-worker", "32",
            *volume.args("chatty"), "--termination-message-path", ""]  # fmt: skip
    result = run_trainer(args, volume)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("chatter " * 127 + "\n") == 20 * 1024  # the pod log keeps every line

    log = volume.root / "logs" / "run1" / "worker-0.log"
    assert log.stat().st_size <= disk.WORKER_LOG_MAX_BYTES + disk.WORKER_LOG_RESERVE_BYTES
    lines = [line.split(" ", 1)[1] for line in log.read_text().splitlines()]
    (cut,) = [i for i, line in enumerate(lines) if line.startswith("===== this log file is cut at")]
    assert f"cut at {disk.WORKER_LOG_MAX_BYTES} bytes" in lines[cut]
    ends = [end.epoch for line in lines[cut + 1 :] if (end := parse_epoch_end_line(line)) is not None]
    assert ends == [1, 2, 3], lines[cut:]
    assert not [line for line in lines[cut + 1 :] if "chatter" in line]
