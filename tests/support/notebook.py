"""The notebooks under examples/, executed headless as a user's Jupyter would run them, and their pictures.

`execute` runs every cell in a fresh "python3" kernel with nbclient (the kernel is this Python: jupyter_client
starts a kernelspec whose command is `python` with the Python that asks), papermill's way with parameters:
a cell tagged "injected-parameters" after the one tagged "parameters". A cell that raises stops the run and
fails with that cell's source and error (NotebookFailed); the executed copy is written outside the repository
either way. `plot_png` takes the picture a cell tagged "plot" drew; `check_png` says whether it is a real one.
Imported as `support.notebook` by the tests and as `tests.support.notebook` by docs/pictures.py (relative
imports, as support.node).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from .repo import REPO

QUICKSTART = REPO / "examples" / "quickstart.ipynb"
KERNEL = "python3"
CELL_TIMEOUT = 900  # seconds for one cell: the progress cell watches a whole run on a loaded 2-core machine
PARAMETERS, INJECTED, PLOT = "parameters", "injected-parameters", "plot"
PNG = "image/png"
MIN_COLOURS = 16  # a drawn curve, its axes and legend anti-aliased: hundreds; an empty figure: one or two
MIN_SIDE = 200  # pixels


class NotebookFailed(AssertionError):
    """A cell raised (or timed out): which one, its source and the error; the executed copy is kept."""


# ---- pure: the notebook document ----------------------------------------------------------------


def tags(cell: Mapping[str, Any]) -> list[str]:
    return list((cell.get("metadata") or {}).get("tags") or [])


def with_parameters(nb: Any, parameters: Mapping[str, Any]) -> Any:
    """A copy with a cell setting `parameters` after the cell tagged "parameters" (papermill's convention)."""
    nb = nbformat.from_dict(nb)
    at = next((i for i, cell in enumerate(nb.cells) if PARAMETERS in tags(cell)), None)
    if at is None:
        raise ValueError(f"the notebook has no cell tagged {PARAMETERS!r}")
    source = "\n".join(f"{key} = {value!r}" for key, value in parameters.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": [INJECTED]})
    nb.cells.insert(at + 1, cell)
    return nb


def unstripped(nb: Any) -> list[str]:
    """What a committed notebook must not hold: outputs and execution counts, cell by cell."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.get("outputs"):
            found.append(f"cell {i}: {len(cell.outputs)} output(s)")
        if cell.cell_type == "code" and cell.get("execution_count") is not None:
            found.append(f"cell {i}: execution_count {cell.execution_count}")
    return found


def failed_cell(nb: Any) -> str:
    """The first cell with an error output: its index, source and error (what a user would look at)."""
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs") or []:
            if out.get("output_type") == "error":
                return f"cell {i} failed:\n{cell.source}\n--> {out.get('ename')}: {out.get('evalue')}"
    return ""


def displayed(cell: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(output type, {mime type: data}) of each of the cell's outputs."""
    return [(str(out.get("output_type")), dict(out.get("data") or {})) for out in cell.get("outputs") or []]


def plot_png(nb: Any) -> bytes:
    """The PNG the cell tagged "plot" displayed: one, not none (a figure shown as text) nor two (shown twice)."""
    cell = next((cell for cell in nb.cells if PLOT in tags(cell)), None)
    if cell is None:
        raise AssertionError(f"no cell tagged {PLOT!r}")
    found = [base64.b64decode(data[PNG]) for _, data in displayed(cell) if PNG in data]
    if len(found) != 1:
        shown = [sorted(data) or kind for kind, data in displayed(cell)]
        raise AssertionError(f"the plot cell displayed {len(found)} {PNG} (not one); its outputs: {shown}")
    return found[0]


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    colours: int


def check_png(data: bytes) -> Picture:
    """The PNG decoded, and not trivial: at least MIN_SIDE pixels a side and MIN_COLOURS colours (a blank or
    empty figure has one or two), with no colour covering everything but a sliver."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG", image.format
        rgb = image.convert("RGB")
    counts = rgb.getcolors(maxcolors=rgb.width * rgb.height) or []
    picture = Picture(rgb.width, rgb.height, len(counts))
    assert min(picture.width, picture.height) >= MIN_SIDE, picture
    assert picture.colours >= MIN_COLOURS, picture
    background = max(n for n, _ in counts)
    assert background < 0.99 * rgb.width * rgb.height, f"{picture}: one colour covers {background} pixels"
    return picture


# ---- the shell --------------------------------------------------------------------------------


def execute(path: Path, out_dir: Path, parameters: Mapping[str, Any] | None = None, cwd: Path | None = None,
            cell_timeout: int = CELL_TIMEOUT, skip_tags: tuple[str, ...] = ()) -> Any:  # fmt: skip
    """Run every cell of the notebook at `path` (cells tagged one of skip_tags left out) in a fresh kernel,
    in `cwd` (default out_dir); the executed notebook, also written to out_dir/<name>. NotebookFailed when a
    cell raises."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    nb = nbformat.read(path, as_version=4)
    nb.cells = [cell for cell in nb.cells if not set(tags(cell)) & set(skip_tags)]
    nb = with_parameters(nb, parameters or {})
    out_dir.mkdir(parents=True, exist_ok=True)
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=cell_timeout,
                            resources={"metadata": {"path": str(cwd or out_dir)}})  # fmt: skip
    executed = out_dir / path.name
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as err:
        nbformat.write(nb, executed)
        raise NotebookFailed(f"{path.name}: {failed_cell(nb) or err}\n(executed copy: {executed})") from None
    nbformat.write(nb, executed)
    return nb
