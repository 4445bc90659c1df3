"""trainer/requirements.txt is complete on every platform it is meant for (docs/images.md#platforms).

For linux x86_64 and linux aarch64, pip resolves the file as `pip install -r` in a fresh Python 3.9
venv would (a dry run with --report, nothing installed) and every distribution it would install must
be a line of the file, at that version. This needs the package index (PyPI, or the index pip is
configured with): without it the test fails, it does not skip.

`pip --platform` alone is not enough: it picks wheels for the target platform, but evaluates
environment markers for the machine pip runs on. On x86_64, tensorflow 2.11.0's aarch64 wheel then
drops its one dependency (`tensorflow-cpu-aws; ... platform_machine == "aarch64"`) and the check
passes with an incomplete list. So pip runs with platform.machine() returning the target's value,
and the report's environment is checked to say so.

The index here serves no separate wheel metadata (PEP 658), so pip downloads whole wheels to a
temporary directory (683 MB for x86_64, TensorFlow alone is 588 MB; 315 MB for aarch64) and
deletes them. PyPI serves the metadata on its own, so from there pip should fetch only that.
So pip's report is kept in DTR_CACHE/pinned-list/, keyed by the SHA-256 of everything that decides
it (the file, the target, this Python and pip, the command): pip runs again only when one of those
changes, or with DTR_PINNED_LIST_FRESH=1. The assertions read the report either way.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version as installed_version
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "trainer" / "requirements.txt"
NAME = "trainer/requirements.txt"
CACHE = Path(os.environ.get("DTR_CACHE") or Path.home() / ".cache" / "dtr") / "pinned-list"

# The oldest glibc the image is built on: the python:3.9-slim stand-in is Debian bullseye (2.31).
GLIBC_MINOR = 31
PLATFORMS = {
    "x86_64": [*(f"manylinux_2_{m}_x86_64" for m in range(GLIBC_MINOR, 16, -1)), "manylinux2014_x86_64",
               "manylinux_2_12_x86_64", "manylinux2010_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64"],
    "aarch64": [*(f"manylinux_2_{m}_aarch64" for m in range(GLIBC_MINOR, 16, -1)), "manylinux2014_aarch64"],
}

# pip with platform.machine() answering for the target; markers are evaluated with it.
PIP_AS = "import platform, sys; m = sys.argv.pop(1); platform.machine = lambda: m; " \
         "from pip._internal.cli.main import main; sys.exit(main())"

# `python -m venv` on 3.9 brings setuptools, which meets every setuptools requirement below (checked),
# so pip does not fetch it; the Dockerfile's venv is made the same way.
FROM_THE_VENV = {"setuptools"}


def pinned_lines() -> list[Requirement]:
    reqs = []
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            assert len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==", f"not a pin: {line}"
            reqs.append(req)
    return reqs


def pins_for(machine: str) -> dict[str, str]:
    env = {**default_environment(), "platform_machine": machine, "platform_system": "Linux", "sys_platform": "linux"}
    return {canonicalize_name(r.name): next(iter(r.specifier)).version
            for r in pinned_lines() if r.marker is None or r.marker.evaluate(env)}


def resolve(machine: str, tmp_path: Path) -> dict:
    """pip's installation report for trainer/requirements.txt on linux/<machine>, CPython of this interpreter,
    from the cache when nothing that decides it has changed."""
    report = tmp_path / f"report-{machine}.json"
    cmd = pip_command(machine, tmp_path, report)
    key = hashlib.sha256(json.dumps([REQUIREMENTS.read_text(), installed_version("pip"), sys.version,
                                     [str(a).replace(str(tmp_path), "TMP") for a in cmd[1:]]]).encode())
    cached = CACHE / f"{machine}-{key.hexdigest()[:16]}.json"
    if cached.exists() and os.environ.get("DTR_PINNED_LIST_FRESH") != "1":
        return json.loads(cached.read_text())
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, (
        f"pip could not resolve {NAME} for linux/{machine} (exit {proc.returncode}). This test needs "
        f"the package index (PyPI or pip's configured index); 'from versions: none' on the first pin means it was "
        f"not reachable. pip said:\n{proc.stderr[-3000:]}")
    CACHE.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(report, cached)
    return json.loads(report.read_text())


def pip_command(machine: str, tmp_path: Path, report: Path) -> list[str]:
    return [sys.executable, "-c", PIP_AS, machine, "install", "--dry-run", "--ignore-installed",
            "--target", str(tmp_path / "target"), "--report", str(report), "--quiet",
            "--no-cache-dir", "--disable-pip-version-check", "--retries", "1", "--timeout", "30",
            "--only-binary=:all:", *(f"--platform={p}" for p in PLATFORMS[machine]),
            "--implementation", "cp", "--python-version", ".".join(map(str, sys.version_info[:3])),
            "--abi", f"cp{sys.version_info[0]}{sys.version_info[1]}", "-r", str(REQUIREMENTS)]


def test_runs_on_the_trainers_python() -> None:
    assert sys.version_info[:2] == (3, 9), sys.version  # the image's Python: python:3.9-slim


@pytest.mark.parametrize("machine", sorted(PLATFORMS))
def test_pip_installs_nothing_but_the_pinned_list(machine: str, tmp_path: Path) -> None:
    report = resolve(machine, tmp_path)
    assert report["environment"]["platform_machine"] == machine, "markers were not evaluated for the target"
    would = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
    pinned = pins_for(machine)
    unpinned = {n: v for n, v in would.items() if pinned.get(n) != v and n not in FROM_THE_VENV}
    assert not unpinned, f"linux/{machine}: pip would install these, not at a version of {NAME}: {unpinned}"
    assert set(pinned) <= set(would), f"linux/{machine}: pinned but not resolved: {set(pinned) - set(would)}"
    # What the venv brings must meet what the pinned packages ask of it (else pip fetches a newer one).
    env = {**report["environment"], "extra": ""}
    for item in report["install"]:
        for text in item["metadata"].get("requires_dist") or []:
            req = Requirement(text)
            if canonicalize_name(req.name) in FROM_THE_VENV and (req.marker is None or req.marker.evaluate(env)):
                have = Version(installed_version(req.name))
                assert have in req.specifier, f"{item['metadata']['name']} needs {text}; the venv has {have}"


def test_every_platform_specific_pin_applies_somewhere() -> None:
    """A marker that no tested platform matches is a pin nothing checks."""
    everywhere = set.intersection(*(set(pins_for(m)) for m in PLATFORMS))
    somewhere = set.union(*(set(pins_for(m)) for m in PLATFORMS))
    all_names = {canonicalize_name(r.name) for r in pinned_lines()}
    assert all_names == somewhere, f"pins no tested platform installs: {all_names - somewhere}"
    assert somewhere - everywhere == {"tensorflow-cpu-aws"}  # the one per-platform pin, linux/arm64 only
