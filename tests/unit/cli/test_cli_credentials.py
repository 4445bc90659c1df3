"""Which credentials dtr's commands use: the user's kubeconfig before a pod's service account, as kubectl
(kube.py cli_kubeconfig, Kube.for_cli; security review L7). The operator keeps its own order
(Kube.from_environment: the service account first)."""

from __future__ import annotations

import os

import pytest
from dtr_cli.cli import main
from dtr_operator import kube


@pytest.mark.parametrize("env, default_exists, want", [
    ({"KUBECONFIG": "/home/me/team-a.yaml"}, True, "/home/me/team-a.yaml"),
    ({"KUBECONFIG": "/a:/b"}, False, "/a:/b"),
    ({"KUBECONFIG": ""}, True, kube.DEFAULT_KUBECONFIG),
    ({}, True, kube.DEFAULT_KUBECONFIG),
    ({}, False, None),
])  # fmt: skip
def test_the_users_kubeconfig_comes_before_the_pods_service_account(env, default_exists, want):
    assert kube.cli_kubeconfig(env, default_exists) == want


@pytest.fixture
def loaders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records which of the client's loaders for_cli calls; the kubeconfig loader fails for a missing file."""
    calls: list[str] = []

    def incluster(client_configuration):
        calls.append("service account")

    def kubeconfig(config_file, client_configuration):
        calls.append(f"kubeconfig {config_file}")
        if not os.path.exists(config_file):
            raise kube.config.ConfigException(f"{config_file} does not exist")

    monkeypatch.setattr(kube.config, "load_incluster_config", incluster)
    monkeypatch.setattr(kube.config, "load_kube_config", kubeconfig)
    monkeypatch.setenv("HOME", "/nonexistent-home")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return calls


def test_in_a_pod_with_a_kubeconfig_the_kubeconfig_wins(loaders, monkeypatch, tmp_path):
    mine = tmp_path / "config"
    mine.write_text("{}")
    monkeypatch.setenv("KUBECONFIG", str(mine))
    kube.Kube.for_cli()
    assert loaders == [f"kubeconfig {mine}"]


def test_without_a_kubeconfig_the_pods_service_account(loaders):
    kube.Kube.for_cli()
    assert loaders == ["service account"]


def test_a_kubeconfig_that_cannot_be_used_is_an_error_not_the_service_account(loaders, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/config")
    with pytest.raises(kube.NoCredentials, match="the kubeconfig \\(/nonexistent/config\\) cannot be used"):
        kube.Kube.for_cli()
    assert loaders == ["kubeconfig /nonexistent/config"]


def test_dtr_kubeconfig_sets_what_every_command_reads(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("KUBECONFIG", "/elsewhere")
    run = tmp_path / "run.yaml"
    run.write_text("apiVersion: distml.dev/v1alpha1\nkind: DistTrainingRun\nmetadata: {name: r}\nspec: {}\n")
    main(["--kubeconfig", str(tmp_path / "team-a.yaml"), "render", str(run)])
    assert os.environ["KUBECONFIG"] == str(tmp_path / "team-a.yaml")
