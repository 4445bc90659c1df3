"""status_fields.py, the status field table: the CRD's status schema it generates, and who it says writes what."""

from __future__ import annotations

import importlib
import re

import pytest
import yaml
from dtr_operator import crd, status_fields
from dtr_operator.status_fields import STATUS, WRITERS

from support.repo import REPO

OPERATOR = REPO / "operator"


def test_the_committed_crd_has_the_status_schema_the_table_generates():
    """What the API server sees of the status is the table's. (The table replaced 211 lines of hand-written YAML,
    which this test found equal to it, as parsed YAML, before they went; crds/disttrainingrun.yaml did not change.)
    docs/gen.py --check finds the whole file stale; this says whether the status is why."""
    committed = yaml.safe_load((REPO / crd.FILE).read_text())
    (version,) = committed["spec"]["versions"]
    assert version["schema"]["openAPIV3Schema"]["properties"]["status"] == crd.status_schema(STATUS)


def test_kopf_keeps_its_bookkeeping_under_the_status():
    assert crd.status_schema(STATUS)["x-kubernetes-preserve-unknown-fields"] is True


def _writer(name: str):
    module, function = name.rsplit(".", 1)
    return getattr(importlib.import_module(f"dtr_operator.{module}"), function)


@pytest.mark.parametrize("name", WRITERS)
def test_every_writer_is_a_function_its_callers_call(name: str):
    assert callable(_writer(name)), name
    short = name.rsplit(".", 1)[1]
    for caller in WRITERS[name]:
        source = (OPERATOR / f"{caller}.py").read_text()
        assert re.search(rf"\b{short}\b", source), f"{caller}.py does not call {name}"


def test_every_field_has_words_and_a_writer_that_is_declared():
    for path, f in status_fields.walk():
        if "[]" not in path.split(".")[-1]:
            assert f.description, path
        assert status_fields.writers(status_fields.keys(path)), f"{path}: nobody writes it"
        assert set(f.by) <= set(WRITERS), path


@pytest.mark.parametrize(
    ("path", "declared"),
    [
        ("phase", True),
        ("progress.metrics[].name", True),
        ("conditions[].lastTransitionTime", True),
        ("watchdog.restarting", True),
        ("phases", False),
        ("progress.metrics.name", False),
        ("progress.metrics[].unit", False),
    ],
)
def test_find_follows_objects_and_arrays(path: str, declared: bool):
    assert (status_fields.find(status_fields.keys(path)) is not None) == declared


def test_any_key_of_the_metrics_map_is_a_number_and_nothing_is_under_it():
    assert status_fields.find(("metrics", "val.top_k/accuracy")) == STATUS.child("metrics").items  # type: ignore[union-attr]
    assert status_fields.find(("metrics", "accuracy", "x")) is None
