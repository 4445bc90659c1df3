"""A run whose loss diverges, on a real node: it ends Failed, reason Diverged, its message naming the epoch, within
minutes rather than at a deadline, with no model exported and a Warning event.

The model is tests/support/diverging_model.py (a linear regression under plain SGD) at learningRate 10, the
largest the CRD takes, sent as the run's code; it needs no data. Two runs at once (2 cores: they share them):

- `dtr submit` as a user runs it, the default restartPolicy OnFailure: the kubelet restarts a worker once, and the
  operator, having seen the error in the chief's log, has the TFJob fail then (backoffLimit 0): at most one
  restart per worker;
- the same run with restartPolicy ExitCode: exit 9 is permanent, so no worker restarts at all.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import yaml
from dtr_contract import exits

from support.node import RealNode, dtr
from support.repo import REPO
from support.runs import saved_models
from support.wait import wait_for

MODEL = REPO / "tests" / "support" / "diverging_model.py"
ARGS = ("--workers", "2", "--epochs", "3", "--batch-size-per-worker", "16", "--learning-rate", "10")
ON_FAILURE, EXIT_CODE = "diverge-onfailure", "diverge-exitcode"
MESSAGE = re.compile(r"^training diverged: the loss became (nan|inf|-inf) in epoch [1-3]/3 \(by step \d+/\d+, "
                     rf"learning rate 10\); .* \(worker diverge-\w+-worker-[01], exit code {exits.DIVERGED}\)$")


def submit(real_node: RealNode, namespace: str, name: str, restart_policy: str | None) -> None:
    """`dtr submit` itself for the default policy; else its --dry-run objects, the policy set, applied."""
    if restart_policy is None:
        proc = dtr(real_node, namespace, "submit", str(MODEL), "--name", name, *ARGS)
        assert proc.returncode == 0, proc.stderr
        return
    proc = dtr(real_node, namespace, "submit", str(MODEL), "--name", name, *ARGS, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    for doc in yaml.safe_load_all(proc.stdout):
        if doc["kind"] == "DistTrainingRun":
            doc["spec"]["restartPolicy"] = restart_policy
        real_node.apply(namespace, doc)


def warning_events(real_node: RealNode, namespace: str, name: str) -> list[dict[str, Any]]:
    """The run's Diverged events, once there is one: the operator posts it just after the status that says Failed,
    which the test reads in-process (b6da742's CI run: read 50 ms after that status, there was none yet)."""

    def posted() -> list[dict[str, Any]]:
        return real_node.cluster.kubectl_json("get", "events", "-n", namespace, "--field-selector",
                                              f"involvedObject.name={name},reason=Diverged")["items"]  # fmt: skip

    return wait_for(posted, f"{name}: its Diverged event", timeout=20, interval=1)


def test_a_run_whose_loss_diverges_fails_diverged_naming_the_epoch(real_node: RealNode, namespace: str) -> None:
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        for job in [pool.submit(submit, real_node, namespace, ON_FAILURE, None),
                    pool.submit(submit, real_node, namespace, EXIT_CODE, "ExitCode")]:  # fmt: skip
            job.result(timeout=300)
    final = {name: real_node.wait_terminal(namespace, name, timeout=600) for name in (ON_FAILURE, EXIT_CODE)}
    print(f"both runs Failed {time.monotonic() - started:.0f} s after submit; restarts "
          f"{ {name: st.get('workerRestarts', 0) for name, st in final.items()} }")

    for name, st in final.items():
        assert (st["phase"], st["reason"]) == ("Failed", "Diverged"), st
        assert MESSAGE.match(st["message"]), st["message"]
        assert "Traceback" not in st["message"]
        assert "model" not in st and not st.get("metrics"), st
        volume = real_node.volume(namespace, f"{name}-data")
        assert saved_models(volume) == [], f"{name} exported a model"
        events = warning_events(real_node, namespace, name)
        assert events and all(e["type"] == "Warning" for e in events), events
    assert not final[EXIT_CODE].get("workerRestarts"), final[EXIT_CODE]
    assert final[ON_FAILURE].get("workerRestarts", 0) <= 2, f"more than one restart per worker: {final[ON_FAILURE]}"
