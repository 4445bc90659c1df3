"""The two Dockerfiles as text, and the trainer environment they must match.

What the Dockerfiles say, read without building them: Dockerfile.operator's two slim stages, the lock installed
with its hashes, non-root, `dtr operator`; Dockerfile.trainer installs the very requirements file that `make
setup-trainer` installs into .venv/trainer, which must hold exactly those pins, pass `pip check` and import TF 2.11.0.

The images themselves are built by CI's *images* step: the images tier (tests/images/) checks each holds its lock
exactly and runs them as uid 1000, read-only; the node tier runs the operator's as deploy/'s Deployment under
Pod Security `restricted` (its token, its read-only root, its JSON logs: tests/node/test_operator_pod.py). Until
2026-12-06 this module replayed Dockerfile.operator's build stage with pip and ran the result as the pod, from the
days there was no Docker engine here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from deploy_support import (
    REPO,
    Stage,
    parse_dockerfile,
)
from packaging.markers import Marker


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
