"""status.progress on a real node: the operator reads the chief's log through pods/log with its own
ServiceAccount (deploy/ RBAC), and every epoch shows up in the run's status, in order, while it trains."""

from __future__ import annotations

import re
import statistics

from support.node import RealNode, dtr, percentile, watch_progress
from support.runs import SLOW_EPOCHS_MODEL

# Three epochs show the order, the column while Running and the last one. The second and third sleep EPOCH_SECONDS
# first (the model's own callback: tests/support/slow_epochs_model.py), longer than the operator's reads of the log
# are apart (every 5 s, but in CI beside the node step, which restarts the operator, 8 s epochs were not: epoch 2
# went unseen, 2be8f07), so no epoch can be skipped between two reads, and the test can ask for every one of them.
# Until 2026-12-06 the digits CNN at 1000 steps an epoch made them that long (28 s each in CI): 99 s of a warm CI
# run, 60 CPU seconds of the node's pods (7 now).
EPOCHS = 3
EPOCH_SECONDS = 30


def test_progress_passes_through_every_epoch_while_training_and_the_column_shows_it(
    real_node: RealNode, namespace: str
) -> None:
    name = "progress"
    proc = dtr(real_node, namespace, "submit", str(SLOW_EPOCHS_MODEL), "--name", name, "--workers", "2",
               "--epochs", str(EPOCHS), "--batch-size-per-worker", "16", "--learning-rate", "0.1",
               "--param", f"epoch_seconds={EPOCH_SECONDS}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows: list[str] = []

    def show_the_row(epoch: int) -> None:
        if epoch == 2:
            rows.append(real_node.cluster.kubectl("get", "distrainingruns", name, "-n", namespace, "-o", "wide").stdout)

    seen = watch_progress(real_node, namespace, name, on_new_epoch=show_the_row)
    st, first_seen, order = seen.final, seen.first_seen, seen.order
    assert st["phase"] == "Succeeded", st
    assert order == list(range(1, EPOCHS + 1)) or order == list(range(1, EPOCHS)), (
        f"status.progress went through epochs {order} while Running"
    )
    assert sorted(first_seen)[: EPOCHS - 1] == list(range(1, EPOCHS)), first_seen.keys()
    for epoch, (_, progress) in first_seen.items():
        assert progress["epochsDone"] == f"{epoch}/{EPOCHS}"
        assert progress["progressPercentage"] == epoch * 100 // EPOCHS
        # validated every epoch by default (spec.training.validateEvery 1): the eval split's figures beside training's
        assert {m["name"] for m in progress["metrics"]} == {"accuracy", "loss", "val_accuracy", "val_loss"}, progress
        assert progress["examplesPerSecond"] > 0 and progress["estimatedRemainingSeconds"] >= 0, progress
    # -o wide while Running: NAME PHASE WORKERS PROGRESS (no ACCURACY, MODEL yet) AGE ETA(S) MESSAGE
    assert rows and re.search(rf"^{name}\s+Running\s+2/2\s+2/{EPOCHS}\s+\S+\s+\d+\s", rows[0], re.MULTILINE), rows

    final = st["progress"]
    assert (final["epoch"], final["epochsDone"], final["progressPercentage"]) == (EPOCHS, f"{EPOCHS}/{EPOCHS}", 100)
    assert final["estimatedRemainingSeconds"] == 0
    table = real_node.cluster.kubectl("get", "distrainingruns", name, "-n", namespace).stdout
    assert re.search(rf"^{name}\s+Succeeded\s+2/2\s+{EPOCHS}/{EPOCHS}\s+0\.\d+\s", table, re.MULTILINE), table

    delays = seen.delays(real_node.logs(namespace, f"{name}-worker-0", timestamps=True))
    assert delays, first_seen.keys()
    print(f"progress latency, epoch end logged -> seen in status (polled every 0.5 s): n={len(delays)} "
          f"p50={statistics.median(delays):.1f} s p95={percentile(delays, 0.95):.1f} s max={delays[-1]:.1f} s "
          "(bench/progress/ measures it over more runs)")
