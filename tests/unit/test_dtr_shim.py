"""./dtr, the one way to run dtr: through a symlink, from any directory."""

from __future__ import annotations

import subprocess

import yaml

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
