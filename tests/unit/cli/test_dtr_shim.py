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


def test_a_build_to_come_is_said_with_its_size_and_the_installers_progress_goes_through(tmp_path):
    """The first ./dtr (no .venv yet: make -q says the targets are out of date) says what it builds and how big before
    minutes of installing, and empties PIP_QUIET so that the installer's (uv's) progress shows; an environment already
    built says nothing."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "dtr").write_bytes((REPO / "dtr").read_bytes())
    (root / "dtr").chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "make-calls"
    # make -q TARGET: out of date unless TARGET is in $BUILT; a build: recorded, and it fails (nothing to build here).
    (bin_dir / "make").write_text(
        '#!/bin/sh\ncase " $* " in *" -q "*) for t in $BUILT; do case " $* " in *" $t "*) exit 0;; esac; done; exit 1;;'
        f' esac\necho "$*" >>{calls}\nexit 2\n'
    )  # fmt: skip
    (bin_dir / "make").chmod(0o755)

    def dtr(*args: str, built: str = "") -> subprocess.CompletedProcess[str]:
        calls.unlink(missing_ok=True)
        env = {**clean_env(), "PATH": f"{bin_dir}:/usr/bin:/bin", "BUILT": built}
        env.pop("DTR_TRAINER_PYTHON", None)
        return subprocess.run([str(root / "dtr"), *args], env=env, capture_output=True, text=True, timeout=30,
                              check=False)  # fmt: skip

    first = dtr("run", "x.yaml")
    assert first.returncode == 1 and first.stdout == ""
    said = first.stderr.splitlines()[0]
    assert said.startswith("dtr: building the operator environment (.venv/op: the CLI and the operator, about 0.5 GB)")
    assert "and the trainer environment (.venv/trainer: TensorFlow 2.11, about 2 GB)" in said
    assert "the installer's progress below" in said
    assert calls.read_text().split() == ["-s", "--no-print-directory", "-C", str(root), "PIP_QUIET=", "setup-op",
                                         "setup-trainer"]  # fmt: skip
    # Only the trainer's to build: only it is named.
    trainer_only = dtr("run", "x.yaml", built="setup-op")
    assert "the operator environment" not in trainer_only.stderr and "the trainer environment" in trainer_only.stderr
    # Both built (make -q: up to date): no line, the installer quiet, make still asked (it checks the Pythons).
    quiet = dtr("render", "x.yaml", built="setup-op")
    assert "building" not in quiet.stderr, quiet.stderr
    assert calls.read_text().split() == ["-s", "--no-print-directory", "-C", str(root), "setup-op"]
