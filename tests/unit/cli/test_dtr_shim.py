"""./dtr, the one way to run dtr: through a symlink, from any directory."""

from __future__ import annotations

import argparse
import subprocess

import yaml
from dtr_cli import cli

from support.repo import REPO, clean_env


def test_dtr_shim_through_a_symlink_from_another_directory(tmp_path):
    link = tmp_path / "dtr"
    link.symlink_to(REPO / "dtr")
    proc = subprocess.run([str(link), "--help"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: dtr")
    # stdout is dtr's alone (make's output, if any, goes to stderr): render pipes into kubectl apply.
    proc = subprocess.run([str(link), "render", str(REPO / "examples" / "digits.yaml")], cwd=tmp_path,
                          env=clean_env(), capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert [d["kind"] for d in yaml.safe_load_all(proc.stdout)] == ["PersistentVolumeClaim", "TFJob"]


def test_help_never_builds_an_environment(tmp_path):
    """A fresh clone (no .venv): `dtr --help` and `dtr run --help` answer from dtr_cli/cli.py's docstring, make never
    runs (the trainer's environment is TensorFlow: minutes)."""
    root = tmp_path / "repo"
    (root / "dtr").parent.mkdir(parents=True)
    (root / "dtr").write_bytes((REPO / "dtr").read_bytes())
    (root / "dtr").chmod(0o755)
    for read in ("operator/dtr_cli/cli.py", "operator/dtr_operator/__init__.py"):  # the list; the version
        (root / read).parent.mkdir(parents=True)
        (root / read).write_text((REPO / read).read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    made = tmp_path / "make-called"
    (bin_dir / "make").write_text(f"#!/bin/sh\ntouch {made}\nexit 1\n")
    (bin_dir / "make").chmod(0o755)
    env = {**clean_env(), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    for args in (["--help"], ["run", "--help"], ["run", "-h", "x.yaml"]):
        proc = subprocess.run([str(root / "dtr"), *args], env=env, capture_output=True, text=True, timeout=30,
                              check=False)  # fmt: skip
        assert proc.returncode == 0, (args, proc.stderr)
        assert proc.stdout.startswith("usage: dtr") and "  dtr run FILE" in proc.stdout, proc.stdout
        assert "setup-op" in proc.stdout
    version = subprocess.run([str(root / "dtr"), "--version"], env=env, capture_output=True, text=True, timeout=30,
                             check=False)  # fmt: skip
    assert version.returncode == 0 and version.stdout.startswith("dtr 0."), version
    assert not made.exists(), "make ran for a help request"
    proc = subprocess.run([str(root / "dtr"), "render", "x.yaml"], env=env, capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip
    assert proc.returncode == 1 and made.exists(), "any other command still builds first"


def test_the_help_without_an_environment_lists_exactly_the_registered_commands():
    """./dtr --help in a fresh clone prints the `    dtr ...` lines of dtr_cli/cli.py's docstring: each command the
    parser registers has its line, and no line names a command it does not register."""
    listed = {line.split()[1] for line in cli.__doc__.splitlines() if line.startswith("    dtr ")}
    sub = argparse.ArgumentParser().add_subparsers()
    for module in cli.COMMANDS:
        module.add_parser(sub)
    assert listed == set(sub.choices)
