"""Which TFJob events the operator acts on (reconcile.has_news): the rest cost no API call."""

from __future__ import annotations

import pytest
from dtr_operator.reconcile.decide import has_news


@pytest.mark.parametrize(
    ("tfjob", "news"),
    [
        ({"metadata": {"name": "j"}}, False),  # just created: its creator recorded TFJobSubmitted
        ({"status": {}}, False),
        ({"status": {"conditions": []}}, False),
        ({"status": {"conditions": [{"type": "Created", "status": "True"}]}}, True),
        ({"status": {"conditions": [{"type": "Running", "status": "False"}]}}, True),
    ],
)
def test_only_a_tfjob_with_conditions_has_news(tfjob: dict, news: bool):
    assert has_news(tfjob) is news
