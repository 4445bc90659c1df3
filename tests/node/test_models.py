"""Models and logs on the volume, on a real node: two runs that share a claim and a model name at once,
the lineage file beside each version, and every worker's log kept after the pods are gone. The second run has one
worker: the race for the versions is between the runs, and the first's two workers keep both logs' check."""

from __future__ import annotations

import json

from dtr_operator.policy import CLAIM_LABEL, CLAIM_LABEL_VALUE

from support.node import RealNode
from support.runs import digits_run, saved_models

LINEAGE = "lineage.json"  # beside saved_model.pb in each version directory (docs/models.md)


WORKERS = {"first": 2, "second": 1}


def shared_run(name: str) -> dict:
    """Each lets the other publish under the model name: whichever claims first owns it (docs/models.md)."""
    doc = digits_run(name, epochs=3, steps=20, workers=WORKERS[name])
    doc["spec"]["storage"] = {"claimName": "shared"}
    other = {"first": "second", "second": "first"}[name]
    doc["spec"]["export"] = {"modelName": "together", "allowedPublishers": [other]}
    return doc


def test_two_runs_sharing_a_claim_and_model_name_get_distinct_complete_versions_and_keep_their_logs(
    real_node: RealNode, namespace: str
) -> None:
    real_node.apply(namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "shared", "labels": {CLAIM_LABEL: CLAIM_LABEL_VALUE}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "256Mi"}}},
    })  # fmt: skip
    for name in ("first", "second"):
        real_node.apply(namespace, shared_run(name))
    done = {name: real_node.wait_terminal(namespace, name) for name in ("first", "second")}
    for st in done.values():
        assert st["phase"] == "Succeeded", st
    versions = sorted(st["model"]["version"] for st in done.values())
    assert versions == [1, 2], done
    for st in done.values():
        assert st["model"]["storageUri"] == "pvc://shared/models/together", st["model"]

    volume = real_node.volume(namespace, "shared")
    assert saved_models(volume) == [volume / "models" / "together" / "1", volume / "models" / "together" / "2"]
    assert not [p.name for p in (volume / "models" / "together").iterdir() if p.name not in ("1", "2")], (
        "nothing but the two complete versions where a model server looks"
    )
    for name, st in done.items():
        run = real_node.cluster.kubectl_json("get", "distrainingruns", name, "-n", namespace)
        lineage = json.loads((volume / "models" / "together" / str(st["model"]["version"]) / LINEAGE).read_text())
        assert lineage["run"]["name"] == name and lineage["run"]["uid"] == run["metadata"]["uid"], lineage
        assert lineage["run"]["namespace"] == namespace, lineage
        assert lineage["spec"]["training"]["dataset"] == "digits", lineage
        assert lineage["modelVersion"] == st["model"]["version"], lineage
        assert abs(lineage["metrics"]["accuracy"] - st["metrics"]["accuracy"]) < 1e-6, (lineage, st["metrics"])
        assert lineage["tensorflowVersion"] == "2.11.0" and lineage["trainerImage"], lineage

    # The runs and with them their TFJobs and pods go; every worker's log stays on the volume.
    real_node.cluster.kubectl("delete", "distrainingruns", "first", "second", "-n", namespace, "--wait=true")
    real_node.cluster.kubectl("wait", "--for=delete", "pod", "-l", "distml.dev/run", "-n", namespace,
                              "--timeout=120s", check=False)  # fmt: skip
    assert not real_node.names("pods", namespace, "distml.dev/run"), "the pods are gone"
    for name, workers in WORKERS.items():
        for i in range(workers):
            log = (volume / "logs" / name / f"worker-{i}.log").read_text()
            assert f"dtr_trainer[worker-{i}]: epoch 3/3 end" in log, log[-2000:]
