"""`dtr data put --create SIZE` (dtr_client.claims): the claim it makes carries the label that opens a claim to
runs under the operator's default --claims=labelled; an existing claim is used as it is, named when it lacks the
label. The real API server: tests/integration/test_first_day.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from dtr_cli import cli
from dtr_client import claims
from dtr_operator.policy import CLAIM_LABEL, CLAIM_LABEL_VALUE, Policy, claim_refusal
from dtr_operator.spec import parse_run

from support.fake_kube import FakeKube


def test_the_claim_is_labelled_for_runs_as_the_operators_policy_reads_it() -> None:
    pvc = claims.claim_manifest("ml", "my-data", "1Gi")
    assert pvc["metadata"]["labels"] == {CLAIM_LABEL: CLAIM_LABEL_VALUE}
    assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    run = parse_run({"metadata": {"name": "r"}, "spec": {"storage": {"claimName": "my-data"}}})
    assert claim_refusal(run, pvc, Policy()) is None, "the operator's default policy lets a run mount it"
    assert claim_refusal(run, {**pvc, "metadata": {"name": "my-data"}}, Policy()) is not None


def test_ensure_creates_once_then_uses_the_claim_there_naming_a_missing_label() -> None:
    kube = FakeKube("ml")
    said = claims.ensure(kube, "ml", "my-data", "1Gi")
    assert said.startswith("claim my-data created in namespace ml: 1Gi, ReadWriteOnce") and "--claim my-data" in said
    assert kube.stored("PersistentVolumeClaim", "my-data", "ml")["metadata"]["labels"] == {CLAIM_LABEL: "allowed"}
    assert claims.ensure(kube, "ml", "my-data", "5Gi") == "claim my-data exists in namespace ml: the data goes " \
                                                            "into it as it is"  # fmt: skip
    kube.put({"metadata": {"name": "theirs", "namespace": "ml"}, "spec": {}}, kind="PersistentVolumeClaim")
    said = claims.ensure(kube, "ml", "theirs", "1Gi")
    assert f"kubectl label pvc theirs -n ml {CLAIM_LABEL}={CLAIM_LABEL_VALUE}" in said


@pytest.mark.parametrize(("argv", "words"), [
    (["--create", "lots"], "argument --create: must be a size such as 512Mi or 2Gi"),
    (["--create", "0"], "argument --create: must be a size"),
])  # fmt: skip
def test_a_size_that_is_none_is_refused_by_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(["data", "put", *argv, "my-data", str(tmp_path)])
    assert ended.value.code == 2 and words in capsys.readouterr().err


def test_create_with_a_run_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from dtr_cli import data

    monkeypatch.setattr(data, "_kube_and_namespace", lambda args: (FakeKube("ml"), "ml"))
    assert cli.main(["data", "put", "--run", "--create", "1Gi", "wine", str(tmp_path)]) == 2
    assert "--create makes a claim: it goes with --claim or a bare CLAIM, not --run" in capsys.readouterr().err
