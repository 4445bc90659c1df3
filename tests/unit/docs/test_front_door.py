"""The README's first screen (issue 43 item 7) and the pictures the docs show.

- Its first lines give the two commands for a fresh machine, `make run` (the embedded default) and `make test`, but
  its first code block is the quickstart, without `make test`: six lines from a clone to one's own model, each `dtr`
  line one that dtr's own parser takes; and it says what the product does not do yet.
- Every picture a document shows (Markdown `![...](...)` or `<img src=...>`) is a file the repository holds: one
  drawn by a run and git-ignored (docs/img/, `make pictures`) is broken for everyone who has not drawn it.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from dtr_cli.cli import build_parser

from support.repo import REPO

README = REPO / "README.md"
DOCS = sorted([README, *(REPO / "docs").glob("*.md"), *(REPO / "examples").rglob("*.md")])
FIRST_SCREEN = 45  # lines: what a browser or a terminal shows before scrolling
BLOCK = re.compile(r"```\w*\n(.*?)```", re.DOTALL)
PICTURE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)[^)]*\)|<img\s[^>]*src=[\"']([^\"']+)[\"']")


def first_block() -> tuple[str, str]:
    """(the README's text before its first code block, that block)."""
    text = README.read_text()
    found = BLOCK.search(text)
    assert found, "the README has no code block"
    return text[: found.start()], found.group(1)


def test_the_first_lines_give_both_commands_and_the_first_block_is_the_quickstart() -> None:
    before, block = first_block()
    assert len(before.splitlines()) < FIRST_SCREEN
    assert "`make run`" in before and "`make test`" in before, "the two commands for a fresh machine"
    assert before.index("`make run`") < before.index("`make test`"), "the main job first, the tests second"
    assert "make test" not in block, "make test is not a newcomer's first command"
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) == 6, lines
    assert lines[0].startswith("make run")


def test_each_dtr_line_of_the_quickstart_is_one_dtr_takes() -> None:
    _, block = first_block()
    commands = [shlex.split(line, comments=True) for line in block.splitlines() if line.startswith("./dtr ")]
    assert [c[1] for c in commands] == ["run", "data", "submit", "model"], commands
    parser = build_parser()
    for command in commands:
        parser.parse_args(command[1:])  # SystemExit (a usage error) fails the test


def test_the_first_screen_says_what_it_does_not_do_yet() -> None:
    screen = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    assert "**Not yet**" in screen
    for missing in ("extra packages", "TensorFlow 2.11", "Linux x86_64", "Helm"):
        assert missing in screen, missing


def tracked() -> set[str]:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True).stdout
    return set(out.splitlines())


def pictures(text: str) -> list[str]:
    return [a or b for a, b in PICTURE.findall(text)]


def test_the_picture_pattern_finds_both_forms() -> None:
    text = 'A ![curves](img/a.png "t") and <img alt="x" src="../b.svg"> and a [link](c.png).'
    assert pictures(text) == ["img/a.png", "../b.svg"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_picture_a_document_shows_is_in_the_repository(doc: Path) -> None:
    held = tracked()
    missing = []
    for target in pictures(doc.read_text()):
        if re.match(r"[a-z]+://", target):
            missing.append(f"{target}: a picture from elsewhere (keep it in the repository)")
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.is_relative_to(REPO) or str(path.relative_to(REPO)) not in held:
            missing.append(f"{target}: not a file the repository holds")
    assert not missing, f"{doc.relative_to(REPO)}: " + "; ".join(missing)
