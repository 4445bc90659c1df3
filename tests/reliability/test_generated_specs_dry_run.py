"""A thousand generated specs (specgen.py, the strategy test_generated_specs.py drives) sent to the real
API server with server-side dry-run (dryRun=All: admission, the schema, its defaults and the CEL rules all
run; nothing is stored), one client, no operator. For each:

- a refusal (422, or 400 from strict decoding) names a `spec.` field;
- the operator's own parser (dtr_operator.spec.parse_run, what `dtr render` and `dtr run` use) agrees:
  it accepts the object the dry-run returned (the defaulted run) and the spec as written, with the same
  defaults, when the server accepts; it refuses the spec, naming a field the server also named, when the
  server refuses (unless the server stopped before it could see that field: strict decoding refuses
  before validating, and the CEL rules wait until the schema holds);
- a refusal can hide a field the two judge differently behind fields both refuse (the parser stops at its
  first, the server skips its CEL rules while the schema fails): so the fields named are removed and what
  is left is sent again, until both accept it or they disagree ("peeling");
- nothing is left stored.

Every disagreement is recorded with its spec and both messages; the test fails at the end, so the
ledger has the full counts. Reproducing the draw: specgen.py.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from dtr_operator.spec import RunSpec, SpecError, parse_run
from hypothesis import given
from ledger import Ledger, Record
from specgen import (
    draw_settings,
    named_fields,
    pinned_draws,
    reproducible,
    specs,
    stratum,
)

from support.api import Api
from support.cluster import Cluster
from support.runs import run_doc

EXAMPLES = int(os.environ.get("DTR_RELIABILITY_DRY_RUN_EXAMPLES", "1000"))
CASE = "hypothesis specs (derandomized), server-side dry-run, the operator's parser alongside"
# The server validated only part of the object: strict decoding refuses before validation, and CEL rules
# are skipped while the schema does not hold. A field the parser names may then be missing from its answer.
PARTIAL = "some validation rules were not checked"


@dataclass
class Tally:
    tried: int = 0
    accepted: int = 0
    refused: int = 0
    refused_naming_field: int = 0
    codes: Counter[int] = field(default_factory=Counter)
    refused_fields: Counter[str] = field(default_factory=Counter)  # a refusal naming several counts under each
    paths: Counter[str] = field(default_factory=Counter)  # accepted specs by what the run would do
    parser_accepts: int = 0  # accepted specs the parser accepts, as returned and as written
    parser_same_defaults: int = 0  # ... and with the same defaults either way
    parser_refuses: int = 0  # refused specs the parser refuses, naming a field
    parser_names_a_server_field: int = 0  # ... one the server named too
    parser_field_not_reached: int = 0  # ... another, which the server had not validated yet (PARTIAL)
    peeled: int = 0  # specs derived from refused ones by removing the fields named, sent too
    peeled_accepted: int = 0  # ... that both then accepted
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class Sender:
    api: Api
    namespace: str
    prefix: str
    tally: Tally = field(default_factory=Tally)
    sent: int = 0  # dry-run creates, drawn and peeled


@pytest.fixture(scope="module")
def sender(control_plane: Cluster, ledger: Ledger) -> Iterator[Sender]:
    namespace = f"t-dry-run-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", namespace)
    s = Sender(Api.from_kubeconfig(), namespace, f"d{uuid.uuid4().hex[:4]}")
    started = time.monotonic()
    try:
        with pinned_draws():
            yield s
    finally:
        seconds = time.monotonic() - started
        stored = s.api.runs(namespace)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        record(s.tally, ledger, seconds, len(stored), s.sent)


def record(t: Tally, ledger: Ledger, seconds: float, stored: int, sent: int) -> None:
    if stored:
        t.problems.append(f"{stored} runs stored by dry-run creates")
    if t.tried < EXAMPLES:
        t.problems.append(f"hypothesis drew {t.tried} specs, not {EXAMPLES}")
    ledger.add(
        Record(
            area="generated-specs",
            case=CASE,
            tried=t.tried,
            correct=t.tried - len(t.disagreements),
            duplicated=stored,
            user_sees=(
                f"accepted {t.accepted}: the parser accepts {t.parser_accepts}, {t.parser_same_defaults} with the "
                f"server's defaults; refused {t.refused} ("
                + ", ".join(f"{code}: {n}" for code, n in sorted(t.codes.items()) if code != 201)
                + f"), {t.refused_naming_field} naming a spec. field, the parser refusing {t.parser_refuses}; "
                f"{t.peeled} more sent with the named fields removed, until both accepted ({t.peeled_accepted}); "
                f"disagreements: {len(t.disagreements)}"
            ),
            detail={
                "kind": "dry-run",
                "accepted": t.accepted,
                "refused_by_api_server": t.refused,
                "refused_naming_a_field": t.refused_naming_field,
                "status_codes": {str(k): v for k, v in sorted(t.codes.items())},
                "parser_accepts_accepted": t.parser_accepts,
                "parser_same_defaults": t.parser_same_defaults,
                "parser_refuses_refused": t.parser_refuses,
                "parser_names_a_field_the_server_named": t.parser_names_a_server_field,
                "parser_names_a_field_the_server_had_not_reached": t.parser_field_not_reached,
                "peeled_sent": t.peeled,
                "peeled_accepted_by_both": t.peeled_accepted,
                "disagreements": t.disagreements,
                "stored": stored,
                "dry_run_creates": sent,
                "seconds": round(seconds, 1),
                "per_request_ms": round(1000 * seconds / max(sent, 1), 2),
                "problems": t.problems,
                "draw": draw_settings(EXAMPLES),
                "strata": {
                    "outcome": {"accepted": t.accepted, "refused": t.refused},
                    "refused_fields": dict(t.refused_fields.most_common()),
                    "accepted_paths": dict(sorted(t.paths.items())),
                },
            },
        )
    )
    assert not t.disagreements, t.disagreements[:20]
    assert not t.problems, t.problems


def parsed(doc: dict[str, Any]) -> RunSpec | str:
    """The parser's RunSpec, or its refusal."""
    try:
        return parse_run(doc)
    except SpecError as err:
        return str(err)


def same(a: RunSpec, b: RunSpec) -> bool:
    """Equal runs, but for what only the server assigns (uid, generation)."""
    return dataclasses.replace(a, uid=None, generation=None) == dataclasses.replace(b, uid=None, generation=None)


@dataclass
class Verdict:
    """One spec sent with dry-run and parsed: what each said, and how they disagree (wrong)."""

    code: int
    message: str  # the server's refusal
    server_fields: list[str]  # the spec. fields it named
    parser: RunSpec | str  # the parser's run, or its refusal, for the spec as written
    agreement: str  # same-defaults | same-field | field-not-reached | disagree
    wrong: str | None = None

    @property
    def accepted(self) -> bool:
        return self.code == 201

    @property
    def parser_fields(self) -> list[str]:
        return named_fields(self.parser) if isinstance(self.parser, str) else []


def judge(s: Sender, spec: dict[str, Any]) -> Verdict:
    s.sent += 1
    doc = run_doc(f"{s.prefix}-{s.sent}", s.namespace, spec)
    code, message, returned = s.api.create_run_dry(s.namespace, doc["metadata"]["name"], spec)
    fields, written = named_fields(message), parsed(doc)
    v = Verdict(code, message, fields, written, "disagree")
    if code == 201 and returned is not None:
        as_returned = parsed(returned)
        if isinstance(as_returned, str) or isinstance(written, str):
            refused = written if isinstance(written, str) else as_returned
            v.wrong = f"the parser refuses what the server accepted: {refused}"
        elif not same(as_returned, written):
            v.wrong = f"defaults differ: the server's object parses to {as_returned}, the spec as written to {written}"
        else:
            v.agreement = "same-defaults"
        return v
    if code not in (400, 422) or not fields:
        v.wrong = "the server refused without naming a spec. field"
    elif isinstance(written, RunSpec):
        v.wrong = "the parser accepts what the server refused"
    elif not v.parser_fields:
        v.wrong = f"the parser refuses without naming a spec. field: {written}"
    elif v.parser_fields[0] in fields:
        v.agreement = "same-field"
    elif code == 400 or PARTIAL in message:
        v.agreement = "field-not-reached"
    else:
        v.wrong = f"the parser names {v.parser_fields[0]}, which the server validated and did not name: {written}"
    return v


def remove(spec: dict[str, Any], path: str) -> bool:
    """Delete the deepest part of spec.<path> the spec has (spec.training.epochs: training.epochs)."""
    keys = path.split(".")[1:]
    obj: Any = spec
    for depth, key in enumerate(keys):
        if not isinstance(obj, dict) or key not in obj:
            return False
        if depth == len(keys) - 1 or not isinstance(obj[key], dict) or keys[depth + 1] not in obj[key]:
            del obj[key]
            return True
        obj = obj[key]
    return False


def peel(s: Sender, spec: dict[str, Any], first: Verdict) -> Verdict | None:
    """A refusal can hide a field the two judge differently behind the fields both refuse (the parser stops at
    its first, the server before its CEL rules): remove the fields named and send what is left, again and
    again, until both accept it or they disagree. The disagreement found, if any."""
    current, v = copy.deepcopy(spec), first
    while not v.accepted and v.wrong is None:
        if not [f for f in v.server_fields + v.parser_fields if remove(current, f)]:
            v.wrong = f"nothing named is left to remove from {current}"
            return v
        v = judge(s, current)
        s.tally.peeled += 1
        s.tally.peeled_accepted += v.accepted and v.wrong is None
    return v if v.wrong is not None else None


def count(t: Tally, spec: dict[str, Any], v: Verdict) -> None:
    t.codes[v.code] += 1
    if v.accepted:
        t.accepted += 1
        t.paths[stratum(spec)] += 1
        t.parser_accepts += v.wrong is None or v.wrong.startswith("defaults differ")
        t.parser_same_defaults += v.agreement == "same-defaults"
        return
    t.refused += 1
    t.refused_fields.update(v.server_fields)
    t.refused_naming_field += v.code in (400, 422) and bool(v.server_fields)
    t.parser_refuses += isinstance(v.parser, str) and bool(v.parser_fields)
    t.parser_names_a_server_field += v.agreement == "same-field"
    t.parser_field_not_reached += v.agreement == "field-not-reached"


@reproducible(EXAMPLES)
@given(spec=specs)
def test_the_api_server_and_the_parser_accept_and_refuse_the_same_specs(sender: Sender, spec: dict[str, Any]) -> None:
    s, t = sender, sender.tally
    t.tried += 1
    v = judge(s, spec)
    count(t, spec, v)
    found = v if v.wrong is not None else peel(s, spec, v)
    if found is not None:
        t.disagreements.append({"spec": spec, "after_peeling": found is not v,
                                "server": f"{found.code} {found.message}"[:600],
                                "wrong": (found.wrong or "")[:600]})  # fmt: skip
