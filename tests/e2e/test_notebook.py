"""examples/quickstart.ipynb executed headless against the local backend (no cluster): every cell, with nbclient
and a real kernel, as a user runs it; the curves it draws checked as the docs' picture is (docs/pictures.py).

Three short epochs of two workers on digits (~30 s on 2 cores); its last cell asserts that the model it fetched
scores as the run's status says."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from support import notebook as nbh


def test_the_kernel_is_this_python(tmp_path: Path) -> None:
    """The "python3" kernel nbclient starts is the op environment's Python (the kernelspec says `python`)."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("backend = 'auto'", metadata={"tags": [nbh.PARAMETERS]}),
        nbformat.v4.new_code_cell("import sys\nprint(sys.executable)"),
    ])  # fmt: skip
    path = tmp_path / "kernel.ipynb"
    nbformat.write(nb, path)
    executed = nbh.execute(path, tmp_path / "out", cell_timeout=120)
    assert executed.cells[-1].outputs[0]["text"].strip() == sys.executable


def test_a_failing_cell_fails_the_run_naming_it(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": [nbh.PARAMETERS]}),
        nbformat.v4.new_code_cell("assert x == 2, 'x is not 2'"),
        nbformat.v4.new_code_cell("print('never')"),
    ])  # fmt: skip
    path = tmp_path / "fails.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(nbh.NotebookFailed, match=r"cell 2 failed:\nassert x == 2, 'x is not 2'\n--> AssertionError"):
        nbh.execute(path, tmp_path / "out", cell_timeout=120)
    assert (tmp_path / "out" / "fails.ipynb").exists(), "the executed copy is kept to look at"


def test_the_quickstart_notebook_trains_plots_and_scores_locally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # the kernel inherits it: no cluster
    parameters = {"backend": "local", "local_dir": str(tmp_path / ".dtr"), "epochs": 3, "run_name": "nb-local"}
    nb = nbh.execute(nbh.QUICKSTART, tmp_path / "executed", parameters, cwd=tmp_path)
    printed = "".join(out.get("text", "") for cell in nb.cells for out in cell.get("outputs") or [])
    assert [line.split()[1] for line in printed.splitlines() if line.startswith("epoch ")] == ["1/3", "2/3", "3/3"]
    assert "Succeeded" in printed and "held-out digits" in printed, printed
    picture = nbh.check_png(nbh.plot_png(nb))
    print(f"\nthe quickstart's curves: {picture}")
    assert (tmp_path / ".dtr" / "runs" / "nb-local" / "status.json").is_file(), "the run went where it was told"
