"""A run's curves: the history file's writer and reader (dtr_contract.history), the client's history() on both
backends, the plot, `dtr compare`'s diff, and `dtr plot`/`dtr compare` through the client (no cluster, no TF)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from dtr_cli import cli
from dtr_client import Progress, RunStatus, TrainingClient
from dtr_client.cluster import ClusterBackend
from dtr_client.curves import compare_lines, flatten, history_of, spec_differences
from dtr_client.local import runner
from dtr_client.local.backend import LocalBackend
from dtr_client.plots import plot_histories
from dtr_contract import history, layout
from dtr_contract.history import history_line, read_history
from dtr_contract.progress import epoch_end_line, trainer_line
from dtr_operator import kube
from dtr_operator.api import JOB_NAME_LABEL
from dtr_operator.spec import created_pvc_name

from support.fake_kube import CLUSTER_TRAINER_IMAGE, operator_deployment
from support.local_exec import VolumeKube
from support.runs import UNIT_NAMESPACE as NS
from support.runs import run_doc


def line(epoch: int, epochs: int = 3, **metrics: float) -> str:
    return history_line(epoch, epochs, metrics or {"loss": 1.0 / epoch}, 2.5, 100.0, "2026-12-01T17:00:00Z")


# ---- the history file -------------------------------------------------------------------------


def test_a_line_reads_back_as_written_and_a_non_finite_figure_is_left_out() -> None:
    text = history_line(2, 5, {"loss": float("nan"), "accuracy": 0.5, "val_loss": float("inf")}, 3.25, 88.5,
                        "2026-12-01T17:00:00Z")  # fmt: skip
    assert json.loads(text)["metrics"] == {"accuracy": 0.5, "loss": None, "val_loss": None}
    (epoch,) = read_history(text + "\n")
    assert epoch == history.Epoch(2, 5, {"accuracy": 0.5}, 3.25, 88.5, "2026-12-01T17:00:00Z")


def test_a_torn_last_line_and_lines_that_are_no_entry_are_skipped() -> None:
    torn = line(3)[:20]
    junk = ["", "not json", "[1, 2]", '{"epoch": 0, "epochs": 3}', '{"epoch": 4, "epochs": 3}',
            '{"epoch": true, "epochs": 3}', '{"epoch": 1.0, "epochs": 3}', '{"epochs": 3}']
    text = "\n".join([line(1), *junk, line(2), torn])
    assert [e.epoch for e in read_history(text)] == [1, 2]


def test_a_resumed_run_repeats_epochs_and_the_last_line_of_each_wins() -> None:
    text = "\n".join([line(1, loss=0.9), line(2, loss=0.8), line(3, loss=0.7), line(2, loss=0.5), line(3, loss=0.4)])
    assert [(e.epoch, e.metrics["loss"]) for e in read_history(text)] == [(1, 0.9), (2, 0.5), (3, 0.4)]


def test_the_reader_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    long = json.dumps({"epoch": 1, "epochs": 3, "metrics": {"loss": 1.0}, "pad": "x" * history.MAX_LINE})
    assert read_history(long) == []
    many = {f"m{i:03d}": float(i) for i in range(history.MAX_METRICS + 10)}
    (entry,) = read_history(line(1, **many))
    assert len(entry.metrics) == history.MAX_METRICS
    monkeypatch.setattr(history, "MAX_EPOCHS", 2)
    text = "\n".join(line(e, 5) for e in (1, 2, 3, 2))
    assert [(e.epoch) for e in read_history(text)] == [1, 2]  # epoch 3 came after the bound; 2 was known


def test_the_history_file_is_beside_the_workers_logs() -> None:
    assert layout.history_file(layout.logs_dir("r")) == "/mnt/dtr/logs/r/history.jsonl"


# ---- history() on the local backend -------------------------------------------------------------


def local_run(base: Path, name: str, lines: list[str], claim: str | None = None, spec: dict | None = None) -> None:
    """A run as the local backend leaves it: its status, what was submitted, the history on its volume."""
    run_dir = base / "runs" / name
    (run_dir / "submitted").mkdir(parents=True)
    (run_dir / runner.STATUS_FILE).write_text(json.dumps({"phase": "Succeeded", "metrics": {"loss": 0.1}}))
    doc = run_doc(name, spec=spec if spec is not None else {"training": {"epochs": 3}})
    (run_dir / "submitted" / "run.yaml").write_text(json.dumps(doc))
    logs = base / "volumes" / (claim or created_pvc_name(name)) / "logs" / name
    logs.mkdir(parents=True)
    (logs / "history.jsonl").write_text("".join(f"{ln}\n" for ln in lines))


def test_local_history_is_every_epoch_of_the_file_on_the_runs_volume(tmp_path: Path) -> None:
    local_run(tmp_path, "a", [line(1), line(2), line(1, loss=0.3), line(2, loss=0.2), line(3, loss=0.1)])
    local_run(tmp_path, "b", [line(1)], claim="data", spec={"storage": {"claimName": "data"}})
    client = TrainingClient(LocalBackend(tmp_path))
    found = client.history("a")
    assert [(p.epoch, p.metrics) for p in found] == [(1, {"loss": 0.3}), (2, {"loss": 0.2}), (3, {"loss": 0.1})]
    assert found[0] == Progress(1, 3, {"loss": 0.3}, 100.0, None, 2.5, "2026-12-01T17:00:00Z")
    assert [p.epoch for p in client.history("b")] == [1]


def test_without_a_history_file_the_local_backend_reads_the_chiefs_lines(tmp_path: Path) -> None:
    local_run(tmp_path, "a", [])
    chief = "[worker-0] " + trainer_line("worker-0", epoch_end_line(1, 3, {"loss": 0.5}, 10.0, 4))
    (tmp_path / "runs" / "a" / "console.log").write_text(f"[dtr] starting\n{chief}\n")
    assert [(p.epoch, p.metrics) for p in TrainingClient(LocalBackend(tmp_path)).history("a")] == [(1, {"loss": 0.5})]


# ---- history() on the cluster backend -------------------------------------------------------------


def history_api(volume: Path, chief_log: str = "") -> VolumeKube:
    """Run r on claim c (the stand-in volume, where history's own program runs), its chief and the chief's log."""
    fake = VolumeKube(volume, NS)
    fake.put(operator_deployment(NS))
    fake.put(run_doc("r", NS, {"storage": {"claimName": "c"}}))
    labels = {JOB_NAME_LABEL: "r", "training.kubeflow.org/replica-index": "0"}
    fake.put({"metadata": {"name": "r-worker-0", "labels": labels}}, "Pod")
    fake.set_log("r-worker-0", chief_log)
    return fake


def test_cluster_history_is_read_from_the_volume_by_a_read_only_pod_that_is_deleted(tmp_path: Path) -> None:
    fake = history_api(tmp_path)
    (tmp_path / "logs" / "r").mkdir(parents=True)
    (tmp_path / "logs" / "r" / "history.jsonl").write_text(f"{line(1)}\n{line(2)}\n")
    found = TrainingClient(ClusterBackend(fake, NS)).history("r")
    assert [p.epoch for p in found] == [1, 2]
    (pod,) = fake.created
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "c", "readOnly": True}
    assert pod["spec"]["containers"][0]["image"] == CLUSTER_TRAINER_IMAGE  # the cluster's, not this machine's
    assert fake.deleted == [pod["metadata"]["name"]]

    async def in_a_notebook() -> list[Progress]:  # a kernel's event loop runs in the caller's thread
        return TrainingClient(ClusterBackend(fake, NS)).history("r")

    assert [p.epoch for p in asyncio.run(in_a_notebook())] == [1, 2]


def test_cluster_history_falls_back_to_the_chiefs_log_without_a_file_or_a_volume(tmp_path: Path) -> None:
    chief = trainer_line("worker-0", epoch_end_line(2, 3, {"loss": 0.5}, 10.0, 4))
    fake = history_api(tmp_path, chief_log=f"2026-12-01T10:00:00Z {chief}\n")
    assert [p.epoch for p in ClusterBackend(fake, NS).history("r")] == [2]
    assert len(fake.created) == 1, "a pod to read the file, which is not there"
    fake.delete("v1", "PersistentVolumeClaim", NS, "c")  # the claim is gone: no pod at all
    assert [p.epoch for p in ClusterBackend(fake, NS).history("r")] == [2]
    assert len(fake.created) == 1


# ---- the plot -----------------------------------------------------------------------------------


def test_the_plot_has_a_line_per_run_per_metric_and_the_legend_names_the_runs() -> None:
    histories = {
        "lr-small": [Progress(e, 3, {"loss": 1 / e, "accuracy": e / 4, "val_loss": 1.1 / e}) for e in (1, 2, 3)],
        "lr-large": [Progress(e, 3, {"loss": 2 / e, "accuracy": e / 5}) for e in (1, 2)],
    }
    figure = plot_histories(histories)
    shown = [ax for ax in figure.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["loss", "accuracy"]
    loss, accuracy = ([(ln.get_label(), list(ln.get_xdata()), ln.get_linestyle()) for ln in ax.get_lines()]
                      for ax in shown)
    assert loss == [("lr-small", [1, 2, 3], "-"), ("lr-small (val_loss)", [1, 2, 3], "--"), ("lr-large", [1, 2], "-")]
    assert [label for label, *_ in accuracy] == ["lr-small", "lr-large"]
    for ax in shown:
        assert {t.get_text() for t in ax.get_legend().get_texts()} >= {"lr-small", "lr-large"}
    colours = {ln.get_label(): ln.get_color() for ln in shown[0].get_lines()}
    assert colours["lr-small"] == colours["lr-small (val_loss)"] != colours["lr-large"]


def test_plot_draws_only_the_metrics_asked_for_and_says_when_there_is_nothing() -> None:
    histories = {"a": [Progress(1, 1, {"loss": 1.0, "auc": 0.5, "val_auc": 0.4})]}
    figure = plot_histories(histories, ["val_auc"])
    assert [ax.get_title() for ax in figure.axes if ax.get_visible()] == ["auc"]
    with pytest.raises(ValueError, match="no finished epoch"):
        plot_histories({"a": []})
    with pytest.raises(ValueError, match="none of nope"):
        plot_histories(histories, ["nope"])


def test_the_client_saves_a_png_when_given_a_path(tmp_path: Path) -> None:
    local_run(tmp_path, "a", [line(1), line(2), line(3)])
    figure = TrainingClient(LocalBackend(tmp_path)).plot("a", path=tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [ln.get_label() for ln in figure.axes[0].get_lines()] == ["a"]


# ---- dtr compare --------------------------------------------------------------------------------


def test_the_spec_diff_names_differing_fields_and_leaves_out_shared_ones_and_defaults() -> None:
    specs = {
        "a": {"workers": 2, "training": {"epochs": 3, "learningRate": 0.01}},
        "b": {"training": {"epochs": 5, "learningRate": 0.01}},  # workers: the API's default, 2
        "c": {"workers": 3, "training": {"epochs": 3, "learningRate": 0.01}, "suspend": False},
    }
    assert spec_differences(specs) == [("spec.training.epochs", [3, 5, 3]), ("spec.workers", [2, 2, 3])]
    assert spec_differences({"a": specs["a"]}) == []
    assert flatten({"x": {"y": [1, 2], "z": {}}}) == {"spec.x.y": [1, 2], "spec.x.z": {}}


def test_the_spec_diff_shows_each_param_that_differs() -> None:
    specs = {"a": {"training": {"params": {"width": 32, "opt": "sgd"}}},
             "b": {"training": {"params": {"width": 64, "opt": "sgd"}}},
             "c": {"training": {"params": {"opt": "sgd", "deep": True}}}}  # fmt: skip
    assert spec_differences(specs) == [("spec.training.params.deep", ["-", "-", True]),
                                       ("spec.training.params.width", [32, 64, "-"])]  # fmt: skip


def test_compare_prints_final_figures_side_by_side_then_the_differences() -> None:
    statuses = [RunStatus("a", "Succeeded", metrics={"loss": 0.25, "accuracy": 0.91}, progress=Progress(3, 3),
                          status={"startTime": "2026-12-01T10:00:00Z", "completionTime": "2026-12-01T10:01:05Z"}),
                RunStatus("b", "Failed", metrics={"loss": 0.5})]  # fmt: skip
    out = compare_lines(statuses, {"a": {"training": {"epochs": 3}}, "b": {"training": {"epochs": 5}}})
    assert out[0].split() == ["a", "b"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in out[1:] if ln}
    assert rows["phase"] == ["Succeeded", "Failed"] and rows["epochs"] == ["3/3", "-"]
    assert rows["duration"] == ["65s", "-"]
    assert rows["metrics.accuracy"] == ["0.91", "-"] and rows["metrics.loss"] == ["0.25", "0.5"]
    assert rows["spec.training.epochs"] == ["3", "5"] and "spec" in out[out.index("") + 1]


def test_history_of_keeps_each_epochs_seconds_and_time() -> None:
    (p,) = history_of(line(1))
    assert (p.seconds, p.time, p.remaining_seconds) == (2.5, "2026-12-01T17:00:00Z", None)


# ---- dtr plot and dtr compare through the client ------------------------------------------------


def test_dtr_plot_writes_the_png_and_prints_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    local_run(tmp_path, "a", [line(1), line(2)])
    local_run(tmp_path, "b", [line(1)])
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "a", "--backend", "local", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "a.png\n" and (tmp_path / "a.png").stat().st_size > 1000
    assert cli.main(["plot", "a", "b", "--backend", "local", "--dir", str(tmp_path), "-o", "x/ab.png"]) == 1
    assert "x/ab.png" in capsys.readouterr().err  # no such directory: one line
    assert cli.main(["plot", "a", "b", "--backend", "local", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "curves.png\n"


def test_an_unknown_run_or_one_without_epochs_is_one_line_and_exit_1(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Not bad input: the runs are not there, or have nothing to show yet (as for dtr logs and dtr tensorboard)."""
    local_run(tmp_path, "empty", [])
    for command in ("plot", "compare"):
        assert cli.main([command, "nope", "--backend", "local", "--dir", str(tmp_path)]) == 1
        assert capsys.readouterr().err == f"dtr {command}: no DistTrainingRun nope in {tmp_path.resolve()}\n"
    assert cli.main(["plot", "empty", "--backend", "local", "--dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == "dtr plot: empty: no finished epoch to plot (yet)\n"


def test_a_metric_none_of_the_runs_has_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local_run(tmp_path, "a", [line(1)])
    assert cli.main(["plot", "a", "--only", "nothing", "--backend", "local", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dtr plot: no metric to plot") and err.count("\n") == 1, err


def test_dtr_compare_names_the_field_that_differs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local_run(tmp_path, "a", [line(1)], spec={"training": {"epochs": 3}})
    local_run(tmp_path, "b", [line(1)], spec={"training": {"epochs": 4}})
    assert cli.main(["compare", "a", "b", "--backend", "local", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "spec.training.epochs" in out and "spec.workers" not in out


def test_the_cluster_backend_is_asked_for_by_name(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    def none(cls: Any) -> Any:
        raise kube.NoCredentials("no kubeconfig")

    monkeypatch.setattr(kube.Kube, "for_cli", classmethod(none))
    assert cli.main(["compare", "a", "--backend", "cluster"]) == 1
    assert capsys.readouterr().err.startswith("dtr compare: no kubeconfig")
