"""The Makefile's side of `make doctor`: `make setup` names a missing Python first (deploy/doctor.sh's
wording), and `make install-cli` links ./dtr."""

from __future__ import annotations

import subprocess

from support.repo import REPO, clean_env


def test_make_setup_trainer_without_python39_fails_with_the_doctors_message(tmp_path):
    """Was `-m venv ...` with an empty PY_TRAINER: make ran `m` ("make: m: No such file or directory") and went on."""
    venv = tmp_path / "trainer"
    proc = subprocess.run(["make", "setup-trainer", "PY_TRAINER=", f"VENV_TR={venv}"], cwd=REPO, env=clean_env(),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "MISSING  python3.9" in out and "pyenv install 3.9" in out
    assert "make: m:" not in out and "-m venv" not in out
    assert not venv.exists()


def test_make_setup_checks_both_pythons_before_building_anything(tmp_path):
    op, tr = tmp_path / "op", tmp_path / "trainer"
    proc = subprocess.run(["make", "setup", "PY_TRAINER=", f"VENV_OP={op}", f"VENV_TR={tr}"], cwd=REPO,
                          env=clean_env(), capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode != 0
    assert "MISSING  python3.9" in proc.stdout
    assert not op.exists() and not tr.exists()


def test_make_install_cli_links_the_shim(tmp_path):
    proc = subprocess.run(["make", "-s", "install-cli", f"PREFIX={tmp_path}"], cwd=REPO, env=clean_env(),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    link = tmp_path / "bin" / "dtr"
    assert link.is_symlink() and link.resolve() == (REPO / "dtr").resolve()
    assert subprocess.run([str(link), "--version"], cwd=tmp_path, env=clean_env(), capture_output=True,
                          timeout=120, check=False).returncode == 0  # fmt: skip
