"""The size attacks of tests/reliability/attacks/bounds.yaml (refused by the CRD on the real node) are refused by
`dtr render`'s parser too, the API server's twin (spec.parse_run); tests/integration/test_operator_crd_bounds.py
has the API server's own answers."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from dtr_operator.spec import SpecError, parse_run

from support.repo import REPO
from support.runs import make_run

ATTACKS = yaml.safe_load((REPO / "tests" / "reliability" / "attacks" / "bounds.yaml").read_text())


@pytest.mark.parametrize("attack", ATTACKS, ids=[a["id"] for a in ATTACKS])
def test_a_size_attack_is_refused_by_the_schema(attack: dict[str, Any]) -> None:
    assert attack["refused_by"] == "crd" and attack["finding"] in attack["id"]
    with pytest.raises(SpecError):
        parse_run(make_run(attack["spec"]))
