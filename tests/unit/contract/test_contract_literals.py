"""Every operator-trainer contract literal has one home, contract/dtr_contract: nothing else in the product
spells one (issue 24; docs/architecture.md).

Scanned: operator/, trainer/, deploy/, the Dockerfiles and ./dtr. In a Python file, the code's string and
number constants (an f-string as its template, `{}` for each field); not comments or docstrings, where prose
may name a literal to explain it. In any other file, every line that is not a comment. A file that cannot
import the contract (a Dockerfile) may keep a literal only as an exception below, tied to the contract by
a test of its own.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dtr_contract import container, env, exits, flags, layout, summary
from dtr_contract.progress import epoch_end_line

from support.repo import REPO

PRODUCT = ("operator", "trainer", "deploy", "Dockerfile.operator", "Dockerfile.trainer", "dtr")
SKIP_DIRS = {"__pycache__", ".ruff_cache", ".pytest_cache", "build"}


def _alternatives(words) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


def _number(value: int) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.]){value}(?![\w.])")


# loss, accuracy and epochs are words of their own elsewhere too
SUMMARY_KEYS = (summary.EXAMPLES_PER_SECOND, summary.MODEL_PATH, summary.MODEL_VERSION)
# what -> the pattern of its spelling in a string or a line
TEXT = {
    "gRPC port": _number(container.PORT),
    "exit code peer lost": _number(exits.PEER_LOST),
    "termination-message path": re.compile(re.escape(container.TERMINATION_MESSAGE_PATH)),
    "mount path": re.compile(re.escape(layout.MOUNT_PATH) + r"(?![\w.-])"),
    "volume layout": re.compile(r"(^|/)(models|backup|logs)/|\.dtr-export|(?<![\w-])claim-"),
    "env": re.compile(rf"\b({_alternatives(env.ALL)})\b"),
    "flag": re.compile(rf"(?<![\w-])({_alternatives(v for k, v in vars(flags).items() if k.isupper())})(?![\w-])"),
    # the line's own shape, and its two fields as the writer spells them or the parser looks them up
    "epoch-end line": re.compile(r"epoch \S+/\S+ end|\b(examples_per_second|remaining_seconds)=|"
                                 r"^(examples_per_second|remaining_seconds)$"),
    "summary key": re.compile(rf"\b({_alternatives(SUMMARY_KEYS)})\b"),
}
NUMBERS = {container.PORT: "gRPC port", exits.PEER_LOST: "exit code peer lost"}

# (file, the literal as found) -> why it may stay there
EXCEPTIONS = {
    ("Dockerfile.trainer", str(container.PORT)):
        "EXPOSE cannot import; test_the_trainer_image_exposes_the_contracts_port ties it",
    ("operator/dtr_operator/settings.py", env.TRAINER_IMAGE):
        "the operator's own setting of the same name (settings.py is its home), not the trainer's env",
    ("operator/dtr_cli/render.py", env.TRAINER_IMAGE): "the operator's setting, as in settings.py",
    ("deploy/base/deployment.yaml", env.TRAINER_IMAGE): "the operator's setting, as in settings.py",
    ("deploy/images/push.sh", env.TRAINER_IMAGE): "the operator's setting, as in settings.py",
    ("operator/dtr_operator/status/progress.py", summary.EXAMPLES_PER_SECOND):
        "status.progress's field (the API: crds/)",
    ("operator/dtr_operator/status_fields.py", summary.EXAMPLES_PER_SECOND):
        "status.progress's field, declared (the API: crds/), and a key of status.metrics, in its description",
    ("operator/dtr_operator/metrics.py", summary.EXAMPLES_PER_SECOND):
        "reads status.metrics and status.progress (the API: crds/)",
    ("trainer/dtr_trainer/lineage.py", summary.EXAMPLES_PER_SECOND):
        "lineage.json's field (docs/lineage.schema.json)",
    ("trainer/dtr_trainer/lineage.py", summary.MODEL_VERSION): "lineage.json's field (docs/lineage.schema.json)",
}


@dataclass(frozen=True)
class Found:
    path: str
    line: int
    what: str
    literal: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what} {self.literal!r}"


def product_files() -> Iterator[Path]:
    for top in PRODUCT:
        path = REPO / top
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if not SKIP_DIRS.intersection(file.relative_to(REPO).parts) and ".egg-info" not in str(file):
                yield file


def _prose(tree: ast.AST) -> set[int]:
    """ids of the string constants that are statements of their own: docstrings."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}  # fmt: skip


def _template(node: ast.JoinedStr) -> str:
    return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)


def _is_text_or_int(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def python_constants(text: str) -> Iterator[tuple[int, str | int]]:
    """(line, value) of every string (f-strings as templates) and int constant of the code."""
    tree = ast.parse(text)
    prose = _prose(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, _template(node)
        elif isinstance(node, ast.Constant) and id(node) not in prose and _is_text_or_int(node.value):
            yield node.lineno, node.value


def retryable_class_written_out(text: str) -> Iterator[int]:
    """Lines that test the retryable class by hand: `code >= 128` or `code < 128` (not `> 128`, which
    decodes a signal)."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.GtE, ast.Lt)) for op in node.ops):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Constant) and o.value == exits.RETRYABLE_FROM for o in operands):
                yield node.lineno


def _matches(path: str, line: int, text: str) -> Iterator[Found]:
    for what, pattern in TEXT.items():
        for match in pattern.finditer(text):
            yield Found(path, line, what, match.group(0))


def literals_in(path: str, text: str) -> list[Found]:
    found: list[Found] = []
    if not path.endswith(".py"):
        for number, line in enumerate(text.splitlines(), 1):
            if not line.lstrip().startswith("#"):
                found += _matches(path, number, line)
        return found
    for number, value in python_constants(text):
        if isinstance(value, str):
            found += _matches(path, number, value)
        elif value in NUMBERS:
            found.append(Found(path, number, NUMBERS[value], str(value)))
    found += [Found(path, n, "retryable class", str(exits.RETRYABLE_FROM)) for n in retryable_class_written_out(text)]
    return found


@pytest.fixture(scope="module")
def everything() -> list[Found]:
    found = {f for file in product_files()
             for f in literals_in(str(file.relative_to(REPO)), file.read_text(errors="replace"))}  # fmt: skip
    return sorted(found, key=lambda f: (f.path, f.line, f.literal))


def test_no_contract_literal_outside_the_contract(everything: list[Found]) -> None:
    stray = [str(f) for f in everything if (f.path, f.literal) not in EXCEPTIONS]
    assert not stray, "spelled outside contract/dtr_contract (import it instead):\n" + "\n".join(stray)


def test_every_exception_is_still_needed(everything: list[Found]) -> None:
    used = {(f.path, f.literal) for f in everything}
    assert not [e for e in EXCEPTIONS if e not in used], "exceptions no file needs any more"


def test_the_trainer_image_exposes_the_contracts_port() -> None:
    lines = (REPO / "Dockerfile.trainer").read_text().splitlines()
    assert f"EXPOSE {container.PORT}" in lines


def test_the_scan_sees_what_it_looks_for() -> None:
    """The scanner itself: each kind of spelling is found in code, none in prose."""
    code = f'''"""{layout.MOUNT_PATH} in a docstring is prose."""
# {container.PORT} in a comment is prose
port = {container.PORT}
path = f"{layout.MOUNT_PATH}/{{name}}"
line = f"epoch {{n}}/{{m}} end {{rest}}"
flag = "{flags.EXPORT_DIR}"
retry = code >= {exits.RETRYABLE_FROM}
'''
    found = [(f.line, f.what) for f in sorted(set(literals_in("operator/example.py", code)), key=lambda f: f.line)]
    assert found == [(3, "gRPC port"), (4, "mount path"), (5, "epoch-end line"), (6, "flag"), (7, "retryable class")]
    dockerfile = f"# EXPOSE {container.PORT} in a comment\nEXPOSE {container.PORT}\n"
    assert [(f.line, f.what) for f in literals_in("Dockerfile.x", dockerfile)] == [(2, "gRPC port")]
    assert TEXT["epoch-end line"].search(epoch_end_line(1, 2, {"loss": 0.5}, 3.0, 4))
