"""The admin's MLflow server (docs/tracking.md): --mlflow-tracking-uri / DTR_MLFLOW_TRACKING_URI, checked, and
passed to every worker of the runs the operator creates as MLFLOW_TRACKING_URI (the trainer's chief logs there:
tests/mlflow against a real server)."""

from __future__ import annotations

import argparse

import pytest
from dtr_contract import env, layout
from dtr_operator import settings
from dtr_operator.builders import build_tfjob, children
from dtr_operator.spec import created_pvc_name, parse_run

from support.fake_kube import FakeKube
from support.reconciler import reconciler
from support.runs import make_run

URI = "http://mlflow.team-a.svc:5000"


def parsed(argv: list[str], environ: dict[str, str] | None = None) -> settings.Settings:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return settings.from_args(parser.parse_args(argv), environ or {})


def worker_env(tfjob: dict) -> dict[str, str]:
    (container,) = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_none_by_default():
    assert settings.from_env({}).mlflow_tracking_uri == "" == parsed([]).mlflow_tracking_uri


def test_the_flag_wins_over_the_environment():
    environ = {settings.TRACKING_ENV: "https://mlflow.example.com/team-a/"}
    assert settings.from_env(environ).mlflow_tracking_uri == "https://mlflow.example.com/team-a"
    assert parsed([], environ).mlflow_tracking_uri == "https://mlflow.example.com/team-a"
    assert parsed(["--mlflow-tracking-uri", URI], environ).mlflow_tracking_uri == URI
    assert parsed(["--mlflow-tracking-uri", ""], environ).mlflow_tracking_uri == ""  # turned off by the flag


@pytest.mark.parametrize("bad", ["mlflow:5000", "ftp://host", "http://user:secret@host", "http://host?x=1",
                                 "http://host:99999", "http://", "file:///tmp/mlruns", "databricks"])
def test_what_is_no_servers_uri_is_refused_naming_the_setting(bad):
    with pytest.raises(settings.SettingsError, match=settings.TRACKING_ENV):
        settings.from_env({settings.TRACKING_ENV: bad})
    with pytest.raises(settings.SettingsError, match="--mlflow-tracking-uri"):
        parsed(["--mlflow-tracking-uri", bad])


def test_every_worker_gets_the_uri_and_without_one_nothing():
    run = parse_run(make_run({"workers": 3}, uid="u-1"))
    assert worker_env(build_tfjob(run, tracking_uri=URI))[env.MLFLOW_TRACKING_URI] == URI
    assert env.MLFLOW_TRACKING_URI not in worker_env(build_tfjob(run))
    _, tfjob = children(run, None, URI)
    assert worker_env(tfjob)[env.MLFLOW_TRACKING_URI] == URI


def test_the_reconciler_creates_the_tfjob_with_the_operators_uri():
    kube = FakeKube()
    kube.put(make_run({"workers": 2}, uid="u-1", generation=1, resourceVersion="1"))
    rec, _ = reconciler(kube, tracking_uri=URI)
    rec.reconcile_run(kube.stored("DistTrainingRun", "mnist-cnn"))
    tfjob = kube.stored("TFJob", "mnist-cnn")
    assert tfjob is not None and worker_env(tfjob)[env.MLFLOW_TRACKING_URI] == URI


def test_the_claim_the_trainer_names_in_the_registry_is_the_one_the_operator_creates():
    assert created_pvc_name("run1") == layout.created_claim("run1")
