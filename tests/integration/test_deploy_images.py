"""The two images without Docker: their install steps, run for real on this machine.

There is no Docker engine here, so the Dockerfiles cannot be built. What can be checked is the
Python environment each image gets, and how the operator's runs:
- the build stage of Dockerfile.operator is replayed (its WORKDIR, COPY, ENV and RUN lines) with the
  system's python3.11, /opt mapped into a temporary directory; the result holds exactly the pinned
  runtime packages, and run the way the kubelet would run the Deployment's container (uid 1000,
  read-only root, /tmp emptyDir, no capabilities, in-cluster token) it takes a run to Succeeded;
- Dockerfile.trainer must install the very requirements file that `make setup-trainer` installs
  into .venv/trainer, which must hold exactly those pins, pass `pip check` and import TF 2.11.0.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import IO

import pytest
from deploy_support import (
    CLUSTER_MODE,
    REPO,
    Stage,
    apiserver_address,
    as_the_pod,
    image_command,
    in_opt,
    installed_mode,
    kubernetes_service,
    operator_completes_a_run,
    operator_container,
    parse_dockerfile,
    render,
    replay_build_stage,
    write_pod_files,
)
from packaging.markers import Marker

from devcluster.controlplane import free_port
from support.cluster import Cluster


def pins(requirements: Path) -> dict[str, str]:
    """name (normalised) -> version of every `name==version` line whose environment marker (`; ...`)
    holds on this machine (trainer/requirements.txt pins tensorflow-cpu-aws for linux/arm64 only)."""
    found = {}
    for line in requirements.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)\s*(?:;([^#]*))?", line.strip())
        if match and (match.group(3) is None or Marker(match.group(3)).evaluate()):
            found[normalise(match.group(1))] = match.group(2)
    return found


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_packages(python: Path) -> dict[str, str]:
    """name (normalised) -> version of what the environment of `python` holds (pip need not be in it)."""
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return {normalise(name): version for name, version in json.loads(proc.stdout).items()}


def run(cmd: list[str] | str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, shell=isinstance(cmd, str), capture_output=True, text=True, check=False, timeout=timeout
    )
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


# ---------------------------------------------------------------- Dockerfile.operator


OPERATOR = parse_dockerfile((REPO / "Dockerfile.operator").read_text())


def test_operator_dockerfile_is_two_slim_stages_ending_non_root_with_dtr_operator() -> None:
    build, final = OPERATOR
    assert build.base == final.base == "python:3.11-slim"
    assert build.name is not None and f"--from={build.name}" in " ".join(final.all("COPY"))
    # The final stage installs nothing: it only copies the built virtualenv.
    assert not [r for r in final.all("RUN") if re.search(r"\b(pip|apt-get|apt|gcc|make)\b", r)]
    assert final.all("USER") == ["1000:1000"]
    assert [json.loads(e) for e in final.all("ENTRYPOINT")] == [["dtr", "operator"]]
    # Nothing is fetched outside the lock: pip installs the hash-pinned lock (which `deploy/images/lock.py
    # --check` ties to operator/requirements.txt in make lint), then only the project's own directories.
    installs = [r for r in build.all("RUN") if "pip install" in r]
    assert any("--require-hashes" in r and LOCK.format(image="operator") in r for r in installs), installs
    assert all("--require-hashes" in r or "--no-deps" in r for r in installs), installs


@pytest.fixture(scope="module")
def operator_image_opt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's /opt, made by replaying the build stage of Dockerfile.operator."""
    opt = replay_build_stage(REPO / "Dockerfile.operator", tmp_path_factory.mktemp("operator-image"))
    assert (opt / "dtr" / "bin" / "dtr").exists(), "the build stage did not install the dtr command into /opt/dtr"
    return opt


@pytest.fixture(scope="module")
def operator_image_env(operator_image_opt: Path) -> Path:
    return operator_image_opt / "dtr"


def test_operator_image_holds_exactly_pinned_runtime_packages(operator_image_env: Path) -> None:
    packages = installed_packages(operator_image_env / "bin" / "python")
    pinned = pins(REPO / "operator" / "requirements.txt")
    assert packages.pop("dtr-operator") == "0.1.0"
    assert packages.pop("dtr-contract") == "0.1.0"
    unpinned = {name: v for name, v in packages.items() if pinned.get(name) != v}
    assert not unpinned, f"in the image but not at a version of operator/requirements.txt: {unpinned}"
    for runtime in ("kopf", "kubernetes", "pyyaml", "prometheus-client", "aiohttp"):
        assert runtime in packages
    for tool in ("pytest", "hypothesis", "ruff", "radon", "xenon", "pip"):
        assert tool not in packages, f"{tool} must not be in the operator image"


def test_operator_image_entrypoint_runs(operator_image_opt: Path) -> None:
    # Inside a mount namespace where /opt is the image's, as the shebangs pip wrote expect.
    out = run(in_opt(operator_image_opt.parent, ["/opt/dtr/bin/dtr", "operator", "--help"]), cwd=Path("/"), timeout=60)
    for flag in ("--namespace", "--all-namespaces", "--trainer-image", "--log-format", "--liveness-port",
                 "--metrics-port"):
        assert flag in out, f"`dtr operator --help` does not mention {flag}:\n{out}"


# ---------------------------------------------------------------- Dockerfile.trainer


TRAINER_REQUIREMENTS = "trainer/requirements.txt"
LOCK = '{image}/locks/linux-$(uname -m).lock'  # generated from the requirements by deploy/images/lock.py


def requirement_files(stages: list[Stage]) -> set[str]:
    """Every `-r FILE` / `--requirement FILE` that a `pip install` of the Dockerfile reads."""
    files: set[str] = set()
    for stage in stages:
        for command in stage.all("RUN"):
            for install in re.findall(r"pip3? install ([^&;|]*)", command):
                words = shlex.split(install)
                for flag, value in zip(words, [*words[1:], ""], strict=True):
                    if flag in ("-r", "--requirement"):
                        files.add(value)
                    elif flag.startswith("--requirement="):
                        files.add(flag.split("=", 1)[1])
    return files


def test_trainer_dockerfile_installs_the_tested_requirements_as_non_root() -> None:
    stages = parse_dockerfile((REPO / "Dockerfile.trainer").read_text())
    assert all(s.base == "python:3.9-slim" for s in stages), [s.base for s in stages]  # ARG BASE's default
    # The lock of trainer/requirements.txt, hash-pinned (`deploy/images/lock.py --check` in make lint holds
    # it to exactly those pins), the file make setup-trainer installs.
    assert requirement_files(stages) == {LOCK.format(image="trainer")}
    copied = " ".join(c for s in stages for c in s.all("COPY"))
    assert "trainer/locks/" in copied, copied
    users = stages[-1].all("USER")
    assert users and users[-1].split(":")[0] not in ("root", "0"), f"final USER: {users}"


@pytest.fixture(scope="module")
def trainer_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """.venv/trainer (made by `make setup-trainer` from the same file); else a fresh python3.9 venv
    with `pip install -r trainer/requirements.txt`, as the Dockerfile does (a large download)."""
    made = REPO / ".venv" / "trainer" / "bin" / "python"
    if made.exists():
        return made
    venv = tmp_path_factory.mktemp("trainer-venv") / "venv"
    run(["python3.9", "-m", "venv", str(venv)], cwd=REPO)
    run([str(venv / "bin" / "pip"), "install", "-q", "-r", TRAINER_REQUIREMENTS], cwd=REPO, timeout=1800)
    return venv / "bin" / "python"


def test_trainer_environment_holds_the_pins_and_imports_tensorflow_2_11(trainer_python: Path) -> None:
    packages = installed_packages(trainer_python)
    wrong = {n: (v, packages.get(n)) for n, v in pins(REPO / TRAINER_REQUIREMENTS).items() if packages.get(n) != v}
    assert not wrong, f"pinned -> installed: {wrong}"
    run([str(trainer_python), "-m", "pip", "check"], cwd=REPO)
    code = "import sys, numpy, tensorflow as tf; print(sys.version_info[:2], tf.__version__, numpy.__version__)"
    out = run([str(trainer_python), "-c", code], cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    assert out.split()[-2:] == ["2.11.0", pins(REPO / TRAINER_REQUIREMENTS)["numpy"]], out
    assert out.startswith("(3, 9)"), out



# ---------------------------------------------------------------- the operator image, run as its pod


def test_operator_image_runs_as_its_pod_and_completes_a_run(
    control_plane: Cluster, operator_image_opt: Path, namespace: str, tmp_path: Path
) -> None:
    """The image's environment, started with the image's ENTRYPOINT and the Deployment's args and
    env, under the Deployment's securityContext: uid 1000, read-only root filesystem with only the
    /tmp emptyDir writable, no capabilities, no privilege escalation, and in-cluster credentials
    (the ServiceAccount's token where the kubelet mounts it). It must serve /healthz and /metrics
    and take a run to Succeeded, with RBAC never refusing it."""
    docs = render(CLUSTER_MODE.kustomization)
    pod_spec = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    container = dict(operator_container(docs))
    liveness, metrics = free_port(), free_port()
    container["args"] = [
        {"--liveness-port": f"--liveness-port={liveness}", "--metrics-port": f"--metrics-port={metrics}"}.get(
            a.split("=")[0], a
        )
        for a in container["args"]
    ]
    argv, env = image_command(REPO / "Dockerfile.operator", container)
    apiserver = apiserver_address(control_plane)
    with installed_mode(control_plane, CLUSTER_MODE), kubernetes_service(apiserver) as service_ip:
        # kubernetes.default.svc:443 (kopf's in-cluster login) resolves to the Service stand-in; the
        # environment the kubelet sets names the API server by an address its certificate holds.
        pod_files = write_pod_files(control_plane, tmp_path / "pod", service_ip)
        host, _, port = apiserver.rpartition(":")
        env |= {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port, "HOSTNAME": "dtr-operator-test"}
        command = as_the_pod(operator_image_opt, pod_files, {**pod_spec, "containers": [container]}, argv, env)

        def start(log: IO[str]) -> subprocess.Popen[bytes]:
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd="/")

        image = env["DTR_TRAINER_IMAGE"]
        output = operator_completes_a_run(control_plane, start, (liveness, metrics), namespace, image,
                                          tmp_path / "operator.log")  # fmt: skip
    # JSON logs (--log-format=json) and nothing about a file it could not write.
    assert output.lstrip().startswith("{"), output[:500]
    assert "Read-only file system" not in output and "Permission denied" not in output, output[-3000:]
