"""The built images, run as a cluster would run them (make test-images builds them first).

Every container runs hardened as the Pod Security "restricted" profile and deploy/ ask:
uid 1000, read-only root filesystem, all capabilities dropped, no privilege escalation,
a tmpfs /tmp only, and no network unless the test is about the network.

Nothing here skips: without a Docker engine or the images, the tests fail and say so
(`make docker-up`, `make images`). Image names: DTR_OPERATOR_IMAGE, DTR_TRAINER_IMAGE.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from devcluster.node import image_names
from support.repo import slim_trainer

REPO = Path(__file__).resolve().parents[2]
OPERATOR = os.environ.get("DTR_OPERATOR_IMAGE", image_names()[0])
TRAINER = os.environ.get("DTR_TRAINER_IMAGE", image_names()[1])
# The trainer image's limit (issue 30): docker's Size (`docker image inspect`), base image included.
TRAINER_MAX_BYTES = 1_500_000_000


SLIM = slim_trainer()

HARDENED = [
    "--user", "1000:1000",
    "--read-only",
    "--cap-drop", "ALL",
    "--security-opt", "no-new-privileges",
    "--tmpfs", "/tmp",
]  # fmt: skip


def docker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )


def run(
    image: str,
    *args: str,
    opts: tuple[str, ...] = ("--network", "none"),
    entrypoint: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`docker run --rm` hardened; `opts` go before the image, `args` after it."""
    extra = ["--entrypoint", entrypoint] if entrypoint else []
    return docker("run", "--rm", *HARDENED, *extra, *opts, image, *args)


@pytest.fixture(scope="session", autouse=True)
def engine() -> None:
    if shutil.which("docker") is None:
        pytest.fail("no docker client on PATH: run `make docker-up`", pytrace=False)
    info = docker("info", "--format", "{{.ServerVersion}}", timeout=30)
    if info.returncode != 0:
        pytest.fail(
            f"the Docker engine is not reachable; run `make docker-up`\n{output(info)}",
            pytrace=False,
        )


def inspect(image: str) -> dict:
    proc = docker("image", "inspect", image, timeout=30)
    if proc.returncode != 0:
        pytest.fail(
            f"image {image} not found; run `make images`\n{output(proc)}", pytrace=False
        )
    return json.loads(proc.stdout)[0]


@pytest.mark.parametrize(
    ("image", "entrypoint", "ports"),
    [
        (OPERATOR, ["dtr", "operator"], {"8080/tcp", "9090/tcp"}),
        (TRAINER, ["python", "-m", "dtr_trainer"], {"2222/tcp"}),
    ],
)
def test_image_config(image: str, entrypoint: list[str], ports: set[str]) -> None:
    config = inspect(image)["Config"]
    # numeric, so that runAsNonRoot can check it without /etc/passwd
    assert config["User"] == "1000:1000"
    assert config["Entrypoint"] == entrypoint
    assert set(config["ExposedPorts"]) == ports
    path = next(e for e in config["Env"] if e.startswith("PATH="))
    assert path.startswith("PATH=/opt/dtr/bin:"), path


def test_trainer_tensorflow_as_unprivileged_user() -> None:
    code = (
        "import os, numpy, tensorflow as tf\n"
        "assert tf.__version__ == '2.11.0', tf.__version__\n"
        "assert numpy.__version__.startswith('1.'), numpy.__version__\n"
        "assert (os.getuid(), os.getgid()) == (1000, 1000), (os.getuid(), os.getgid())\n"
        "assert float(tf.reduce_sum(tf.ones([2, 3]))) == 6.0\n"
        "try:\n"
        "    open('/opt/dtr/probe', 'w')\n"
        "except OSError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('the root filesystem is writable')\n"
        "print('ok', tf.__version__)\n"
    )
    proc = run(TRAINER, "-c", code, entrypoint="python")
    assert proc.returncode == 0, output(proc)
    assert proc.stdout.strip().endswith("ok 2.11.0"), output(proc)


def test_trainer_help() -> None:
    proc = run(TRAINER, "--help")
    assert proc.returncode == 0, output(proc)
    assert "MultiWorkerMirroredStrategy" in proc.stdout, output(proc)
    assert "--export-dir" in proc.stdout, output(proc)


def test_trainer_bad_flag_is_a_usage_error() -> None:
    proc = run(TRAINER, "--epochs", "0", "--export-dir", "/tmp/x")
    assert proc.returncode == 2, output(proc)
    assert "Traceback" not in proc.stderr, output(proc)


def _volume(tmp_path: Path) -> Path:
    """A host directory that uid 1000 in the container can write (as a PVC would be)."""
    volume = tmp_path / "volume"
    volume.mkdir()
    volume.chmod(0o777)
    return volume


def test_trainer_trains_and_exports(tmp_path: Path) -> None:
    """One worker, no TF_CONFIG: the offline digits data, one epoch, a SavedModel."""
    volume = _volume(tmp_path)
    proc = run(
        TRAINER,
        "--dataset", "digits", "--epochs", "1",
        "--export-dir", "/mnt/dtr/models/digits",
        "--termination-message-path", "/mnt/dtr/termination-log",
        opts=("--network", "none", "--volume", f"{volume}:/mnt/dtr"),
    )  # fmt: skip
    assert proc.returncode == 0, output(proc)
    assert (volume / "models/digits/1/saved_model.pb").is_file(), output(proc)
    result = json.loads((volume / "termination-log").read_text())
    assert result["modelPath"] == "/mnt/dtr/models/digits/1", result
    assert result["epochs"] == 1, result
    assert 0.0 <= result["accuracy"] <= 1.0, result


def test_trainer_two_workers_over_the_network(tmp_path: Path) -> None:
    """Two containers, one MultiWorkerMirroredStrategy run over gRPC on port 2222, as a TFJob's
    two worker pods would: TF_CONFIG names the peers, the chief (worker 0) exports."""
    volume = _volume(tmp_path)
    suffix = uuid.uuid4().hex[:8]
    network = f"dtr-test-{suffix}"
    names = [f"dtr-test-{suffix}-w{i}" for i in range(2)]
    cluster = {"worker": [f"w0-{suffix}:2222", f"w1-{suffix}:2222"]}
    logs = ""
    created = docker("network", "create", network, timeout=60)
    assert created.returncode == 0, output(created)
    try:
        for index, name in enumerate(names):
            tf_config = json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}
            )
            proc = docker(
                "run", "--detach", "--name", name, *HARDENED,
                "--network", network, "--network-alias", f"w{index}-{suffix}",
                "--volume", f"{volume}:/mnt/dtr", "--env", f"TF_CONFIG={tf_config}",
                TRAINER,
                "--dataset", "digits", "--epochs", "1",
                "--export-dir", "/mnt/dtr/models/digits",
                "--termination-message-path", f"/mnt/dtr/termination-log-{index}",
                timeout=60,
            )  # fmt: skip
            assert proc.returncode == 0, output(proc)
        waited = docker("wait", *names, timeout=300)
        logs = "\n".join(output(docker("logs", name, timeout=30)) for name in names)
        assert waited.stdout.split() == ["0", "0"], (
            f"exit codes {waited.stdout.split()}\n{logs}"
        )
        assert "2 worker(s), 2 replica(s)" in logs, logs
    finally:
        docker("rm", "--force", *names, timeout=60)
        docker("network", "rm", network, timeout=60)
    assert (volume / "models/digits/1/saved_model.pb").is_file(), logs
    chief = json.loads((volume / "termination-log-0").read_text())
    assert chief["modelPath"] == "/mnt/dtr/models/digits/1", chief


def test_trainer_serves_tensorboard_without_setuptools() -> None:
    """`dtr tensorboard`'s pod command (dtr_trainer.board) answers in the image, which has no pkg_resources."""
    code = (
        "import json, subprocess, sys, time, urllib.request\n"
        "board = subprocess.Popen([sys.executable, '-m', 'dtr_trainer.board', '--logdir', '/tmp',\n"
        "                          '--host', '127.0.0.1', '--port', '6006'], stderr=subprocess.PIPE, text=True)\n"
        "for _ in range(120):\n"
        "    if board.poll() is not None: sys.exit('ended: ' + board.stderr.read()[-2000:])\n"
        "    try:\n"
        "        print(json.load(urllib.request.urlopen('http://127.0.0.1:6006/data/runs', timeout=2))); break\n"
        "    except OSError: time.sleep(0.5)\n"
        "board.kill()\n"
    )
    proc = run(TRAINER, "-c", code, entrypoint="python")
    assert proc.returncode == 0, output(proc)
    assert proc.stdout.strip().splitlines()[-1:] == ["[]"], output(proc)


def test_trainer_image_size() -> None:
    """At most 1.5 GB with tensorflow==2.11.0: what deploy/images/slim_trainer.py leaves out brings it there
    (docs/images.md#the-trainer-images-size). A size is no timing: the same lock on the same base gives the same
    bytes on any machine."""
    size = inspect(TRAINER)["Size"]
    assert size <= TRAINER_MAX_BYTES, f"{TRAINER}: {size / 1e6:.1f} MB, above {TRAINER_MAX_BYTES / 1e6:.0f} MB"


# Run in the trainer image: what slim_trainer.py removed is absent, what the trainer needs is there and works.
LEFT_OUT = """
import importlib.metadata as m, importlib.util as u, json, os, shutil, struct, sysconfig
site = sysconfig.get_paths()["purelib"]
args = json.loads(ARGS)
found = {}
found["paths"] = [p for p in args["paths"] if os.path.lexists(os.path.join(site, p))]
found["tests"] = [r for pkg in args["tests"] for r, ds, _ in os.walk(os.path.join(site, pkg)) if "tests" in ds]
found["build inputs"] = [f for pkg in args["scientific"] for _, _, fs in os.walk(os.path.join(site, pkg))
                         for f in fs if os.path.splitext(f)[1] in args["build_inputs"]]
found["distributions"] = [n for n in args["distributions"] if list(m.distributions(name=n))]
found["modules"] = [n for n in ("clang", "tensorflow_io_gcs_filesystem", "tensorboard_plugin_wit") if u.find_spec(n)]
tools = ("cc", "gcc", "c++", "g++", "ld", "as", "strip", "objcopy", "make", "pip")
found["tools"] = [t for t in tools if shutil.which(t)]
found["caches"] = [r for base in ("/opt/dtr", "/home/dtr") for r, ds, _ in os.walk(base) if ".cache" in ds]
def symtab(path):  # does the ELF file still have a static symbol table (SHT_SYMTAB)?
    with open(path, "rb") as f:
        head = f.read(64)
        shoff, = struct.unpack_from("<Q", head, 0x28)
        size, count = struct.unpack_from("<HH", head, 0x3A)
        f.seek(shoff)
        table = f.read(size * count)
    return any(struct.unpack_from("<I", table, i * size + 4)[0] == 2 for i in range(count))
found["symbol tables"] = [p for p in ("tensorflow/python/_pywrap_tensorflow_internal.so",
                                      "tensorflow/libtensorflow_framework.so.2") if symtab(os.path.join(site, p))]
print(json.dumps(found))
pyc = sum(f.endswith(".pyc") for _, _, fs in os.walk(os.path.join(site, "tensorflow")) for f in fs)
assert pyc > 1000, f"TensorFlow's bytecode is gone ({pyc} .pyc files): every start would compile it again"
import tensorflow as tf
assert tf.__version__ == "2.11.0", tf.__version__
tf.distribute.MultiWorkerMirroredStrategy, tf.saved_model.save, tf.keras.callbacks.TensorBoard
assert "gs" in tf.io.gfile.get_registered_schemes()  # TensorFlow's own GCS file system, without the plugin
assert "s3" in tf.io.gfile.get_registered_schemes()  # tensorflow-io's plugin: Keras imports tensorflow_io
writer = tf.summary.create_file_writer("/tmp/board")
with writer.as_default():
    assert tf.summary.scalar("loss", 0.5, step=1)
writer.flush()
assert any(n.startswith("events.out.tfevents") for n in os.listdir("/tmp/board"))
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
import h5py, scipy.linalg, scipy.sparse, scipy.special
assert load_digits().data.shape == (1797, 64)
print("ok")
"""


def test_trainer_left_out_what_it_never_runs() -> None:
    """None of slim_trainer.py's parts is in the image, nor a compiler, strip, pip or a package cache; TensorFlow's
    bytecode is (without it every start compiles TensorFlow again: docs/images.md); what the trainer and the
    examples use imports and works: MultiWorkerMirroredStrategy, SavedModel, summaries, gs://, s3:// (tensorflow-io's
    file system plugin, without its op libraries), scikit-learn, h5py."""
    args = {
        "paths": [str(Path("tensorflow", "include")), *SLIM.TFCOMPILE, *SLIM.TFIO_OPS],
        "tests": [*SLIM.SCIENTIFIC, "h5py"], "scientific": list(SLIM.SCIENTIFIC),
        "build_inputs": list(SLIM.BUILD_INPUTS), "distributions": list(SLIM.UNUSED_DISTRIBUTIONS),
    }  # fmt: skip
    proc = run(TRAINER, "-c", f"ARGS = {json.dumps(json.dumps(args))}\n{LEFT_OUT}", entrypoint="python")
    assert proc.returncode == 0, output(proc)
    found, ok = proc.stdout.strip().splitlines()[-2:]
    assert json.loads(found) == {part: [] for part in json.loads(found)}, output(proc)
    assert ok == "ok", output(proc)


def test_operator_help_read_only() -> None:
    proc = run(OPERATOR, "--help")
    assert proc.returncode == 0, output(proc)
    assert "usage: dtr operator" in proc.stdout, output(proc)
    assert "--trainer-image" in proc.stdout, output(proc)


def test_operator_without_credentials_fails_in_one_line() -> None:
    proc = run(OPERATOR)
    assert proc.returncode == 1, output(proc)
    assert "no Kubernetes credentials" in proc.stderr, output(proc)
    assert "Traceback" not in proc.stderr, output(proc)


def test_operator_environment() -> None:
    """The runtime packages import; the build and test tools stayed out (Dockerfile.operator)."""
    code = (
        "import importlib.util, os\n"
        "import kopf, kubernetes, prometheus_client, dtr_operator.handlers\n"
        "assert (os.getuid(), os.getgid()) == (1000, 1000), (os.getuid(), os.getgid())\n"
        "present = [m for m in ('pip', 'setuptools', 'pytest', 'hypothesis', 'ruff', 'radon', 'xenon')\n"
        "           if importlib.util.find_spec(m)]\n"
        "assert not present, present\n"
        "print('ok')\n"
    )
    proc = run(OPERATOR, "-c", code, entrypoint="python")
    assert proc.returncode == 0, output(proc)
    assert proc.stdout.strip() == "ok", output(proc)


def locked(image: str) -> dict[str, str]:
    """The lock the image installed from (deploy/images/lock.py): name -> version, for this machine."""
    which = "operator" if image == OPERATOR else "trainer"
    text = (REPO / which / "locks" / f"linux-{platform.machine()}.lock").read_text()
    return {re.sub(r"[-_.]+", "-", n).lower(): v for n, v in re.findall(r"^([A-Za-z0-9][\w.-]*)==(\S+)", text, re.M)}


@pytest.mark.parametrize("image", [OPERATOR, TRAINER])
def test_image_holds_its_lock_and_nothing_of_the_build(image: str) -> None:
    """Exactly the lock's packages at its versions (but the installers and, in the trainer's, the distributions
    slim_trainer.py removes) and the project's own; none of the build stage's CA bundle and pip settings
    (deploy/images/build.sh's layer)."""
    code = (
        "import importlib.metadata as m, importlib.util as u, os, re\n"
        "for d in m.distributions(): print(re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(), d.version)\n"
        "print('importable', [n for n in ('pip', 'setuptools', 'pkg_resources') if u.find_spec(n)])\n"
        "print('build-only', os.path.exists('/etc/dtr-build'))\n"
    )
    proc = run(image, "-c", code, entrypoint="python")
    assert proc.returncode == 0, output(proc)
    *dists, importable, build_only = proc.stdout.splitlines()
    assert (importable, build_only) == ("importable []", "build-only False"), output(proc)
    own = {"dtr-contract", "dtr-operator" if image == OPERATOR else "dtr-trainer"}
    removed = {"pip", "setuptools"} | (set(SLIM.UNUSED_DISTRIBUTIONS) if image == TRAINER else set())
    want = {n: v for n, v in locked(image).items() if n not in removed}
    assert {n: v for n, v in (d.split() for d in dists) if n not in own} == want
    config = inspect(image)["Config"]
    assert not [e for e in config["Env"] if e.startswith(("PIP_CERT=", "PIP_CONFIG_FILE="))], config["Env"]
    assert "dev.distml.build-only" not in (config.get("Labels") or {}), config.get("Labels")
