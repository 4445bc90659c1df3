"""devcluster/versions.env is the one home of every pinned version; what cannot read it is tied to it here.

deploy/install.sh and deploy/doctor.sh source the file. The operator's image has no devcluster/, so the
operator's install hint carries the training-operator's version as a literal; docs/cluster.md's tables
state each pin for the reader.
"""

from __future__ import annotations

import re
import subprocess

from devcluster import node
from support.repo import REPO

PINS = node.pinned(node.HERE / "versions.env")
VERSION = re.compile(r"\bv\d+\.\d+\.\d+\b")


def test_the_operator_names_the_pinned_training_operator_in_its_install_hint() -> None:
    refs = [ref for path in sorted((REPO / "operator" / "dtr_operator").rglob("*.py"))
            for ref in re.findall(r"training-operator\.git/\S*\?ref=(v[\w.-]+)", path.read_text())]  # fmt: skip
    assert refs, "no training-operator install hint found in the operator"
    assert set(refs) == {PINS["TRAINING_OPERATOR_VERSION"]}


def test_install_sh_installs_the_pinned_training_operator() -> None:
    """The overlay install.sh would apply, as bash computes it from install.sh's own settings lines."""
    script = (REPO / "deploy" / "install.sh").read_text()
    start = script.index("\n", script.index('source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"'))
    end = script.index("\n", script.index("readonly TRAINING_OPERATOR_KUSTOMIZE="))
    settings = f'source lib.sh\n{script[start:end]}\necho "$TRAINING_OPERATOR_KUSTOMIZE"'
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", settings], cwd=REPO / "deploy", capture_output=True,
                          text=True, timeout=30, check=False, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith(f"/manifests/overlays/standalone?ref={PINS['TRAINING_OPERATOR_VERSION']}")


def table_versions(markdown: str, *sections: str) -> set[str]:
    """Every vX.Y.Z in the table rows of these `## ` sections of a markdown page."""
    bodies = [markdown[markdown.index(f"## {title}\n"):].split("\n## ", 1)[0] for title in sections]
    rows = [line for body in bodies for line in body.splitlines() if line.startswith("| ")]
    return {version for row in rows for version in VERSION.findall(row)}


def test_every_version_in_the_cluster_docs_tables_is_a_pin() -> None:
    """docs/cluster.md's tables of what is built and what the node runs (the staging modules follow k8s: v0.X.Y)."""
    k8s_staging = "v0." + PINS["K8S_VERSION"].split(".", 1)[1]
    pinned = {v for v in PINS.values() if VERSION.fullmatch(v)} | {k8s_staging}
    stated = table_versions((REPO / "docs" / "cluster.md").read_text(), "What is built", "The real node")
    assert PINS["TRAINING_OPERATOR_VERSION"] in stated
    assert stated <= pinned, f"not the pins of devcluster/versions.env: {sorted(stated - pinned)}"


def test_kopf_is_pinned_exactly_and_to_one_version_in_every_file_that_names_it() -> None:
    """The operator stands in for parts of kopf through its private API (runtime/kopf_seams.py): a range in the
    package would let pip install a kopf the seam tests never saw."""
    files = [REPO / "operator" / "pyproject.toml", REPO / "operator" / "requirements.txt",
             *sorted((REPO / "operator" / "dtr_operator").rglob("*.py"))]  # fmt: skip
    named = {path.relative_to(REPO).as_posix(): re.findall(r"\bkopf\s*(?:==|>=|~=|<|\s)\s*(\d+\.\d+(?:\.\d+)?)",
                                                           path.read_text()) for path in files}  # fmt: skip
    versions = {version for found in named.values() for version in found}
    assert re.search(r'"kopf==\d+\.\d+\.\d+"', (REPO / "operator" / "pyproject.toml").read_text())
    pinned = re.search(r"^kopf==(\S+)$", (REPO / "operator" / "requirements.txt").read_text(), re.M)
    assert pinned is not None and versions == {pinned.group(1)}, named
