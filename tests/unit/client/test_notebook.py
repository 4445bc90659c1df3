"""The committed notebooks (examples/*.ipynb) and the pure parts of their harness (support.notebook) and of the
client's model calls (dtr_client.models).

A notebook is committed without outputs and execution counts: what it shows comes from running it
(tests/e2e/test_notebook.py), never from a stale run kept in git."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import nbformat
import pytest
from dtr_client import models
from dtr_contract import flags

from support import notebook as nbh
from support.repo import REPO

NOTEBOOKS = sorted((REPO / "examples").rglob("*.ipynb"))


def png_of(draw: bool, size: tuple[float, float] = (6, 4)) -> bytes:
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=100)
    if draw:
        axes = figure.subplots()
        axes.plot([1, 2, 3, 4], [1.6, 0.45, 0.21, 0.15], marker="o", label="digits")
        axes.set_xlabel("epoch")
        axes.legend()
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()


def test_the_quickstart_is_among_the_notebooks() -> None:
    assert nbh.QUICKSTART in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(REPO)))
def test_a_committed_notebook_is_valid_and_stripped_with_its_parameters_and_plot_cells(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nbh.unstripped(nb) == [], f"{path}: strip its outputs before committing (Jupyter: Clear All Outputs)"
    assert nb.metadata.kernelspec.name == nbh.KERNEL
    tagged = [tag for cell in nb.cells for tag in nbh.tags(cell)]
    assert tagged.count(nbh.PARAMETERS) == 1 and tagged.count(nbh.PLOT) == 1, tagged


def test_unstripped_names_the_outputs_and_counts_a_run_left() -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell("1")])
    assert nbh.unstripped(nb) == []
    nb.cells[1].execution_count = 3
    nb.cells[1].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "1"}, execution_count=3)]
    assert nbh.unstripped(nb) == ["cell 1: 1 output(s)", "cell 1: execution_count 3"]


def test_parameters_go_in_a_cell_of_their_own_after_the_parameters_cell() -> None:
    cells = [nbformat.v4.new_code_cell("import os"),
             nbformat.v4.new_code_cell("backend = 'auto'", metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell("print(backend)")]  # fmt: skip
    nb = nbh.with_parameters(nbformat.v4.new_notebook(cells=cells), {"backend": "local", "epochs": 3})
    assert [c.source for c in nb.cells] == ["import os", "backend = 'auto'", "backend = 'local'\nepochs = 3",
                                            "print(backend)"]  # fmt: skip
    assert nbh.tags(nb.cells[2]) == [nbh.INJECTED]
    assert len(cells) == 3, "the notebook given is left as it was"
    with pytest.raises(ValueError, match="no cell tagged 'parameters'"):
        nbh.with_parameters(nbformat.v4.new_notebook(cells=cells[:1]), {})


def test_a_failed_cell_is_named_with_its_source_and_error() -> None:
    bad = nbformat.v4.new_code_cell("assert 1 == 2, 'disagree'")
    bad.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="disagree", traceback=[])]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"), bad])
    assert nbh.failed_cell(nb) == "cell 1 failed:\nassert 1 == 2, 'disagree'\n--> AssertionError: disagree"
    assert nbh.failed_cell(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])) == ""


def test_the_plot_cells_png_is_taken_and_a_cell_without_one_says_what_it_showed() -> None:
    data = png_of(True)
    plot = nbformat.v4.new_code_cell("client.plot(name)", metadata={"tags": ["plot"]})
    plot.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x"),
                    nbformat.v4.new_output("display_data", {"image/png": base64.b64encode(data).decode(),
                                                            "text/plain": "<Figure>"})]  # fmt: skip
    assert nbh.plot_png(nbformat.v4.new_notebook(cells=[plot])) == data
    plot.outputs.append(plot.outputs[1])
    with pytest.raises(AssertionError, match="displayed 2 image/png"):
        nbh.plot_png(nbformat.v4.new_notebook(cells=[plot]))
    plot.outputs = [nbformat.v4.new_output("display_data", {"text/plain": "<Figure size 600x400 with 1 Axes>"})]
    with pytest.raises(AssertionError, match=r"displayed 0 image/png \(not one\); its outputs: \[\['text/plain'\]\]"):
        nbh.plot_png(nbformat.v4.new_notebook(cells=[plot]))
    with pytest.raises(AssertionError, match="no cell tagged 'plot'"):
        nbh.plot_png(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]))


def test_a_drawn_curve_passes_the_picture_check_and_a_blank_or_tiny_figure_does_not() -> None:
    picture = nbh.check_png(png_of(True))
    assert (picture.width, picture.height) == (600, 400) and picture.colours >= nbh.MIN_COLOURS
    with pytest.raises(AssertionError):
        nbh.check_png(png_of(False))
    with pytest.raises(AssertionError):
        nbh.check_png(png_of(True, size=(1.5, 1)))
    with pytest.raises(Exception):  # noqa: B017  (PIL's own error: not an image)
        nbh.check_png(b"not a png")


# ---- dtr_client.models: the pure parts and the local copy ----------------------------------------------


def test_the_scorer_is_called_with_what_was_given_and_its_last_line_read() -> None:
    assert models.scorer_argv("py", Path("/m"), None, None, None) == ["py", "-m", "dtr_trainer.score", "/m"]
    assert models.scorer_argv("py", Path("/m"), "wine.npz", 7, "/v/data") == [
        "py", "-m", "dtr_trainer.score", "/m", flags.DATASET, "wine.npz", flags.SEED, "7", flags.DATA_DIR, "/v/data"]
    assert models.scored('warning\n{"accuracy": 0.9, "examples": 10}\n') == {"accuracy": 0.9, "examples": 10}
    with pytest.raises(models.EvaluationFailed, match="printed nothing"):
        models.scored("\n")


def test_a_missing_trainer_python_is_named_with_the_way_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(models.EvaluationFailed, match=r"no trainer Python at .*DTR_TRAINER_PYTHON"):
        models.evaluate(str(tmp_path / "python3.9"), tmp_path)


def test_a_model_is_copied_whole_into_an_empty_or_new_directory_only(tmp_path: Path) -> None:
    source = tmp_path / "volume" / "models" / "m" / "1"
    (source / "variables").mkdir(parents=True)
    (source / "saved_model.pb").write_bytes(b"pb")
    (source / "variables" / "variables.index").write_bytes(b"ix")
    (source / "lineage.json").write_text(json.dumps({"training": {"dataset": "digits", "seed": 42}}))
    for dest in (tmp_path / "new" / "model", tmp_path / "empty"):
        if dest.name == "empty":
            dest.mkdir()
        assert models.copy_model(source, dest) == dest
        assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == [
            "lineage.json", "saved_model.pb", "variables", "variables/variables.index"]
    with pytest.raises(FileExistsError, match="is not an empty directory"):
        models.copy_model(source, tmp_path / "empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "new", "volume"], "no partial copy left"


def test_a_local_runs_model_is_fetched_from_its_volume_and_a_run_without_one_says_so(tmp_path: Path) -> None:
    from dtr_client import NoModel, TrainingClient
    from dtr_client.local import runner

    client = TrainingClient("local", local_dir=tmp_path / ".dtr")
    model = tmp_path / ".dtr" / "volumes" / "r-data" / "models" / "r" / "1"
    model.mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"pb")
    for name, status in (("r", {"phase": "Succeeded", "model": {"claim": "r-data", "path": "/mnt/dtr/models/r/1"}}),
                         ("early", {"phase": "Running"})):  # fmt: skip
        (tmp_path / ".dtr" / "runs" / name).mkdir(parents=True)
        (tmp_path / ".dtr" / "runs" / name / runner.STATUS_FILE).write_text(json.dumps(status))
    assert client.fetch_model("r", tmp_path / "got") == tmp_path / "got"
    assert (tmp_path / "got" / "saved_model.pb").read_bytes() == b"pb"
    with pytest.raises(NoModel, match="early has exported no model \\(yet\\): it is Running"):
        client.fetch_model("early", tmp_path / "none")


def test_the_copy_sets_no_signal_handler_outside_the_main_thread() -> None:
    """fetch_model runs `dtr model get`'s copy in a thread (asyncio.run cannot run in a notebook's loop); Python
    refuses signal.signal there."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    from dtr_client import volume

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(volume._set_sigint, signal.SIG_IGN).result() is None
    previous = volume._set_sigint(signal.SIG_IGN)
    try:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
