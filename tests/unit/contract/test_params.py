"""dtr_contract.params: a run's own hyperparameters, their bounds and grammar, the trainer's flag value and what
`dtr submit/run --param name=value` reads; and the summary's stoppedEarly, written and read back."""

from __future__ import annotations

import json

import pytest
from dtr_contract import params, summary
from hypothesis import given
from hypothesis import strategies as st

names = st.from_regex(params.NAME, fullmatch=True)
values = (st.integers(-(10**12), 10**12) | st.floats(allow_nan=False, allow_infinity=False) | st.booleans()
          | st.text(max_size=params.MAX_VALUE_LENGTH))  # fmt: skip


@given(st.dictionaries(names, values, max_size=params.MAX_PARAMS))
def test_every_admitted_map_goes_through_the_flag_unchanged(given_params) -> None:
    assert params.problems(given_params) == []
    flag = params.to_flag(given_params)
    back = params.from_flag(flag)
    assert back == given_params and all(type(back[k]) is type(v) for k, v in given_params.items())
    assert params.to_flag(dict(reversed(list(given_params.items())))) == flag, "names sorted: one command line"


@pytest.mark.parametrize(("given_params", "expected"), [
    ({"1width": 1}, [("", "'1width' is not a name: names are letters, digits and '_' (at most 32), not starting "
                          "with a digit")]),
    ({"w" * 33: 1}, [("", f"'{'w' * 33}' is not a name: names are letters, digits and '_' (at most 32), not "
                          "starting with a digit")]),
    ({"w": "x" * 33}, [("w", "must be at most 32 characters")]),
    ({"w": {"a": 1}}, [("w", "must be a number, a string or true/false, got dict")]),
    ({"w": None}, [("w", "must be a number, a string or true/false, got NoneType")]),
    ({"w": float("nan")}, [("w", "must be a finite number")]),
    ({f"p{i}": i for i in range(13)}, [("", "must have at most 12 entries")]),
    ([1], [("", "must be a map of names to values, got list")]),
])
def test_what_is_wrong_is_named(given_params, expected) -> None:
    assert params.problems(given_params) == expected


@pytest.mark.parametrize(("text", "value"), [
    ("64", 64), ("-3", -3), ("0.25", 0.25), ("1e-3", 0.001), (".5", 0.5), ("true", True), ("false", False),
    ("sgd", "sgd"), ('"64"', "64"), ("'true'", "true"), ("", ""), ("1.2.3", "1.2.3"), ("True", "True"),
])
def test_a_command_line_value_is_typed_as_written(text, value) -> None:
    parsed = params.parse_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_an_assignment_needs_a_name_an_equals_sign_and_a_bounded_value() -> None:
    assert params.parse_assignment("width=64") == ("width", 64)
    assert params.parse_assignment("expr=a=b") == ("expr", "a=b")
    for bad, words in (("width", "give name=value"), ("1w=3", "is not a name"), ("w=" + "x" * 33, "at most 32")):
        with pytest.raises(ValueError, match=words):
            params.parse_assignment(bad)


def test_from_flag_refuses_what_the_operator_never_sends() -> None:
    for text in ("[1]", "{", '{"w": {}}', '{"1w": 1}'):
        with pytest.raises(ValueError):
            params.from_flag(text)


def test_params_are_shown_sorted_on_one_line() -> None:
    assert params.shown({"width": 64, "deep": True, "opt": "sgd"}) == "deep=true opt=sgd width=64"


def test_a_stopped_early_summary_reads_back_and_a_broken_one_is_left_out() -> None:
    early = {"epoch": 3, "epochs": 6, "reason": "EarlyStopping: val_loss did not improve for 2 epoch(s)"}
    line = summary.summary_json({"loss": 0.5}, "loss", 6, 10.0, "/m/1", 1, early)
    assert json.loads(line)["stoppedEarly"] == early
    assert summary.parse_summary(line).stopped_early == (3, 6, early["reason"])
    assert summary.parse_summary(summary.summary_json({"loss": 0.5}, "loss", 6, 10.0, "/m/1", 1)).stopped_early is None
    for broken in ({"epoch": 6, "epochs": 6, "reason": "r"}, {"epoch": 0, "epochs": 6, "reason": "r"},
                   {"epoch": 2, "epochs": 6, "reason": 5}, {"epoch": True, "epochs": 6, "reason": "r"}, "x"):
        doc = {"loss": 0.5, "stoppedEarly": broken}
        assert summary.parse_summary(json.dumps(doc)).stopped_early is None, broken
    long = summary.parse_summary(json.dumps({"stoppedEarly": {"epoch": 1, "epochs": 2, "reason": "r" * 10_000}}))
    assert long.stopped_early is not None and len(long.stopped_early[2]) == summary.MAX_REASON
