"""Your own model on your own data on a real node (docs/own-model.md), as a user does it: the data put into a
claim of their own with `dtr data put`, one Python file sent with `dtr submit FILE.py --claim`, the model
fetched with `dtr model get`; in a namespace that enforces Pod Security `restricted`, the operator as its
Deployment.

Everything starts at once and the tests then look at what happened (2 cores: the runs share them, and the
image's build and import mostly wait on the disk):

- examples/own-model/wine (a tabular classifier on a .npz, one worker: nothing it proves needs a peer) and
  examples/own-model/series (a 1-D sequence regression reading a directory of CSV files, 2 workers): Succeeded,
  status.code the file's SHA-256,
  the model's own metrics and headline, the fetched model loaded on this machine and scored on data the
  cluster never saw, lineage.json naming the code's SHA-256; a series worker SIGKILLed mid-run resumes
  from its backup and every epoch ends once;
- a broken variant of the wine file for each error of docs/own-model.md ("When your code fails"): each run
  Failed, UserCodeError, its message naming the file and line, with at most one restart per worker;
- examples/own-model/Dockerfile: the wine file as a module in an image of its own, imported into the
  node, a run naming it in spec.image and spec.training.code.module: Succeeded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dtr_contract import exits
from dtr_operator.policy import CLAIM_LABEL, CLAIM_LABEL_VALUE

from support.node import TRAINER_PYTHON, RealNode, dtr, restricted_namespace
from support.repo import REPO
from support.runs import run_doc
from support.wait import wait_for

EXAMPLES = REPO / "examples" / "own-model"
WINE, SERIES = EXAMPLES / "wine" / "wine_model.py", EXAMPLES / "series" / "series_model.py"
HOST = Path(__file__).with_name("own_model_host.py")  # the data, and the scores, in the trainer's environment
CLAIM = "own-data"
WINE_RUN, SERIES_RUN, IMAGE_RUN = "wine-model", "series-model", "wine-image"  # dtr submit's names for the files
WINE_WORKERS = 1
WINE_ARGS = ("--workers", str(WINE_WORKERS), "--epochs", "10", "--dataset", "wine.npz", "--batch-size-per-worker", "16",
             "--learning-rate", "0.01")  # fmt: skip
# Series' epochs take 0.5-2 s on the node (165 steps of 16): the kill after epoch KILL_AFTER (backed up
# by then: BackupAndRestore runs before the epoch's line) lands mid-run with 7-30 s to spare, which a kill that
# reads the log once a second needs.
SERIES_EPOCHS = 16
SERIES_ARGS = ("--workers", "2", "--epochs", str(SERIES_EPOCHS), "--dataset", "series", "--batch-size-per-worker",
               "8", "--metric", "mae")  # fmt: skip
KILL_AFTER = 1
# The shipped --allowed-images (deploy/base/deployment.yaml) admits no tag but the default: the admin adds an image of
# one's own, as `allowing` does for this module (a user's would be on their registry, added exactly or by digest).
OWN_IMAGE = "localhost/distml/own-wine:1"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def line_of(text: str, needle: str) -> int:
    (number,) = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    return number


@dataclass(frozen=True)
class Broken:
    """The wine file with one mistake, and what the run's message must say."""

    edits: tuple[tuple[str, str], ...]  # (old, new) in the file's source
    marker: str | None  # the message names the line holding this (None: the file alone)
    words: str
    workers: int = 1

    def where(self, path: Path) -> str:
        """How the message starts: `wine_model.py:30` or, for no line, `wine_model.py: `."""
        return f"{path.name}:{line_of(path.read_text(), self.marker)}" if self.marker else f"{path.name}: "

    def source(self) -> str:
        text = WINE.read_text()
        for old, new in self.edits:
            assert old in text, old
            text = text.replace(old, new)
        return text


RETURN = 'return (d["x_train"], d["y_train"]), (d["x_test"], d["y_test"])'
NORMALIZED = ('inputs = tf.keras.Input(shape=ctx.input_shape, name="features")\n'
              '    x = tf.keras.layers.Normalization(mean=x_train.mean(axis=0), variance=x_train.var(axis=0))(inputs)')
BROKEN = {
    "syntax": Broken((("def load_data(ctx):", "def load_data(ctx)"),), "def load_data(ctx)",
                     "SyntaxError: invalid syntax"),
    "missing": Broken((("def build_model(ctx):", "def make_model(ctx):"),), None,
                      "defines no build_model(ctx) function"),
    "return": Broken(((RETURN, 'return d["x_train"], d["y_train"]'),), "def load_data(ctx):",
                     "returned two arrays, one (x, y) split"),
    "shape": Broken(((NORMALIZED, 'inputs = tf.keras.Input(shape=(12,), name="features")\n    x = inputs'),),
                    "def build_model(ctx):", "expected shape=(None, 12), found shape=(16, 13)"),
    "classes": Broken((("Dense(ctx.num_classes,", "Dense(2,"),), "def build_model(ctx):",
                      "2 output units but the labels are classes 0..2", workers=2),
    "raises": Broken((("    d = _arrays(ctx)\n", '    d = _arrays(ctx)\n    d["y_train"] = d["labels"]\n'),),
                     'd["labels"]', "KeyError: 'labels'"),
}  # fmt: skip


class Watch(threading.Thread):
    """Every run's status in the namespace once a second, and when each run was first seen in each phase."""

    def __init__(self, real_node: RealNode, namespace: str):
        super().__init__(daemon=True)
        self.real_node, self.namespace = real_node, namespace
        self.status: dict[str, dict[str, Any]] = {}
        self.first_seen: dict[tuple[str, str], float] = {}  # (run, phase) -> time.monotonic()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(1):
            proc = self.real_node.cluster.kubectl("get", "distrainingruns", "-n", self.namespace, "-o", "json",
                                                  check=False)  # fmt: skip
            if proc.returncode != 0:
                continue  # a slow API server under load; the next second asks again
            now = time.monotonic()
            for item in json.loads(proc.stdout)["items"]:
                name, st = item["metadata"]["name"], item.get("status") or {}
                self.status[name] = st
                if st.get("phase"):
                    self.first_seen.setdefault((name, st["phase"]), now)

    def phases(self, name: str) -> list[str]:
        """The run's phases in the order they were first seen."""
        return [phase for _, phase in sorted((t, phase) for (run, phase), t in self.first_seen.items() if run == name)]

    def terminal(self, name: str, timeout: float = 600) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            st = self.status.get(name) or {}
            return st if st.get("phase") in ("Succeeded", "Failed") else None

        return wait_for(done, f"run {name} to finish (last status: {self.status.get(name)})", timeout=timeout,
                        interval=0.5)  # fmt: skip


@dataclass
class Own:
    """What the module's fixture started, and when."""

    real_node: RealNode
    namespace: str
    local: Path  # put/ (sent with dtr data put) and kept/ (never sent)
    watch: Watch
    submitted: dict[str, float] = field(default_factory=dict)  # run -> time.monotonic() its dtr submit started
    submits: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    puts: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    broken: dict[str, Path] = field(default_factory=dict)  # case -> the broken file
    background: dict[str, Future[Any]] = field(default_factory=dict)  # the kill, the own image
    times: dict[str, float] = field(default_factory=dict)  # what took how long, printed at the end

    def seconds_to(self, name: str, phase: str) -> float:
        return self.watch.first_seen[(name, phase)] - self.submitted[name]

    def volume(self) -> Path:
        return self.real_node.volume(self.namespace, CLAIM)

    def fetch(self, run: str, dest: Path) -> Path:
        got = self.dtr("model", "get", run, str(dest))
        assert got.returncode == 0, got.stderr
        assert got.stdout.startswith(f"got version 1 of {run}'s model ("), got.stdout
        assert f"from models/{run}/1 on claim {CLAIM}" in got.stdout, got.stdout
        return dest

    def dtr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return dtr(self.real_node, self.namespace, *args)


def timed(times: dict[str, float], what: str, fn: Callable[[], Any]) -> Any:
    t0 = time.monotonic()
    try:
        return fn()
    finally:
        times[what] = time.monotonic() - t0


def host(*args: str, timeout: float = 300) -> str:
    """own_model_host.py with the trainer's Python; its stdout."""
    proc = subprocess.run([TRAINER_PYTHON, str(HOST), *args], capture_output=True, text=True, check=False,
                          timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})  # fmt: skip
    assert proc.returncode == 0, f"own_model_host.py {' '.join(args)}:\n{proc.stderr[-3000:]}"
    return proc.stdout


def make_claim(own: Own) -> None:
    own.real_node.apply(own.namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "labels": {CLAIM_LABEL: CLAIM_LABEL_VALUE}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
    })  # fmt: skip


def put_data(own: Own, pool: ThreadPoolExecutor) -> None:
    """Both examples' data into the claim at once: a file, and a directory of CSV files."""
    jobs = {what: pool.submit(own.dtr, "data", "put", CLAIM, str(own.local / "put" / what), "-q")
            for what in ("wine.npz", "series")}  # fmt: skip
    own.puts = {what: job.result() for what, job in jobs.items()}


def submit_all(own: Own, pool: ThreadPoolExecutor) -> None:
    """dtr submit of both examples and every broken file at once (the syntax error as kubectl takes it)."""
    runs: dict[str, tuple[str, ...]] = {
        WINE_RUN: (str(WINE), *WINE_ARGS),
        SERIES_RUN: (str(SERIES), *SERIES_ARGS),
    }
    for case, broken in BROKEN.items():
        path = own.local / "broken" / case / WINE.name
        path.parent.mkdir(parents=True)
        path.write_text(broken.source())
        own.broken[case] = path
        runs[f"broken-{case}"] = (str(path), "--name", f"broken-{case}", "--workers", str(broken.workers),
                                  "--epochs", "2", "--dataset", "wine.npz", "--batch-size-per-worker", "16")
    jobs = {}
    for name, args in runs.items():
        own.submitted[name] = time.monotonic()
        jobs[name] = pool.submit(own.dtr, "submit", *args, "--claim", CLAIM)
    own.submits = {name: job.result() for name, job in jobs.items()}
    # dtr submit refuses a file that does not compile; a user who writes the ConfigMap and run themselves
    # (docs/own-model.md#sending-your-code-with-a-run) gets the error from the cluster.
    own.submitted["broken-syntax"] = time.monotonic()
    path = own.broken["syntax"]
    own.real_node.cluster.kubectl("create", "configmap", "broken-syntax-code", "-n", own.namespace,
                                  f"--from-file={path.name}={path}")  # fmt: skip
    own.real_node.apply(own.namespace, run_doc("broken-syntax", spec={
        "workers": 1, "storage": {"claimName": CLAIM},
        "training": {"code": {"configMap": "broken-syntax-code", "key": path.name}, "dataset": "wine.npz",
                     "epochs": 2},
    }))  # fmt: skip


def kill_series_worker(own: Own) -> float | None:
    """SIGKILL series' worker 1 once KILL_AFTER epochs have ended (and been backed up): seconds from its submit,
    or None when the run finished first."""
    pod, line = f"{SERIES_RUN}-worker-1", f"epoch {KILL_AFTER}/{SERIES_EPOCHS} end"

    def due() -> str | None:
        if (own.watch.status.get(SERIES_RUN) or {}).get("phase") in ("Succeeded", "Failed"):
            return "finished"
        return "due" if line in own.real_node.logs(own.namespace, pod) else None

    if wait_for(due, f"{line!r} in {pod}'s log", timeout=600, interval=1) == "finished":
        return None
    own.real_node.kill_container(own.namespace, pod)
    return time.monotonic() - own.submitted[SERIES_RUN]


def run_own_image(own: Own, data_ready: threading.Event) -> dict[str, Any]:
    """examples/own-model/Dockerfile built, imported into the node as the node tier imports its images, then a
    run of it with the wine file as a module."""
    times: dict[str, float] = {}
    build = ["docker", "build", "-q", "-t", OWN_IMAGE, str(EXAMPLES)]
    timed(times, "docker build", lambda: subprocess.run(build, capture_output=True, text=True, check=True))
    tar = own.local / "own-image.tar"
    save = ["docker", "save", "-o", str(tar), OWN_IMAGE]
    timed(times, "docker save", lambda: subprocess.run(save, capture_output=True, text=True, check=True))
    timed(times, "import into the node", lambda: own.real_node.node.import_image(tar))
    tar.unlink()
    data_ready.wait()
    own.submitted[IMAGE_RUN] = time.monotonic()
    own.real_node.apply(own.namespace, run_doc(IMAGE_RUN, spec={
        "workers": 1, "image": OWN_IMAGE, "storage": {"claimName": CLAIM},
        "training": {"code": {"module": WINE.stem}, "dataset": "wine.npz", "epochs": 10, "batchSizePerWorker": 16,
                     "learningRate": 0.01},
    }))  # fmt: skip
    return times


@contextlib.contextmanager
def allowing(real_node: RealNode, image: str) -> Iterator[None]:
    """The node's operator with IMAGE added to its allow-list, as a cluster admin adds one; the shipped one after."""
    def set_allowed(value: str) -> None:
        real_node.cluster.kubectl("-n", "dtr-system", "set", "env", "deployment/dtr-operator",
                                  f"DTR_ALLOWED_IMAGES={value}", timeout=60)  # fmt: skip
        real_node.cluster.kubectl("-n", "dtr-system", "rollout", "status", "deployment/dtr-operator",
                                  "--timeout=180s", timeout=200)  # fmt: skip

    deployment = real_node.cluster.kubectl_json("get", "deployment", "dtr-operator", "-n", "dtr-system")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    shipped = {e["name"]: e.get("value", "") for e in container.get("env", [])}["DTR_ALLOWED_IMAGES"]
    set_allowed(f"{shipped},{image}")
    try:
        yield
    finally:
        set_allowed(shipped)


@pytest.fixture(scope="module")
def own(real_node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Own]:
    t0 = time.monotonic()
    with restricted_namespace(real_node, "own-model") as namespace, ThreadPoolExecutor(12) as pool, \
            contextlib.ExitStack() as stack:
        watch = Watch(real_node, namespace)
        own = Own(real_node, namespace, tmp_path_factory.mktemp("own-model"), watch)
        data_ready = threading.Event()
        own.background["image"] = pool.submit(run_own_image, own, data_ready)
        try:
            stack.enter_context(allowing(real_node, OWN_IMAGE))
            timed(own.times, "make the data", lambda: host("data", str(own.local)))
            make_claim(own)
            timed(own.times, "dtr data put (both at once)", lambda: put_data(own, pool))
            for what, proc in own.puts.items():
                assert proc.returncode == 0, f"dtr data put {what}: {proc.stderr}"
            data_ready.set()
            watch.start()
            own.background["kill"] = pool.submit(kill_series_worker, own)
            timed(own.times, "dtr submit (8 runs at once)", lambda: submit_all(own, pool))
            yield own
        finally:
            data_ready.set()  # the image's run, if the data never came: it fails, and goes with the namespace
            watch.stopped.set()
            for job in own.background.values():
                with contextlib.suppress(BaseException):
                    job.result(timeout=600)
            subprocess.run(["docker", "image", "rm", OWN_IMAGE], capture_output=True, check=False)
            own.times["the module"] = time.monotonic() - t0
            print("\ntest_own_model.py:", "; ".join(f"{what} {s:.0f} s" for what, s in own.times.items()))


# ---------------------------------------------------------------- the two examples


def table(own: Own, name: str) -> dict[str, str]:
    """The run's row of `kubectl get distrainingruns`, by column (an empty cell is "")."""
    header, row = own.real_node.cluster.kubectl("get", "distrainingruns", name, "-n", own.namespace).stdout \
        .splitlines()[:2]  # fmt: skip
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    ends = [*starts[1:], len(row) + 1]
    return {column: row[a:b].strip() for column, a, b in zip(header.split(), starts, ends, strict=True)}


def check_submitted(own: Own, run: str, code: Path) -> None:
    proc = own.submits[run]
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (f"disttrainingrun {run} created in namespace {own.namespace}: code "
                                           f"{code.name} in ConfigMap {run}-code (sha256 {sha256(code)})"), proc.stdout


def check_succeeded(own: Own, run: str, code: Path, metrics: set[str], headline: str, workers: int) -> dict[str, Any]:
    """Succeeded with the file's digest in status.code and the model's own metrics, the headline named."""
    st = own.watch.terminal(run)
    own.times[f"{run}: dtr submit -> Succeeded"] = own.seconds_to(run, st["phase"])
    assert st["phase"] == "Succeeded" and st["reason"] == "TrainingSucceeded", st
    assert st["code"] == {"configMap": f"{run}-code", "key": code.name, "sha256": sha256(code)}, st
    assert set(st["metrics"]) == {*metrics, "epochs", "examplesPerSecond"}, st["metrics"]  # docs/api.md#status
    name, _, value = st["headline"].partition("=")
    assert name == headline and float(value) == round(st["metrics"][headline], 4), st
    assert st["model"]["path"] == f"/mnt/dtr/models/{run}/1" and st["model"]["claim"] == CLAIM, st["model"]
    assert st["workers"]["succeeded"] == workers, st
    row = table(own, run)
    assert (row["PHASE"], row["WORKERS"], row["METRIC"]) == ("Succeeded", f"{workers}/{workers}", st["headline"]), row
    return st


def check_lineage(model: Path, code: Path, st: dict[str, Any], workers: int) -> None:
    lineage = json.loads((model / "lineage.json").read_text())
    assert lineage["training"]["code"] == {"file": code.name, "module": None, "sha256": sha256(code)}, lineage
    assert lineage["training"]["workers"] == workers, lineage
    headline = lineage["metrics"]["metric"]
    assert abs(lineage["metrics"]["evaluation"][headline] - st["metrics"][headline]) < 1e-6, (lineage, st)


def test_the_wine_classifier_sent_as_a_file_succeeds_and_its_fetched_model_beats_the_majority_class(
    own: Own, tmp_path: Path
) -> None:
    check_submitted(own, WINE_RUN, WINE)
    st = check_succeeded(own, WINE_RUN, WINE, {"loss", "accuracy"}, "accuracy", WINE_WORKERS)
    assert table(own, WINE_RUN)["ACCURACY"] == str(st["metrics"]["accuracy"])
    assert not st.get("workerRestarts"), st

    model = timed(own.times, "dtr model get wine", lambda: own.fetch(WINE_RUN, tmp_path / "wine"))
    score = json.loads(host("score", "wine", str(model), str(own.local / "kept")))
    print(f"wine on {score['examples']} wines the cluster never saw: {score}")
    assert score["accuracy"] >= 0.85 > score["majority"] + 0.3, score
    check_lineage(model, WINE, st, WINE_WORKERS)


def test_the_series_regression_reads_a_csv_directory_reports_mae_and_resumes_a_killed_worker_epoch_by_epoch(
    own: Own, tmp_path: Path
) -> None:
    check_submitted(own, SERIES_RUN, SERIES)
    st = check_succeeded(own, SERIES_RUN, SERIES, {"loss", "mae", "rmse"}, "mae", 2)
    assert table(own, SERIES_RUN)["ACCURACY"] == "", "a regression has no accuracy"

    model = timed(own.times, "dtr model get series", lambda: own.fetch(SERIES_RUN, tmp_path / "series"))
    score = json.loads(host("score", "series", str(model), str(own.local / "kept")))
    print(f"series on {score['examples']} windows the cluster never saw: {score}")
    assert score["mse"] < 0.3 * score["mean_predictor_mse"], score
    check_lineage(model, SERIES, st, 2)

    check_resumed_every_epoch_once(own, st)


def check_resumed_every_epoch_once(own: Own, st: dict[str, Any]) -> None:
    """Worker 1, killed after epoch KILL_AFTER, restarted and resumed from the backup; the logs each worker keeps
    on the volume (appended across restarts) end no epoch twice: worker 0's ends every epoch, worker 1's every one
    but, at most, the epoch it was killed in after the backup had saved it and before its line was written
    (BackupAndRestore runs before the line: that epoch is done, and the restart goes on after it)."""
    killed = own.background["kill"].result()
    assert killed is not None, "the run finished before its worker was killed"
    own.times["series: worker 1 killed, from submit"] = killed
    assert st["workerRestarts"] >= 1, st
    assert st["progress"]["epochsDone"] == f"{SERIES_EPOCHS}/{SERIES_EPOCHS}", st["progress"]
    logs = [(own.volume() / "logs" / SERIES_RUN / f"worker-{i}.log").read_text() for i in range(2)]
    assert epoch_ends(logs[0]) == list(range(1, SERIES_EPOCHS + 1)), logs[0][-3000:]
    resumed = re.search(rf"\]: resumed from backup at epoch (\d+)/{SERIES_EPOCHS}\n", logs[1])
    assert resumed, logs[1][-3000:]
    before, after = logs[1][: resumed.start()], logs[1][resumed.start():]
    ended, begun = epoch_ends(before), [int(n) for n in re.findall(r"\]: epoch (\d+)/\d+ begin", before)]
    assert ended == list(range(1, len(ended) + 1)) and len(ended) >= KILL_AFTER, before[-3000:]
    # ...the killed worker went on from the epoch after the last one it had finished, logged or backed up unlogged.
    first = int(resumed[1])
    assert first == len(ended) + 1 or first == len(ended) + 2 == begun[-1] + 1, (resumed[0], ended, begun[-3:])
    assert epoch_ends(after) == list(range(first, SERIES_EPOCHS + 1)), after[-3000:]
    print(f"series: worker 1 ended epochs 1-{len(ended)}, killed in epoch {begun[-1]}, resumed at {first}")


def epoch_ends(log: str) -> list[int]:
    return [int(n) for n in re.findall(rf"\]: epoch (\d+)/{SERIES_EPOCHS} end ", log)]


# ---------------------------------------------------------------- broken files


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_wine_file_fails_user_code_error_naming_its_line(own: Own, case: str) -> None:
    name, broken, path = f"broken-{case}", BROKEN[case], own.broken[case]
    st = own.watch.terminal(name)
    seconds = own.seconds_to(name, st["phase"])
    own.times[f"{name}: submit -> Failed"] = seconds
    assert (st["phase"], st["reason"]) == ("Failed", "UserCodeError"), st
    assert st["message"].startswith(broken.where(path)), (broken.where(path), st["message"])
    assert broken.words in st["message"], st["message"]
    assert re.search(rf"\(worker {name}-worker-\d, exit code {exits.USER_CODE}\)$", st["message"]), st["message"]
    # No restart loop: the operator has the TFJob fail at the first restart (reconcile.restart_no_more).
    assert st.get("workerRestarts", 0) <= broken.workers, st
    print(f"{name}: Failed {seconds:.0f} s after submit, {st.get('workerRestarts', 0)} restart(s), phases "
          f"{own.watch.phases(name)}")
    check_broken_submitted(own, case)


def check_broken_submitted(own: Own, case: str) -> None:
    """dtr submit sent the file, or, for the syntax error, said so before anything reached the cluster."""
    name, broken, path = f"broken-{case}", BROKEN[case], own.broken[case]
    if case != "syntax":
        check_submitted(own, name, path)
        return
    refused = own.submits[name]
    assert (refused.returncode, refused.stdout) == (2, ""), refused
    # Its own words: dtr's Python (3.11) says `expected ':'` where the trainer's (3.9) says `invalid syntax`.
    assert refused.stderr.startswith(f"dtr submit: {path.parent}/{broken.where(path)}: SyntaxError: "), refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr


# ---------------------------------------------------------------- an image of one's own


def test_an_image_built_from_the_trainer_image_with_the_file_as_a_module_trains_it(own: Own) -> None:
    own.times.update(own.background["image"].result())
    st = own.watch.terminal(IMAGE_RUN)
    own.times[f"{IMAGE_RUN}: apply -> Succeeded"] = own.seconds_to(IMAGE_RUN, st["phase"])
    assert st["phase"] == "Succeeded" and st["reason"] == "TrainingSucceeded", st
    assert "code" not in st, "status.code is a ConfigMap's; the image's module is the image's"
    pod = own.real_node.pod(own.namespace, f"{IMAGE_RUN}-worker-0")
    assert {c["image"] for c in pod["spec"]["containers"]} == {OWN_IMAGE}, pod["spec"]["containers"]
    lineage = json.loads((own.volume() / "models" / IMAGE_RUN / "1" / "lineage.json").read_text())
    assert lineage["training"]["code"] == {"file": WINE.name, "module": WINE.stem, "sha256": sha256(WINE)}, lineage
    assert lineage["trainerImage"] == OWN_IMAGE, lineage
