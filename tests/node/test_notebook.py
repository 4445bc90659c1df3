"""examples/quickstart.ipynb executed headless against the real node (backend "cluster"): the same cells as the
local run of tests/e2e/test_notebook.py, in a namespace that enforces Pod Security `restricted`. The run goes
to the operator; progress comes from status.progress; the model comes out through `dtr model get`'s restricted
transfer pod (TrainingClient.fetch_model) and scores on this machine, in the trainer's Python, as the status
says (the notebook's last cell)."""

from __future__ import annotations

from pathlib import Path

from support import notebook as nbh
from support.node import RealNode


def test_the_quickstart_notebook_trains_on_the_cluster_plots_and_scores_its_model(
    real_node: RealNode, namespace: str, tmp_path: Path
) -> None:
    # KUBECONFIG is the node's (support.node sets it for the session); the kernel inherits it.
    parameters = {"backend": "cluster", "namespace": namespace, "epochs": 3, "run_name": "nb-cluster"}
    nb = nbh.execute(nbh.QUICKSTART, tmp_path / "executed", parameters, cwd=tmp_path)
    printed = "".join(out.get("text", "") for cell in nb.cells for out in cell.get("outputs") or [])
    assert "ClusterBackend" in str([out.get("data") for out in nb.cells[3].outputs]), nb.cells[3]
    # status.progress keeps the last epoch and is polled: an epoch may be passed over, the last one is not.
    epochs = [line.split()[1] for line in printed.splitlines() if line.startswith("epoch ")]
    assert epochs and epochs[-1] == "3/3", printed
    assert "Succeeded" in printed and "held-out digits" in printed, printed
    picture = nbh.check_png(nbh.plot_png(nb))
    print(f"\nthe quickstart on the real node: epochs seen {epochs}; its curves: {picture}")
    assert real_node.run_status(namespace, "nb-cluster")["phase"] == "Succeeded"
