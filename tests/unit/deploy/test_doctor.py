"""deploy/doctor.sh (`make doctor`): what each make target needs, one line per tool, and its exit status."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from support.repo import REPO, clean_env

DOCTOR = REPO / "deploy" / "doctor.sh"
BASH = shutil.which("bash") or "/bin/bash"
# What doctor.sh itself calls, beside the tools it checks for.
COREUTILS = ("bash", "dirname", "sed", "head", "tail", "awk", "df", "timeout", "perl", "cat", "readlink", "uname")


def real_python311() -> str:
    """The python3.11 executable itself (not a pyenv shim, which needs pyenv's own PATH and HOME)."""
    proc = subprocess.run(["python3.11", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True,
                          check=True)  # fmt: skip
    return proc.stdout.strip()


@pytest.fixture
def bare_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH holds only make, python3.11 and basic tools, and whose HOME has no pyenv."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in (*COREUTILS, "make", "dpkg-query"):
        found = shutil.which(tool)
        if found:
            (bindir / tool).symlink_to(found)
    (bindir / "python3.11").symlink_to(real_python311())
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(PATH=str(bindir), HOME=str(home))
    env.pop("PYENV_ROOT", None)
    return env


def doctor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BASH, str(DOCTOR), *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_doctor_without_python39_names_it_and_how_to_get_it(bare_path):
    proc = doctor("-q", "setup", env=bare_path)
    assert proc.returncode == 1
    (line,) = proc.stdout.splitlines()  # -q: only what is missing, one line
    assert line.startswith("MISSING  python3.9 ")
    assert "pyenv install 3.9" in line and "PY_TRAINER=" in line


def test_doctor_full_check_without_python39_fails_for_make_run(bare_path):
    proc = doctor(env=bare_path)
    assert proc.returncode == 1
    out = proc.stdout
    assert "make run:  missing python3.9" in out
    for tool in ("go", "kubectl", "openssl"):  # not on the bare PATH either: named, each with a way to get it
        (line,) = [ln for ln in out.splitlines() if ln.split()[1:2] == [tool]]
        assert line.startswith("MISSING") and "get it: " in line
    assert next(ln for ln in out.splitlines() if ln.split()[1:2] == ["python3.11"]).startswith("ok ")


def test_doctor_for_one_target_checks_only_what_it_needs(bare_path):
    """test-unit needs only python3.11 and make: a missing python3.9 or go does not fail it."""
    proc = doctor("test-unit", env=bare_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [ln.split()[1] for ln in proc.stdout.splitlines()[1:]]
    assert names == ["python3.11", "make"]


def test_doctor_python_of_the_wrong_version(tmp_path):
    proc = doctor("-q", "setup-trainer", env=clean_env(PY_TRAINER=real_python311()))
    assert proc.returncode == 1
    assert "is Python 3.11." in proc.stdout and "not 3.9" in proc.stdout


def test_doctor_on_this_machine():
    """Every line has a status; the exit status is 0 exactly when make run can run."""
    proc = doctor(env=clean_env())
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["status", "what", "details"]
    checks = [ln for ln in lines[1:] if ln and not ln.startswith("make ")]
    assert {ln.split()[0] for ln in checks} <= {"ok", "installs", "MISSING", "warn"}
    names = {ln.split()[1] for ln in checks}
    assert {"python3.11", "python3.9", "make", "go", "kubectl", "openssl", "gcc", "docker", "root", "cgroup"} <= names
    summary = [ln for ln in lines if ln.startswith("make ")]
    assert [s.split(":")[0] for s in summary] == ["make run", "make test"]
    assert proc.returncode == (0 if summary[0].endswith("ready") else 1)


def test_doctor_passes_when_make_run_can_run_and_names_what_make_test_lacks(bare_path):
    """python3.11 and python3.9 are all `make run` needs: go, kubectl and openssl (the tests') are named, and the
    check passes."""
    trainer_python = subprocess.run([BASH, str(DOCTOR), "--find-python3.9"], env=clean_env(), capture_output=True,
                                    text=True, check=True).stdout.strip()  # fmt: skip
    if not trainer_python:
        pytest.fail("this machine has no python3.9 (make setup needs one): nothing to check make run with")
    proc = doctor(env={**bare_path, "PY_TRAINER": trainer_python})
    assert "make run:  ready" in proc.stdout, proc.stdout
    (test_line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("make test:")]
    assert "missing" in test_line and "go" in test_line.split() and "make run does not" in test_line
    assert proc.returncode == 0, proc.stdout


def fake(bindir: Path, name: str, script: str) -> None:
    (bindir / name).unlink(missing_ok=True)
    (bindir / name).write_text("#!/bin/sh\n" + script)
    (bindir / name).chmod(0o755)


def on(env: dict[str, str], system: str, machine: str) -> dict[str, str]:
    """The bare PATH with an uname that says SYSTEM MACHINE (macOS on Apple Silicon: Darwin arm64)."""
    answers = f'case "$1" in -s) echo {system} ;; -m) echo {machine} ;; *) echo {system} ;; esac\n'
    fake(Path(env["PATH"]), "uname", answers)
    return env


def lines_of(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {ln.split()[1]: ln for ln in proc.stdout.splitlines()[1:] if ln and not ln.startswith("make ")}


def test_doctor_on_a_mac_says_what_works_there_instead_of_make_run_ready(bare_path):
    proc = doctor(env={**on(bare_path, "Darwin", "arm64"), "PY_TRAINER": real_python311()})
    assert proc.returncode == 1, proc.stdout
    platform = lines_of(proc)["platform"]
    assert platform.startswith("MISSING") and "Darwin arm64" in platform and "needs Linux x86_64" in platform
    (verdict,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("make run:")]
    assert "ready" not in verdict and "not on Darwin arm64" in verdict
    for works in ("the client (make setup-op, ./dtr)", "dtr submit", "make k3d-up"):
        assert works in verdict, verdict
    # The trainer's environment is refused before pip runs; the client's is not concerned.
    refused = doctor("-q", "setup-trainer", env=bare_path)
    assert refused.returncode == 1 and refused.stdout.startswith("MISSING  platform "), refused.stdout
    client = doctor("setup-op", env=bare_path)
    assert client.returncode == 0 and "platform" not in client.stdout, client.stdout


def test_doctor_on_linux_arm64_says_local_training_is_untested(bare_path):
    trainer_python = subprocess.run([BASH, str(DOCTOR), "--find-python3.9"], env=clean_env(), capture_output=True,
                                    text=True, check=True).stdout.strip()  # fmt: skip
    assert trainer_python, "this machine has no python3.9 (make setup needs one)"
    proc = doctor(env={**on(bare_path, "Linux", "aarch64"), "PY_TRAINER": trainer_python})
    assert lines_of(proc)["platform"].startswith("warn") and "never installed or run" in proc.stdout
    (verdict,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("make run:")]
    assert verdict.startswith("make run:  ready, but untested on Linux aarch64") and "dtr submit" in verdict
    assert proc.returncode == 0, proc.stdout


KUBECTL = """case "$*" in
  *"version -o json") [ -n "$MINOR" ] || exit 1
    printf '{\\n  "serverVersion": {\\n    "major": "1",\\n    "minor": "%s"\\n  }\\n}\\n' "$MINOR" ;;
  "config current-context") echo lab ;;
  *) exit 1 ;;
esac
"""


@pytest.mark.parametrize(("minor", "status"), [("29+", "MISSING"), ("30", "ok"), ("", None)])
def test_doctor_checks_the_current_clusters_kubernetes_against_the_installs_floor(bare_path, minor, status):
    """The floor install.sh refuses below (deploy/lib.sh, one home), said for the cluster kubectl reaches; nothing when
    no cluster answers."""
    fake(Path(bare_path["PATH"]), "kubectl", KUBECTL)
    proc = doctor("k3d-up", env={**bare_path, "MINOR": minor})
    line = lines_of(proc).get("kubernetes")
    if status is None:
        assert line is None, proc.stdout
        return
    assert line.startswith(status), line
    if status == "MISSING":
        assert "lab: the cluster runs Kubernetes 1.29; the install needs 1.30 or newer" in line
    else:
        assert "lab runs Kubernetes 1.30" in line
