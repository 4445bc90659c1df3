"""`dtr submit FILE.py` makes a complete run (dtr_client.complete_run): resources, queue, priority classes and a
base run file under the options, checked as the API server would check them, each refusal naming its field;
through the command line with --dry-run (no cluster: tests/integration/test_submit_complete.py sends them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from dtr_cli import cli
from dtr_client import complete_run, submit
from dtr_client.results import InvalidRun, Progress, RunStatus, run_document

SOURCE = "def build_model(ctx):\n    return None\n\n\ndef load_data(ctx):\n    return None\n"
BASE = {
    "apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun",
    "metadata": {"name": "team-run", "namespace": "ml", "labels": {"team": "a"}, "uid": "u-1",
                 "resourceVersion": "7"},
    "spec": {"workers": 3, "training": {"epochs": 5, "learningRate": 0.01, "code": {"module": "theirs"}},
             "resources": {"limits": {"cpu": "1", "ephemeral-storage": "1Gi"}}, "queueName": "team-q",
             "tolerations": [{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}]},
    "status": {"phase": "Succeeded"},
}  # fmt: skip


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "wine.py"
    path.write_text(SOURCE)
    return path


@pytest.fixture
def base(tmp_path: Path) -> Path:
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return path


def _dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert cli.main(["submit", *argv, "--dry-run"]) == 0, capsys.readouterr().err
    _cm, run = yaml.safe_load_all(capsys.readouterr().out)
    return run


def test_resources_queue_and_priority_classes_go_where_the_spec_names_them(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _dry_run(capsys, str(model), "-n", "ml", "--cpu", "2", "--memory", "4Gi", "--gpus", "1", "--queue",
                   "team-q", "--priority-class", "batch", "--workload-priority-class", "high")  # fmt: skip
    spec = run["spec"]
    assert spec["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"},
                                 "limits": {"cpu": "2", "memory": "4Gi", complete_run.GPU: "1"}}  # fmt: skip
    assert (spec["queueName"], spec["priorityClassName"], spec["workloadPriorityClass"]) == ("team-q", "batch",
                                                                                             "high")  # fmt: skip


def test_a_base_file_gives_the_rest_and_the_options_override_its_fields(
    model: Path, base: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _dry_run(capsys, str(model), "-f", str(base), "--epochs", "7", "--cpu", "2")
    assert run["metadata"] == {"name": "team-run", "namespace": "ml", "labels": {"team": "a"}}, "no uid taken"
    spec = run["spec"]
    assert spec["workers"] == 3 and spec["queueName"] == "team-q" and spec["tolerations"] == BASE["spec"][
        "tolerations"]  # fmt: skip
    assert spec["training"] == {"epochs": 7, "learningRate": 0.01,
                                "code": {"configMap": "team-run-code", "key": "wine.py"}}, "the file's code only"
    assert spec["resources"] == {"limits": {"cpu": "2", "ephemeral-storage": "1Gi"}, "requests": {"cpu": "2"}}
    # --name and -n still win over the base's
    run = _dry_run(capsys, str(model), "-f", str(base), "--name", "mine", "-n", "other")
    assert (run["metadata"]["name"], run["metadata"]["namespace"]) == ("mine", "other")


@pytest.mark.parametrize(("extra", "words"), [
    (["--memory", "4Q"], "argument --memory: must be a quantity above zero"),
    (["--cpu", "-1"], "argument --cpu: must be a quantity above zero"),
    (["--cpu", "0"], "argument --cpu: must be a quantity above zero"),
    (["--gpus", "0"], "argument --gpus: must be >= 1"),
])  # fmt: skip
def test_a_resource_that_is_no_quantity_above_zero_is_refused_by_the_command_line(
    model: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(["submit", str(model), "-n", "ml", "--dry-run", *extra])
    assert ended.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "words"), [
    (["--queue", "Team_Q"], "spec.queueName: must be a LocalQueue name"),
    (["--priority-class", "Not Valid"], "spec.priorityClassName: must be a PriorityClass name"),
    (["--workload-priority-class", "high"], "spec.workloadPriorityClass: needs spec.queueName"),
])  # fmt: skip
def test_a_value_the_api_server_would_refuse_is_bad_input_naming_the_field(
    model: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    assert cli.main(["submit", str(model), "-n", "ml", "--dry-run", *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


@pytest.mark.parametrize(("text", "words"), [
    (None, "No such file or directory"),
    ("a: [", "not valid YAML"),
    ("apiVersion: v1\nkind: ConfigMap\n", "no DistTrainingRun in this file"),
    (yaml.safe_dump(BASE) + "---\n" + yaml.safe_dump(BASE), "a base is one DistTrainingRun; this file has 2"),
    (yaml.safe_dump({**BASE, "spec": {"workers": "many"}}), "spec.workers"),
])  # fmt: skip
def test_a_base_file_that_cannot_be_used_is_one_line_naming_it(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None, words: str
) -> None:
    path = tmp_path / "b.yaml"
    if text is not None:
        path.write_text(text)
    assert cli.main(["submit", str(model), "-f", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err


def test_the_client_takes_the_same_options(model: Path, base: Path) -> None:
    doc, code = run_document(model, None, {"base": str(base), "memory": "2Gi", "queue": "q2"})
    assert code is not None and doc["spec"]["queueName"] == "q2" and doc["metadata"]["name"] == "team-run"
    assert doc["spec"]["resources"]["requests"] == {"memory": "2Gi"}
    with pytest.raises(InvalidRun, match=r"spec\.resources\.limits\.memory"):
        run_document(model, None, {"memory": "lots"})


def test_merging_replaces_lists_and_values_and_merges_mappings() -> None:
    doc = submit.code_run_doc("r", None, "m.py", {"epochs": 2})
    got = complete_run.complete(doc, {"spec": {"tolerations": [1, 2], "training": {"epochs": 9, "seed": 3}}},
                                {"gpus": 2})  # fmt: skip
    assert got["spec"]["tolerations"] == [1, 2] and got["spec"]["training"]["epochs"] == 2
    assert got["spec"]["training"]["seed"] == 3 and got["spec"]["resources"] == {"limits": {complete_run.GPU: "2"}}


# ---- --wait: the run watched to its end ---------------------------------------------------------


class _Runs:
    """A backend whose run goes Running (epoch 1, then 2) and then ends as `end` says."""

    poll_seconds = 0.0

    def __init__(self, end: dict[str, Any]) -> None:
        self.end, self.reads = end, 0

    def create(self, doc: Any, code: Any) -> str:
        return str(doc["metadata"]["name"])

    def get(self, name: str) -> RunStatus:
        self.reads += 1
        return RunStatus.from_status(name, self.end if self.reads > 2 else {"phase": "Running"})

    def epochs(self, name: str, now: RunStatus) -> list[Progress]:
        return [Progress(e, 2, {"loss": 0.5 / e}, None, 10 * (2 - e)) for e in range(1, min(self.reads, 2) + 1)]


@pytest.mark.parametrize(("end", "code", "last"), [
    ({"phase": "Succeeded", "message": "accuracy 0.97"}, 0, "wine: Succeeded: accuracy 0.97"),
    ({"phase": "Failed", "reason": "UserCodeError", "message": "wine.py:3"}, 1,
     "dtr submit: DistTrainingRun wine failed: UserCodeError: wine.py:3"),
])  # fmt: skip
def test_wait_prints_each_epoch_then_the_end_and_exits_by_it(
    model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, end: dict[str, Any],
    code: int, last: str,
) -> None:
    from dtr_cli import submit as submit_command
    from dtr_client import TrainingClient

    monkeypatch.setattr(submit_command, "client_for", lambda args: TrainingClient(_Runs(end)))
    assert cli.main(["submit", str(model), "-n", "ml", "--wait"]) == code
    out, err = capsys.readouterr()
    assert "wine: epoch 1/2 loss=0.5, about 10 s left\nwine: epoch 2/2 loss=0.25, about 0 s left\n" in out
    assert last in (out + err)
