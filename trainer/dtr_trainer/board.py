"""TensorBoard on a run's logs from the trainer's Python: `python -m dtr_trainer.board --logdir DIR ...`
(the arguments are TensorBoard's own). `dtr tensorboard` runs it in a pod of the run's image, and locally.

TensorBoard 2.11 imports `pkg_resources` (setuptools) for two things only: the plugins installed as entry
points, and comparing its data server's version. The trainer image leaves setuptools out (docs/images.md),
so where `pkg_resources` is missing a stand-in answers both as it would here: no plugin packages are
installed beside TensorBoard's own, and versions compare as `packaging` (a TensorFlow dependency) does.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def pkg_resources_stand_in() -> types.ModuleType:
    from packaging.version import parse

    module = types.ModuleType("pkg_resources")
    module.iter_entry_points = lambda group, name=None: iter(())  # type: ignore[attr-defined]
    module.parse_version = parse  # type: ignore[attr-defined]
    return module


def main() -> None:
    if importlib.util.find_spec("pkg_resources") is None:
        sys.modules["pkg_resources"] = pkg_resources_stand_in()
    from tensorboard.main import run_main

    sys.argv[0] = "tensorboard"
    run_main()


if __name__ == "__main__":
    main()
