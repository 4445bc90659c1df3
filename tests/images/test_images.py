"""The built images, run as a cluster would run them (make test-images builds them first).

Every container runs hardened as the Pod Security "restricted" profile and deploy/ ask:
uid 1000, read-only root filesystem, all capabilities dropped, no privilege escalation,
a tmpfs /tmp only, and no network unless the test is about the network.

Nothing here skips: without a Docker engine or the images, the tests fail and say so
(`make docker-up`, `make images`). Image names: DTR_OPERATOR_IMAGE, DTR_TRAINER_IMAGE.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from types import ModuleType

import pytest

from devcluster.node import image_names

REPO = Path(__file__).resolve().parents[2]
OPERATOR = os.environ.get("DTR_OPERATOR_IMAGE", image_names()[0])
TRAINER = os.environ.get("DTR_TRAINER_IMAGE", image_names()[1])


def _slim_trainer() -> ModuleType:
    """deploy/images/slim_trainer.py: the one list of what the trainer image leaves out."""
    spec = importlib.util.spec_from_file_location("dtr_slim_trainer", REPO / "deploy" / "images" / "slim_trainer.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SLIM = _slim_trainer()

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
