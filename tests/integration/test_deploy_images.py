"""The two images without Docker: their install steps, run for real on this machine.

There is no Docker engine here, so the Dockerfiles cannot be built. What can be checked is that the
Python environment each image gets is the one the project tests: the build stage of
Dockerfile.operator is replayed (its WORKDIR, COPY, ENV and RUN lines) into a temporary directory
with the host's python3.11, and Dockerfile.trainer must install the very requirements file that
`make setup-trainer` installs into .venv/trainer, which must hold exactly those pins, pass
`pip check` and import TensorFlow 2.11.0.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- reading a Dockerfile


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    args: str


@dataclass(frozen=True)
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[str]:
        return [i.args for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages of a Dockerfile: continuation lines joined, comments and blank lines dropped."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name, []))
        else:
            assert stages, f"instruction before FROM: {line}"
            stages[-1].instructions.append(Instruction(keyword, args.strip()))
    return stages


def env_pairs(args: str) -> dict[str, str]:
    """ENV k=v k2=v2 (the form these Dockerfiles use)."""
    return dict(word.split("=", 1) for word in shlex.split(args))


def pins(requirements: Path) -> dict[str, str]:
    """name (normalised) -> version of every `name==version` line."""
    found = {}
    for line in requirements.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if match:
            found[normalise(match.group(1))] = match.group(2)
    return found


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_packages(python: Path) -> dict[str, str]:
    """name (normalised) -> version of what the environment of `python` holds (pip need not be in it)."""
    code = "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
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
    # Nothing is fetched outside the pinned list: every pip install in the build uses it.
    installs = [r for r in build.all("RUN") if "pip install" in r]
    assert installs and all("--constraint operator/requirements.txt" in r for r in installs)


@pytest.fixture(scope="module")
def operator_image_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Replays the build stage of Dockerfile.operator; returns the image's /opt/dtr."""
    build = OPERATOR[0]
    root = tmp_path_factory.mktemp("operator-image")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    cwd = root

    def here(path: str) -> Path:
        return root / path.lstrip("/") if path.startswith("/") else cwd / path

    for ins in build.instructions:
        if ins.keyword == "ENV":
            env.update(env_pairs(ins.args))
            # The image build must not keep pip's cache; a test run may reuse it (same files).
            env.pop("PIP_NO_CACHE_DIR", None)
        elif ins.keyword == "WORKDIR":
            cwd = here(ins.args)
            cwd.mkdir(parents=True, exist_ok=True)
        elif ins.keyword == "COPY":
            *sources, dest = shlex.split(ins.args)
            target = here(dest)
            for source in sources:
                src = REPO / source
                if src.is_dir():
                    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
                    shutil.copytree(src, target / src.name if dest.endswith("/") else target, ignore=ignore)
                else:
                    (target if dest.endswith("/") else target.parent).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, target / src.name if dest.endswith("/") else target)
        elif ins.keyword == "RUN":
            # The image's absolute paths live under `root`; its `python` is the host's python3.11.
            command = re.sub(r"(?<![\w./])/(opt|src)\b", lambda m: f"{root}/{m.group(1)}", ins.args)
            command = re.sub(r"^python\b", "python3.11", command)
            run(["bash", "-c", command], cwd=cwd, env=env)
        else:
            pytest.fail(f"Dockerfile.operator build stage: no replay for {ins.keyword} {ins.args}", pytrace=False)
    venv = root / "opt" / "dtr"
    assert (venv / "bin" / "dtr").exists(), "the build stage did not install the dtr command into /opt/dtr"
    return venv


def test_operator_image_holds_exactly_pinned_runtime_packages(operator_image_env: Path) -> None:
    packages = installed_packages(operator_image_env / "bin" / "python")
    pinned = pins(REPO / "operator" / "requirements.txt")
    assert packages.pop("dtr-operator") == "0.1.0"
    unpinned = {name: v for name, v in packages.items() if pinned.get(name) != v}
    assert not unpinned, f"in the image but not at a version of operator/requirements.txt: {unpinned}"
    for runtime in ("kopf", "kubernetes", "pyyaml", "prometheus-client", "aiohttp"):
        assert runtime in packages
    for tool in ("pytest", "hypothesis", "ruff", "pip"):
        assert tool not in packages, f"{tool} must not be in the operator image"


def test_operator_image_entrypoint_runs(operator_image_env: Path) -> None:
    env = {**os.environ, "PATH": f"{operator_image_env / 'bin'}:{os.environ['PATH']}"}
    env.pop("KUBECONFIG", None)
    out = run(["dtr", "operator", "--help"], cwd=Path("/"), env=env, timeout=60)
    for flag in ("--namespace", "--all-namespaces", "--trainer-image", "--log-format", "--liveness-port", "--metrics-port"):
        assert flag in out, f"`dtr operator --help` does not mention {flag}:\n{out}"


# ---------------------------------------------------------------- Dockerfile.trainer


TRAINER_REQUIREMENTS = "trainer/requirements.txt"


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
    assert all(s.base == "python:3.9-slim" for s in stages), [s.base for s in stages]
    assert requirement_files(stages) == {TRAINER_REQUIREMENTS}
    copied = " ".join(c for s in stages for c in s.all("COPY"))
    assert TRAINER_REQUIREMENTS in copied or "trainer/ " in copied + " "
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
