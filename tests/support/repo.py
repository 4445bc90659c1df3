"""The repository the tests run in, and the environment for the commands they run from it."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
# What a calling make passes down: -j and its level, and the Pythons of the Makefile (PY_TRAINER of
# `make test-unit` would otherwise decide a nested `make setup`).
_FROM_MAKE = frozenset({"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "PY_OP", "PY_TRAINER"})


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment less what make passed down, plus `extra`."""
    return {**{k: v for k, v in os.environ.items() if k not in _FROM_MAKE}, **extra}


def slim_trainer() -> ModuleType:
    """deploy/images/slim_trainer.py (not a package): the one list of what the trainer image leaves out."""
    spec = importlib.util.spec_from_file_location("dtr_slim_trainer", REPO / "deploy" / "images" / "slim_trainer.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
