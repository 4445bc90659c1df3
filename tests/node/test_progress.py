"""status.progress on a real node: the operator reads the chief's log through pods/log with its own
ServiceAccount (deploy/ RBAC), and every epoch shows up in the run's status, in order, while it trains."""

from __future__ import annotations

import re
import statistics
import time
from datetime import datetime

from cluster_fixtures import wait_for
from e2e_support import digits_run
from node_support import RealNode

EPOCHS = 5
# About 9 s per epoch on 2 cores: longer than the operator's 5 s read interval, so no epoch can be
# skipped between two reads, and the test can ask for every one of them.
STEPS = 1000
# kubectl logs --timestamps: RFC 3339 with nanoseconds; Python reads at most microseconds.
EPOCH_END = re.compile(r"^(\S+T\d\d:\d\d:\d\d)(\.\d{1,6})?\d*Z dtr_trainer\[worker-0\]: epoch (\d+)/\d+ end ")


def log_times(log: str) -> dict[int, float]:
    """Epoch -> when the chief logged its end (the container runtime's timestamp, epoch seconds)."""
    times = {}
    for line in log.splitlines():
        if match := EPOCH_END.match(line):
            stamp = datetime.fromisoformat(f"{match[1]}{match[2] or ''}+00:00")
            times[int(match[3])] = stamp.timestamp()
    return times


def test_progress_passes_through_every_epoch_while_training_and_the_column_shows_it(
    real_node: RealNode, namespace: str
) -> None:
    name = "progress"
    real_node.apply(namespace, digits_run(name, epochs=EPOCHS, steps=STEPS))
    first_seen: dict[int, tuple[float, dict]] = {}
    order: list[int] = []
    rows: list[str] = []

    def probe() -> dict | None:
        st = real_node.run_status(namespace, name)
        progress = st.get("progress")
        if st.get("phase") == "Running" and progress:
            epoch = progress["epoch"]
            if not order or order[-1] != epoch:
                order.append(epoch)
            if epoch not in first_seen:
                first_seen[epoch] = (time.time(), progress)
                if epoch == 2:
                    rows.append(real_node.cluster.kubectl("get", "distrainingruns", name, "-n", namespace,
                                                          "-o", "wide").stdout)  # fmt: skip
        return st if st.get("phase") in ("Succeeded", "Failed") else None

    st = wait_for(probe, f"run {namespace}/{name} to finish", timeout=900, interval=0.5)
    assert st["phase"] == "Succeeded", st
    assert order == list(range(1, EPOCHS + 1)) or order == list(range(1, EPOCHS)), (
        f"status.progress went through epochs {order} while Running"
    )
    assert sorted(first_seen)[: EPOCHS - 1] == list(range(1, EPOCHS)), first_seen.keys()
    for epoch, (_, progress) in first_seen.items():
        assert progress["epochsDone"] == f"{epoch}/{EPOCHS}"
        assert progress["progressPercentage"] == epoch * 100 // EPOCHS
        assert {m["name"] for m in progress["metrics"]} == {"accuracy", "loss"}, progress
        assert progress["examplesPerSecond"] > 0 and progress["estimatedRemainingSeconds"] >= 0, progress
    # -o wide while Running: NAME PHASE WORKERS PROGRESS (no ACCURACY, MODEL yet) AGE ETA(S) MESSAGE
    assert rows and re.search(rf"^{name}\s+Running\s+2/2\s+2/{EPOCHS}\s+\S+\s+\d+\s", rows[0], re.MULTILINE), rows

    final = st["progress"]
    assert (final["epoch"], final["epochsDone"], final["progressPercentage"]) == (EPOCHS, f"{EPOCHS}/{EPOCHS}", 100)
    assert final["estimatedRemainingSeconds"] == 0
    table = real_node.cluster.kubectl("get", "distrainingruns", name, "-n", namespace).stdout
    assert re.search(rf"^{name}\s+Succeeded\s+2/2\s+{EPOCHS}/{EPOCHS}\s+0\.\d+\s", table, re.MULTILINE), table

    logged = log_times(real_node.logs(namespace, f"{name}-worker-0", timestamps=True))
    delays = sorted(first_seen[e][0] - logged[e] for e in first_seen if e in logged)
    assert delays, (first_seen.keys(), logged)
    p95 = delays[min(len(delays) - 1, round(0.95 * (len(delays) - 1)))]
    print(f"progress latency, epoch end logged -> seen in status (polled every 0.5 s): n={len(delays)} "
          f"p50={statistics.median(delays):.1f} s p95={p95:.1f} s max={delays[-1]:.1f} s")
