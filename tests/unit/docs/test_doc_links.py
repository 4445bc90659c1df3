"""The docs' links and the scripts' pointers into the docs lead somewhere: every relative link's file exists,
every #anchor is a heading of that file (GitHub's slugs), and every "see docs/X.md, 'Section'" a script prints
names a heading of X. The kind of contradiction a newcomer meets first (shared review: newcomer.md, 2.5)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.repo import REPO

DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([\w.#/-][^)\s]*)\)")  # not a regex in a quoted message: "([-a-z0-9]*...)"
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
SCRIPT_POINTER = re.compile(r"docs/([\w.-]+\.md), '([^']+)'")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces as '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(path: Path) -> list[str]:
    """The file's headings, code blocks left out."""
    out, fenced = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            out.append(m.group(1))
    return out


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in headings(path):
        base = slug(h)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    out, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            prose = re.sub(r"`[^`]*`", "", line)  # a link's syntax inside inline code is not a link
            out += [(number, m.group(1)) for m in LINK.finditer(prose)]
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(doc: Path) -> None:
    broken = []
    for number, target in links(doc):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists():
            broken.append(f"{doc.name}:{number}: {target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{doc.name}:{number}: {target}: no heading #{anchor} in {path.name}")
    assert not broken, "\n".join(broken)


def test_every_docs_section_a_script_points_to_exists() -> None:
    scripts = [*(REPO / "deploy").rglob("*.sh"), *(REPO / "devcluster").glob("*.sh"), REPO / "dtr"]
    broken = []
    for script in scripts:
        for number, line in enumerate(script.read_text().splitlines(), 1):
            for name, section in SCRIPT_POINTER.findall(line):
                doc = REPO / "docs" / name
                if not doc.exists() or slug(section) not in anchors(doc):
                    broken.append(f"{script.relative_to(REPO)}:{number}: docs/{name}, '{section}'")
    assert not broken, "\n".join(broken)
