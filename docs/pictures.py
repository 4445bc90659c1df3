"""The docs' pictures, drawn by the code from a real run; and the notebook executed headless.

    python docs/pictures.py                    `make pictures`: runs examples/quickstart.ipynb with local workers
                                               and writes its curves to docs/img/quickstart-curves.png
    python docs/pictures.py --notebook-only    `make notebook`: runs it (BACKEND: auto, local or cluster), no picture

Every cell runs in a fresh kernel of this Python (tests/support/notebook.py, which the tests use too); a cell
that raises stops it with that cell's source and error (exit 1). The executed notebook, and the local runs
with their volumes, go to --out (default: a new temporary directory), never into the repository. The pictures
are not committed (docs/img/ is ignored): they are measured from a run, so they are made here, on demand, and
checked as the tests check them (decodes, size, not blank).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support import notebook as nbh  # noqa: E402  (the repository root, put on the path above)

CURVES = REPO / "docs" / "img" / "quickstart-curves.png"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--notebook-only", action="store_true", help="execute the notebook, write no picture")
    p.add_argument("--backend", choices=("auto", "local", "cluster"),
                   help="the notebook's backend (default: local for the pictures, auto with --notebook-only)")
    p.add_argument("--namespace", help="the cluster backend's namespace (default: the kubeconfig context's)")
    p.add_argument("--epochs", type=int, help="the run's epochs (default: the notebook's)")
    p.add_argument("--out", type=Path, help="where the executed notebook and local runs go (default: a new temp dir)")
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="dtr-notebook-"))
    backend = args.backend or ("auto" if args.notebook_only else "local")
    parameters = {"backend": backend, "local_dir": str(out / ".dtr"), "namespace": args.namespace}
    parameters |= {"epochs": args.epochs} if args.epochs else {}
    try:
        nb = nbh.execute(nbh.QUICKSTART, out, parameters, cwd=out)
    except nbh.NotebookFailed as err:
        print(f"pictures: {err}", file=sys.stderr)
        return 1
    print(f"executed: {out / nbh.QUICKSTART.name}")
    if not args.notebook_only:
        data = nbh.plot_png(nb)
        picture = nbh.check_png(data)
        CURVES.parent.mkdir(exist_ok=True)
        CURVES.write_bytes(data)
        print(f"{CURVES.relative_to(REPO)}: {picture.width}x{picture.height}, {picture.colours} colours")
    return 0


if __name__ == "__main__":
    sys.exit(main())
