"""How long each user journey of the docs takes, measured as the user runs it: `dtr run`, own model (locally and on
the cluster), a failure's cause, the dev cluster's start, `kubectl apply` to a model, `dtr model get` and scoring,
`deploy/install.sh`.

    python -m bench.journeys.run [--local-only]     (from the repository root; `make bench-journeys`)

The local journeys need the two environments (`make setup`); the cluster journeys root, the images and the node
build (`make images node-build`): they start a real node of their own, as `make dev-cluster` does. Writes
bench/journeys/results.json, which docs/gen.py renders into the README's journey table (one home for each
figure). Warm: the environments, images and builds already exist; the cold costs of those are CI's
(docs/cluster.md#what-ci-costs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devcluster import s3
from devcluster.controlplane import KUBECTL
from devcluster.node import built_image_ids
from tests.support.node import TRAINER_PYTHON, RealNode, dtr, restricted_namespace, score_model, start_real_node
from tests.support.registry import local_registry
from tests.support.repo import REPO
from tests.support.wait import wait_for

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"
DTR = REPO / "dtr"
WINE = REPO / "examples" / "own-model" / "wine"
# load_data fails at once: what a user sees of their own code's error, without waiting for training.
BROKEN_MODEL = '''"""wine_model.py with a wrong file name: the run fails in load_data."""
import numpy as np


def load_data(ctx):
    with np.load(f"{ctx.data_dir}/wines.npz") as f:
        return (f["x_train"], f["y_train"]), (f["x_test"], f["y_test"])


def build_model(ctx):
    raise AssertionError("never reached")
'''


@dataclass
class Step:
    journey: str
    what: str
    seconds: float
    outcome: str
    transcript: str = ""  # what the user saw meanwhile, where the docs show it


def timed(what: str, argv: list[str], *, env: dict[str, str] | None = None, cwd: Path = REPO,
          expect: int = 0, timeout: float = 900) -> tuple[float, subprocess.CompletedProcess[str]]:  # fmt: skip
    """argv as a user types it: its wall time; exit code other than expect stops the benchmark with its output."""
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})},
                          timeout=timeout, check=False)  # fmt: skip
    seconds = time.monotonic() - t0
    print(f"{what}: exit {proc.returncode} in {seconds:.1f} s", flush=True)
    if proc.returncode != expect:
        sys.exit(f"{what}: exit {proc.returncode}, expected {expect}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return seconds, proc


def local_outcome(run_dir: Path, run: str) -> str:
    """The run's final phase and message, from the status file `dtr run` keeps (docs/local.md)."""
    status = json.loads((run_dir / "runs" / run / "status.json").read_text())
    return f"{status.get('phase')}: {status.get('message')}"


def local_journeys(tmp: Path) -> Iterator[Step]:
    run_dir = tmp / "local"
    argv = [str(DTR), "run", "examples/digits.yaml", "--dir", str(run_dir)]
    seconds, _ = timed("dtr run examples/digits.yaml", argv)
    yield Step("local", "`make run` (`dtr run examples/digits.yaml`): 2 workers, 8 epochs, exported", seconds,
               local_outcome(run_dir, "digits-cnn"))  # fmt: skip
    data = run_dir / "volumes" / "wine-model-data" / "data"
    seconds_data, _ = timed("make_data.py", [TRAINER_PYTHON, str(WINE / "make_data.py"), str(data)])
    seconds, _ = timed("dtr run wine_model.py", [str(DTR), "run", str(WINE / "wine_model.py"), "--epochs", "30",
                          "--dataset", "wine.npz", "--batch-size-per-worker", "16", "--learning-rate", "0.01",
                          "--dir", str(run_dir)])  # fmt: skip
    what = f"`dtr run wine_model.py` (after make_data.py, {seconds_data:.0f} s): 2 workers, 30 epochs"
    yield Step("own-model", what, seconds, local_outcome(run_dir, "wine-model"))
    broken = tmp / "broken_model.py"
    broken.write_text(BROKEN_MODEL)
    seconds, _ = timed("dtr run broken_model.py", [str(DTR), "run", str(broken), "--dir", str(run_dir)], expect=1)
    yield Step("why-failed", "`dtr run broken_model.py` to `Failed` with the line that failed", seconds,
               local_outcome(run_dir, "broken-model"))  # fmt: skip
    yield bucket_journey(tmp, run_dir)


def bucket_journey(tmp: Path, run_dir: Path) -> Step:
    """examples/s3-no-volume.yaml with `dtr run --host-network` against the S3 server of `make s3-build`, started
    here as docs/cluster.md#an-s3-server says; the digits put in its bucket as TFRecord shards first."""
    server = s3.S3Server(tmp / "s3", bucket="journey")
    state = server.start()
    try:
        env = {"AWS_ACCESS_KEY_ID": state.access_key, "AWS_SECRET_ACCESS_KEY": state.secret_key,
               "S3_ENDPOINT": state.endpoint, "TF_CPP_MIN_LOG_LEVEL": "2"}  # fmt: skip
        seconds_data, _ = timed("records digits", [TRAINER_PYTHON, "-m", "dtr_trainer.records", "digits",
                                                   "s3://journey/digits", "--shards", "4"], env=env)  # fmt: skip
        text = (REPO / "examples" / "s3-no-volume.yaml").read_text()
        run_file = tmp / "s3-no-volume.yaml"
        run_file.write_text(text.replace("http://s3.example.com:8333", state.endpoint)
                            .replace("s3://datasets/", "s3://journey/").replace("s3://runs/", "s3://journey/")
                            .replace("s3://models/", "s3://journey/"))  # fmt: skip
        seconds, _ = timed("dtr run --host-network s3-no-volume.yaml",
                           [str(DTR), "run", "--host-network", str(run_file), "--dir", str(run_dir)], env=env)
    finally:
        server.stop()
    what = (f"`dtr run --host-network examples/s3-no-volume.yaml` (after the shards went up, {seconds_data:.0f} s): "
            "2 workers, 8 epochs, data, backups and model in a bucket")
    return Step("bucket", what, seconds, local_outcome(run_dir, "s3-no-volume"))


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    t0 = time.monotonic()
    yield lambda: time.monotonic() - t0


def cluster_journeys(tmp: Path) -> Iterator[Step]:
    with stopwatch() as elapsed, start_real_node(tmp / "node") as node:
        yield Step("dev-cluster", "`make dev-cluster`'s start: control plane, node, training-operator, operator",
                   elapsed(), "ready")  # fmt: skip
        with restricted_namespace(node, "journeys") as ns:
            yield from _apply_to_model(node, ns, tmp)
            yield _failed_on_cluster(node, ns, tmp)
            yield _own_model_on_cluster(node, ns, tmp)
        # As a user's first install: both images imported into the node's containerd again (~2 GB through ctr,
        # what `k3d image import` does), the training-operator found and left alone.
        (node.node.layout.root / "imported-images").unlink(missing_ok=True)
        with stopwatch() as elapsed:
            proc = node.node.install(check=False)
            if proc.returncode:
                sys.exit(f"deploy/install.sh: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
            yield Step("install", "`deploy/install.sh` on a cluster with the training-operator: both images "
                       "imported, CRD, RBAC, operator (steps 2-6 of k3d.md)", elapsed(), "ok")  # fmt: skip
    yield registry_journey(tmp)


def registry_journey(tmp: Path) -> Step:
    """`make push REGISTRY=...` of both images to a registry on loopback (a lab's registry stands in)."""
    store = tmp / "registry"
    store.mkdir()
    with local_registry(store, "distml") as registry:
        # DTR_PUSH_STANDIN: the images here may be built on a stand-in base; this registry is the benchmark's own.
        env = {"DTR_OVERLAY": str(tmp / "overlay"), "DTR_PUSH_STANDIN": "1"}
        seconds, _ = timed("make push", ["make", "-s", "push", f"REGISTRY={registry}"], env=env)
    return Step("registry", "`make push REGISTRY=...`: both images to a registry (one on loopback here), the "
                "overlay pinned to their digests", seconds, "ok")  # fmt: skip


def _apply_to_model(node: RealNode, ns: str, tmp: Path) -> Iterator[Step]:
    # What a user watching sees: `kubectl get distrainingruns -w`, kept as the docs' transcript.
    watch = subprocess.Popen([KUBECTL, f"--kubeconfig={node.cluster.kubeconfig}", "get", "distrainingruns", "-n", ns,
                              "-w"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    with stopwatch() as elapsed:
        node.cluster.kubectl("apply", "-n", ns, "-f", str(REPO / "examples" / "digits.yaml"))
        status = node.wait_terminal(ns, "digits-cnn", timeout=900)
        seconds = elapsed()
    time.sleep(1)  # the watch's last line
    watch.terminate()
    transcript = watch.communicate(timeout=10)[0]
    yield Step("cluster", "`kubectl apply -f examples/digits.yaml` to `Succeeded` with the model exported",
               seconds, f"{status.get('phase')}: {status.get('message')}", transcript)  # fmt: skip
    with stopwatch() as elapsed:
        proc = dtr(node, ns, "model", "get", "digits-cnn", str(tmp / "model"))
        if proc.returncode:
            sys.exit(f"dtr model get: exit {proc.returncode}\n{proc.stderr[-2000:]}")
        accuracy = score_model(tmp / "model")
        yield Step("serve", "`dtr model get digits-cnn ./model`, then loaded and scored with TensorFlow",
                   elapsed(), f"accuracy {accuracy:.4f}")  # fmt: skip


def _failed_on_cluster(node: RealNode, ns: str, tmp: Path) -> Step:
    broken = tmp / "broken_model.py"
    broken.write_text(BROKEN_MODEL)
    with stopwatch() as elapsed:
        proc = dtr(node, ns, "submit", str(broken))
        if proc.returncode:
            sys.exit(f"dtr submit: exit {proc.returncode}\n{proc.stderr[-2000:]}")
        status = wait_for(lambda: (st := node.run_status(ns, "broken-model")).get("phase") == "Failed" and st,
                          "broken-model Failed", timeout=600, interval=1)  # fmt: skip
        return Step("why-failed-cluster", "`dtr submit broken_model.py` to `Failed` with the line that failed",
                    elapsed(), f"{status.get('reason')}: {status.get('message')}")  # fmt: skip


def _own_model_on_cluster(node: RealNode, ns: str, tmp: Path) -> Step:
    """The cluster lines of docs/own-model.md's first block, as written there: data in (the claim made), the file
    sent and watched to its end, the model out (make_data.py and `dtr run` before them are the own-model row)."""
    data = tmp / "own-cluster"
    timed("make_data.py", [TRAINER_PYTHON, str(WINE / "make_data.py"), str(data)])
    model = data / "my_model.py"
    model.write_text((WINE / "wine_model.py").read_text())
    steps = (("data", "put", "--create", "1Gi", "my-data", str(data / "wine.npz")),
             ("submit", str(model), "--claim", "my-data", "--dataset", "wine.npz", "--epochs", "30",
              "--batch-size-per-worker", "16", "--learning-rate", "0.01", "--wait"),
             ("model", "get", "my-model", str(tmp / "my-model")))  # fmt: skip
    with stopwatch() as elapsed:
        for argv in steps:
            proc = dtr(node, ns, *argv, timeout=900)
            if proc.returncode:
                sys.exit(f"dtr {' '.join(argv[:2])}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n"
                         f"{proc.stderr[-2000:]}")
        seconds = elapsed()
    status = node.run_status(ns, "my-model")
    return Step("own-model-cluster", "`dtr data put --create`, `dtr submit my_model.py --wait`, `dtr model get` "
                "(own-model.md's first block): wine, 2 workers, 30 epochs", seconds,
                f"{status.get('phase')}: {status.get('message')}")  # fmt: skip


def measure(local_only: bool) -> dict[str, Any]:
    load_before = os.getloadavg()
    images = built_image_ids().split()
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="dtr-journeys-") as tmp:
        steps = list(local_journeys(Path(tmp)))
        if not local_only:
            steps += list(cluster_journeys(Path(tmp)))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO,
                            check=False).stdout.strip()  # fmt: skip
    return {
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.time() - started),
        "images": dict(zip(("operator", "trainer"), images, strict=False)),  # the image IDs the cluster journeys ran
        "steps": [vars(s) | {"seconds": round(s.seconds, 1)} for s in steps],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local-only", action="store_true", help="skip the journeys that need the real node")
    args = parser.parse_args(argv)
    if not args.local_only and os.geteuid() != 0:
        print("the cluster journeys start a real node and need root: run as root or with --local-only",
              file=sys.stderr)  # fmt: skip
        return 2
    result = measure(args.local_only)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
