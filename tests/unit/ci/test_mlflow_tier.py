"""The mlflow tier's server (support.mlflow_server): skipped loudly without its environment, failed instead under
DTR_MLFLOW_REQUIRED=1, as `make test-mlflow` and CI run it; and `make test` runs it."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from support import mlflow_server
from support.repo import REPO


def test_without_its_environment_the_tier_is_skipped_saying_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(mlflow_server, "MLFLOW", tmp_path / "no-mlflow")
    monkeypatch.delenv("DTR_MLFLOW_REQUIRED", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"NO MLFLOW SERVER.*make setup-mlflow"):
        mlflow_server.require()
    assert "NO MLFLOW SERVER" in capsys.readouterr().out


def test_under_dtr_mlflow_required_it_fails_instead(tmp_path, monkeypatch):
    monkeypatch.setattr(mlflow_server, "MLFLOW", tmp_path / "no-mlflow")
    monkeypatch.setenv("DTR_MLFLOW_REQUIRED", "1")
    with pytest.raises(pytest.fail.Exception, match="NO MLFLOW SERVER"):
        mlflow_server.require()


def test_make_test_mlflow_requires_the_server_and_make_test_runs_it():
    makefile = (REPO / "Makefile").read_text()
    assert "DTR_MLFLOW_REQUIRED=1 $(TR)/pytest -q -rs tests/mlflow" in makefile
    assert "\nmlflow==2.17.2\n" in (REPO / "tests" / "mlflow" / "requirements.txt").read_text()
    spec = importlib.util.spec_from_file_location("dtr_tiers_mlflow", REPO / "tests" / "tiers.py")
    assert spec and spec.loader
    tiers = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, tiers)  # its dataclasses look their module up
    spec.loader.exec_module(tiers)
    steps = {s.name: s for s in tiers.STEPS}
    assert steps["mlflow"].argv[-1] == "test-mlflow" and "mlflow setup" in steps["mlflow"].after
    assert steps["mlflow setup"].argv[-1] == "setup-mlflow"
