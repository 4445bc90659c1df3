"""dtr_client: the run documents it makes, the statuses it returns and raises, wait and progress over a backend,
the local backend's pure parts, `dtr run`'s status file, and the CLI through the client (no cluster, no TF)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from dtr_cli import cli
from dtr_client import InvalidRun, Progress, RunFailed, RunStatus, TrainingClient, submit
from dtr_client.cluster import ClusterBackend
from dtr_client.local import backend as local_backend
from dtr_client.local import runner, source
from dtr_client.local.console import Console
from dtr_client.results import new_epochs, outcome, run_document
from dtr_contract.progress import epoch_end_line, trainer_line
from dtr_operator import kube
from dtr_operator.api import JOB_NAME_LABEL

from support.fake_kube import FakeKube
from support.runs import run_doc

SOURCE = "def build_model(ctx):\n    return None\n\n\ndef load_data(ctx):\n    return None\n"
DOC = run_doc("digits", spec={"workers": 2, "training": {"dataset": "digits", "epochs": 3}})


def chief_line(epoch: int, epochs: int, loss: float) -> str:
    return "[worker-0] " + trainer_line("worker-0", epoch_end_line(epoch, epochs, {"loss": loss}, 100.0, 5))


# ---- run documents ----------------------------------------------------------------------------


def test_a_dict_needs_no_api_version_and_kind_and_may_be_renamed() -> None:
    doc, code = run_document({"metadata": {"name": "a"}, "spec": {"workers": 3}}, "b", {})
    assert (doc["apiVersion"], doc["kind"], doc["metadata"]["name"], code) == (DOC["apiVersion"], DOC["kind"], "b",
                                                                               None)  # fmt: skip


def test_a_yaml_file_with_one_run_is_read_and_two_are_refused(tmp_path: Path) -> None:
    one = tmp_path / "one.yaml"
    one.write_text(json.dumps(DOC))
    assert run_document(one, None, {})[0] == DOC
    two = tmp_path / "two.yaml"
    two.write_text(json.dumps(DOC) + "\n---\n" + json.dumps(DOC))
    with pytest.raises(InvalidRun, match="takes one DistTrainingRun; this file has 2"):
        run_document(two, None, {})


def test_a_model_file_makes_the_run_dtr_submit_sends(tmp_path: Path) -> None:
    path = tmp_path / "wine_v2.py"
    path.write_text(SOURCE)
    doc, code = run_document(str(path), None, {"workers": 2, "epochs": 4, "claim": "data"})
    assert code == submit.CodeFile("wine_v2.py", SOURCE.encode())
    assert doc == submit.code_run_doc("wine-v2", None, "wine_v2.py", {"workers": 2, "epochs": 4},
                                      {"storage.claimName": "data"})  # fmt: skip


@pytest.mark.parametrize(("run", "options", "words"), [
    ({"metadata": {"name": "a"}}, {"epochs": 2}, "epochs: training options go with a model file"),
    ({"metadata": {"name": "a"}, "spec": {"workers": 0}}, {}, "DistTrainingRun a: spec.workers"),
    ({"metadata": {"name": "A"}}, {}, "DistTrainingRun A:"),
    ({"kind": "TFJob", "metadata": {"name": "a"}}, {}, "not a DistTrainingRun"),
    ("missing.yaml", {}, "missing.yaml: No such file"),
])  # fmt: skip
def test_what_the_api_server_would_refuse_is_invalid_run(run: Any, options: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidRun, match=words):
        run_document(run, None, options)


def test_an_option_a_model_file_does_not_take_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    with pytest.raises(InvalidRun, match="epoch: not an option of a model file"):
        run_document(path, None, {"epoch": 2})


# ---- statuses ---------------------------------------------------------------------------------

SUCCEEDED = {
    "phase": "Succeeded", "reason": "TrainingSucceeded", "message": "accuracy 0.98", "metrics": {"accuracy": 0.98},
    "headline": "accuracy=0.9800",
    "model": {"path": "/mnt/dtr/models/d/1", "claim": "d-data", "version": 1, "storageUri": "pvc://d-data/models/d"},
    "progress": {"epoch": 3, "epochs": 3, "metrics": [{"name": "loss", "value": "0.1000"}],
                 "examplesPerSecond": 50.5, "estimatedRemainingSeconds": 0},
}  # fmt: skip


def test_a_status_is_read_into_its_typed_fields() -> None:
    st = RunStatus.from_status("d", SUCCEEDED, "/v/d-data/models/d/1")
    assert (st.phase, st.metrics, st.headline, st.model_path, st.model_uri, st.local_model_path) == (
        "Succeeded", {"accuracy": 0.98}, "accuracy=0.9800", "/mnt/dtr/models/d/1", "pvc://d-data/models/d",
        "/v/d-data/models/d/1")  # fmt: skip
    assert st.progress == Progress(3, 3, {"loss": 0.1}, 50.5, 0) and st.done
    assert RunStatus.from_status("d", {}).phase == "Pending"


def test_outcome_waits_returns_success_and_raises_the_failure_with_its_reason() -> None:
    assert outcome(RunStatus.from_status("d", {"phase": "Running"})) is None
    assert outcome(RunStatus.from_status("d", {"phase": "Suspended"})) is None
    assert outcome(RunStatus.from_status("d", SUCCEEDED)).phase == "Succeeded"
    failed = RunStatus.from_status("d", {"phase": "Failed", "reason": "UserCodeError", "message": "line 3: boom"})
    with pytest.raises(RunFailed, match="d failed: UserCodeError: line 3: boom") as raised:
        outcome(failed)
    assert (raised.value.reason, raised.value.message, raised.value.status) == ("UserCodeError", "line 3: boom", failed)


def test_each_epoch_is_given_once_in_order() -> None:
    found = [Progress(1, 3), Progress(2, 3), Progress(1, 3), Progress(2, 3), Progress(3, 3)]  # a restarted chief
    assert [p.epoch for p in new_epochs(0, found)] == [1, 2, 3]
    assert [p.epoch for p in new_epochs(2, found)] == [3]


# ---- wait and progress over a backend ---------------------------------------------------------


class ScriptedBackend:
    """A backend whose run goes through the given statuses, one per get()."""

    poll_seconds = 0.0

    def __init__(self, statuses: list[dict[str, Any]]):
        self.statuses = statuses
        self.calls = 0

    def get(self, name: str) -> RunStatus:
        self.calls += 1
        return RunStatus.from_status(name, self.statuses[min(self.calls - 1, len(self.statuses) - 1)])

    def epochs(self, name: str, now: RunStatus) -> list[Progress]:
        return [] if now.progress is None else [now.progress]


def _running(epoch: int) -> dict[str, Any]:
    return {"phase": "Running", "progress": {"epoch": epoch, "epochs": 3, "metrics": []}}


def test_wait_returns_the_final_status_or_raises_the_failure() -> None:
    client = TrainingClient(ScriptedBackend([{"phase": "Pending"}, _running(1), SUCCEEDED]))
    assert client.wait("d").model_uri == "pvc://d-data/models/d"
    failing = TrainingClient(ScriptedBackend([_running(1), {"phase": "Failed", "reason": "NaN", "message": "m"}]))
    with pytest.raises(RunFailed, match="NaN: m"):
        failing.wait("d")


def test_wait_gives_up_at_its_timeout_naming_the_phase() -> None:
    with pytest.raises(TimeoutError, match="d has not finished within 0s: Running"):
        TrainingClient(ScriptedBackend([_running(1)])).wait("d", timeout=0)


def test_progress_gives_each_epoch_the_status_showed_and_ends_with_the_run() -> None:
    backend = ScriptedBackend([{"phase": "Pending"}, _running(1), _running(1), _running(2), SUCCEEDED])
    assert [p.epoch for p in TrainingClient(backend).progress("d")] == [1, 2, 3]


class SpecBackend(ScriptedBackend):
    def __init__(self, spec: dict[str, Any]):
        super().__init__([])
        self.given = spec

    def spec(self, name: str) -> dict[str, Any]:
        return self.given


def test_params_are_the_runs_spec_training_params_or_none() -> None:
    params = {"width": 64, "deep": True}
    assert TrainingClient(SpecBackend({"training": {"params": params}})).params("d") == params
    assert TrainingClient(SpecBackend({"training": {"epochs": 3}})).params("d") == {}
    assert TrainingClient(SpecBackend({})).params("d") == {}


# ---- the local backend ------------------------------------------------------------------------


def test_the_local_status_is_what_dtr_run_wrote_unless_it_ended_without_one() -> None:
    assert local_backend.local_status({}, None, "")["reason"] == local_backend.STARTING
    assert local_backend.local_status({"phase": "Running"}, None, "x") == {"phase": "Running"}
    ended = local_backend.local_status({"phase": "Running"}, 2, "dtr run: x.yaml: spec.workers: must be >= 1")
    assert ended["phase"] == "Failed" and ended["reason"] == local_backend.ENDED
    assert ended["message"] == "dtr run exited with code 2: dtr run: x.yaml: spec.workers: must be >= 1"
    for final in ({"phase": "Succeeded"}, {"phase": "Suspended"}):
        assert local_backend.local_status(final, 130, "x") == final


def test_every_epoch_of_the_chief_is_read_from_the_console() -> None:
    lines = [chief_line(1, 3, 0.5), "[worker-1] " + trainer_line("worker-1", epoch_end_line(1, 3, {}, 1.0, 1)),
             "[dtr] epoch 1/3 done (3s)", chief_line(2, 3, 0.25)]  # fmt: skip
    found = local_backend.chief_epochs(lines, "2026-12-01T00:00:00Z")
    assert found == [Progress(1, 3, {"loss": 0.5}, 100.0, 5), Progress(2, 3, {"loss": 0.25}, 100.0, 5)]


def test_the_logs_are_the_workers_lines_of_one_worker_and_the_last_n() -> None:
    lines = ["[dtr] run d", "[worker-0] a", "[worker-1] b", "[worker-0] c", "[worker-10] d"]
    assert local_backend.worker_lines(lines, None, None) == lines[1:]
    assert local_backend.worker_lines(lines, 0, None) == ["[worker-0] a", "[worker-0] c"]
    assert local_backend.worker_lines(lines, None, 2) == ["[worker-0] c", "[worker-10] d"]


def test_a_local_model_is_found_in_its_claims_directory() -> None:
    model = {"path": "/mnt/dtr/models/d/1", "claim": "d-data"}
    assert local_backend.model_on_disk(Path("/v"), model) == "/v/d-data/models/d/1"
    assert local_backend.model_on_disk(Path("/v"), {"path": "/elsewhere", "claim": "d-data"}) is None


def test_dtr_run_writes_its_status_with_the_chiefs_epoch_and_a_suspension(tmp_path: Path) -> None:
    run = source.admit(DOC, "d.yaml")
    local = runner.LocalRun(run, tmp_path, "/usr/bin/python3", Console(io.StringIO()))
    local.run_dir.mkdir(parents=True)
    local.console.replica_line("worker-0", chief_line(2, 3, 0.25).removeprefix("[worker-0] "))
    local.record("Running", "TFJobRunning", "running")
    written = json.loads(local.status_path.read_text())
    assert written["phase"] == "Running" and written["progress"]["epochsDone"] == "2/3"
    assert written["progress"]["metrics"] == [{"name": "loss", "value": "0.2500"}]
    local.suspended = local.interrupted = True
    local.record(*local.ended(1.0))
    written = json.loads(local.status_path.read_text())
    assert (written["phase"], written["reason"]) == ("Suspended", "RunSuspended")
    assert "the last finished epoch was 2/3" in written["message"]
    assert written["progress"]["epochsDone"] == "2/3"


# ---- the CLI through the client ---------------------------------------------------------------


def test_dtr_submit_creates_through_the_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    fake = FakeKube()
    monkeypatch.setattr(kube.Kube, "for_cli", classmethod(lambda cls: fake))
    path = tmp_path / "wine.py"
    path.write_text(SOURCE)
    assert cli.main(["submit", str(path), "-n", "ml", "--workers", "3", "--claim", "data"]) == 0
    created = [args["manifest"] for args in fake.succeeded("create")]
    assert [m["kind"] for m in created] == ["ConfigMap", "DistTrainingRun"]
    run = created[1]
    assert run["metadata"] == {"name": "wine", "namespace": "ml"}
    assert run["spec"]["workers"] == 3 and run["spec"]["storage"] == {"claimName": "data"}
    assert "disttrainingrun wine created in namespace ml" in capsys.readouterr().out


def test_a_run_of_another_namespace_is_refused_by_the_cluster_backend() -> None:
    fake = FakeKube()
    backend = ClusterBackend(fake, "ml")
    with pytest.raises(InvalidRun, match="names namespace other; this client works in ml"):
        backend.create({**DOC, "metadata": {"name": "d", "namespace": "other"}}, None)
    assert fake.calls == []


def one_worker_run() -> FakeKube:
    """Run r with one worker that has logged two lines."""
    fake = FakeKube()
    fake.put(run_doc("r", "ml"))
    labels = {JOB_NAME_LABEL: "r", "training.kubeflow.org/replica-index": "0"}
    fake.put({"metadata": {"name": "r-worker-0", "labels": labels}}, "Pod")
    fake.set_log("r-worker-0", "2026-12-01T10:00:00Z hello\n2026-12-01T10:00:01Z bye\n")
    return fake


def test_dtr_logs_prints_the_lines_the_client_gives(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setattr(kube.Kube, "for_cli", classmethod(lambda cls: one_worker_run()))
    assert cli.main(["logs", "r", "-n", "ml"]) == 0
    assert capsys.readouterr().out == "[worker-0] hello\n[worker-0] bye\n"
    assert list(TrainingClient(ClusterBackend(one_worker_run(), "ml")).logs("r")) == ["[worker-0] hello",
                                                                                      "[worker-0] bye"]  # fmt: skip


def test_followed_lines_come_as_written_and_a_worker_not_followed_fails_at_the_end() -> None:
    from dtr_client.cluster import _followed
    from dtr_client.logs import LogsError

    def follow(out: Any) -> bool:
        out.write("[worker-0] a\n")
        out.write("[worker-1] b\n")
        return False

    lines = _followed(follow)
    assert [next(lines), next(lines)] == ["[worker-0] a", "[worker-1] b"]
    with pytest.raises(LogsError, match="could not be followed"):
        next(lines)


def test_auto_is_the_cluster_with_credentials_else_local(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(kube.Kube, "for_cli", classmethod(lambda cls: FakeKube()))
    assert isinstance(TrainingClient(namespace="ml").backend, ClusterBackend)

    def refuse(cls: Any) -> Any:
        raise kube.NoCredentials("no Kubernetes credentials")

    monkeypatch.setattr(kube.Kube, "for_cli", classmethod(refuse))
    assert isinstance(TrainingClient(local_dir=tmp_path).backend, local_backend.LocalBackend)
    with pytest.raises(kube.NoCredentials):
        TrainingClient("cluster")
    with pytest.raises(ValueError, match="one of 'auto', 'cluster', 'local'"):
        TrainingClient("kind")
