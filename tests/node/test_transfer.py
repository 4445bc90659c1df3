"""dtr data put and dtr model get on a real node, in a namespace that enforces Pod Security `restricted`:
the transfer pod is admitted, runs as uid 1000, copies over the API server's exec WebSocket, and is gone
afterwards; a tree put into a fresh claim comes back byte for byte, and so does a model a real run exported
beside it, and that run's history for dtr plot; a bad DEST, a missing claim, a missing version and an image that
cannot start say so in one line."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from dtr_contract import layout
from dtr_contract.history import read_history
from dtr_operator.policy import CLAIM_LABEL, CLAIM_LABEL_VALUE

from support.node import RESTRICTED, RealNode, dtr
from support.runs import digits_run

TRANSFER_PODS = "app.kubernetes.io/name=dtr-transfer"
CLAIM, MODEL, RUN = "transfer", "fetched", "fetch"


def tree(root: Path) -> dict[str, bytes]:
    """A several-MB file, nested files and an empty one under root; name -> content."""
    files = {"weights.bin": os.urandom(6 * 1024 * 1024 + 3), "a/b/c.csv": b"x,y\n1,2\n", "a/empty": b"",
             "a/notes.txt": "ünïcode\n".encode()}  # fmt: skip
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return files


def contents(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def digests(files: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(content).hexdigest() for name, content in files.items()}


def one_line(proc: subprocess.CompletedProcess[str], code: int, starts: str) -> None:
    """One line of error, after the line that says which image the transfer pod took (when it was made)."""
    assert proc.returncode == code and proc.stdout == "", proc
    said = [line for line in proc.stderr.splitlines() if not line.startswith("dtr: the transfer pod's image: ")]
    assert len(said) == 1 and said[0].startswith(starts), proc.stderr


def test_a_tree_put_into_a_fresh_claim_and_a_trained_version_beside_it_come_back_byte_for_byte(
    real_node: RealNode, namespace: str, tmp_path: Path
) -> None:
    labels = real_node.cluster.kubectl_json("get", "namespace", namespace)["metadata"]["labels"]
    assert RESTRICTED.items() <= labels.items(), "the transfer pods must pass Pod Security restricted"
    real_node.apply(namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "labels": {CLAIM_LABEL: CLAIM_LABEL_VALUE}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
    })  # fmt: skip
    base = layout.in_volume(layout.export_dir(MODEL))
    assert base is not None

    # Put a tree where version 1 of the model would be.
    local = tmp_path / "1"
    files = tree(local)
    put = dtr(real_node, namespace, "data", "put", CLAIM, str(local), base)
    assert put.returncode == 0, put.stderr
    assert put.stdout == f"put 4 file(s), 6.0 MiB, into {base}/1 on claim {CLAIM} (SHA-256 checked)\n", put.stdout
    on_disk = real_node.volume(namespace, CLAIM) / base / "1"
    assert contents(on_disk) == files, "the node's disk holds exactly what was put"
    assert {(p.stat().st_uid, p.stat().st_gid) for p in on_disk.rglob("*")} == {(1000, 1000)}, "written as the trainer"

    # A real run trains on the same claim and model name: the trainer exports version 2 beside it.
    doc = digits_run(RUN, workers=1, epochs=1, steps=5)
    doc["spec"]["storage"] = {"claimName": CLAIM}
    doc["spec"]["export"] = {"modelName": MODEL}
    real_node.apply(namespace, doc)
    st = real_node.wait_terminal(namespace, RUN)
    assert st["phase"] == "Succeeded" and st["model"]["version"] == 2, st

    exported = tmp_path / "exported"
    got = dtr(real_node, namespace, "model", "get", RUN, str(exported))
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith(f"got version 2 of {RUN}'s model (")
    assert f"from {base}/2 on claim {CLAIM}" in got.stdout
    trained = contents(real_node.volume(namespace, CLAIM) / base / "2")
    assert "saved_model.pb" in trained and "lineage.json" in trained
    assert digests(contents(exported)) == digests(trained), "the trained version, byte for byte"

    first = tmp_path / "first"
    again = dtr(real_node, namespace, "model", "get", RUN, str(first), "--version", "1")
    assert again.returncode == 0, again.stderr
    assert contents(first) == files and digests(contents(first)) == digests(files)

    # The run's curve: dtr plot reads the history file the chief wrote through a read-only transfer pod (no
    # fallback to the pod log: nothing on stderr).
    history = (real_node.volume(namespace, CLAIM) / "logs" / RUN / "history.jsonl").read_text()
    assert [e.epoch for e in read_history(history)] == [1], history
    png = tmp_path / "curve.png"
    plotted = dtr(real_node, namespace, "plot", RUN, "-o", str(png))
    assert (plotted.returncode, plotted.stdout, plotted.stderr) == (0, f"{png}\n", ""), plotted
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # One line each, and no pod for input dtr can refuse by itself.
    one_line(dtr(real_node, namespace, "data", "put", CLAIM, str(local), "../outside"), 2,
             "dtr data put: DEST '../outside' leaves the volume")  # fmt: skip
    one_line(dtr(real_node, namespace, "data", "put", "no-such-claim", str(local)), 1,
             f"dtr data put: no DistTrainingRun and no PersistentVolumeClaim named no-such-claim in namespace "
             f"{namespace}")  # fmt: skip
    one_line(dtr(real_node, namespace, "model", "get", RUN, str(tmp_path / "none"), "--version", "9"), 1,
             f"dtr model get: no version 9 in {base} on claim {CLAIM} (there: 1, 2)")  # fmt: skip
    one_line(dtr(real_node, namespace, "data", "put", CLAIM, str(local), "--image", "distml/no-such-image:0"), 1,
             "dtr data put: the transfer pod dtr-put-transfer-")  # fmt: skip
    assert not (tmp_path / "none").exists()

    # Every transfer pod is gone, not just finished.
    assert not real_node.names("pods", namespace, TRANSFER_PODS)
