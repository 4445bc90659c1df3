"""docs/clusters.md's recipe for serving another namespace (copy deploy/namespaced, rename `dtr-runs` with sed)
leaves the four places that must agree agreeing: the Namespace, the Role's and RoleBinding's namespace, and the
operator's --namespace; and the files it names are exactly those that name `dtr-runs`. The node tier applies the
original directory; this checks what the recipe changes, which kustomize does not."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from support.repo import REPO

NAMESPACED = REPO / "deploy" / "namespaced"
RECIPE = re.compile(r"cp -r deploy/namespaced deploy/(\S+) && sed -i 's/dtr-runs/(\S+)/g' deploy/\S+/\*\.yaml")


def served_namespaces(directory: Path) -> dict[str, str]:
    """Where each of the four places puts the served namespace."""
    docs = {p.name: next(yaml.safe_load_all(p.read_text())) for p in directory.glob("*.yaml")}
    patch = yaml.safe_load(docs["kustomization.yaml"]["patches"][0]["patch"])
    return {
        "Namespace": docs["namespace.yaml"]["metadata"]["name"],
        "Role": docs["role.yaml"]["metadata"]["namespace"],
        "RoleBinding": docs["rolebinding.yaml"]["metadata"]["namespace"],
        "--namespace": patch[0]["value"].removeprefix("--namespace="),
    }


def test_the_shipped_directory_agrees_on_dtr_runs() -> None:
    assert set(served_namespaces(NAMESPACED).values()) == {"dtr-runs"}


def test_the_documented_rename_changes_all_four_places(tmp_path: Path) -> None:
    recipe = RECIPE.search((REPO / "docs" / "clusters.md").read_text())
    assert recipe, "docs/clusters.md no longer gives the copy-and-rename recipe"
    copy_name, new = recipe.groups()
    assert copy_name == new
    copy = tmp_path / copy_name
    shutil.copytree(NAMESPACED, copy)
    for path in copy.glob("*.yaml"):  # what the sed does
        path.write_text(path.read_text().replace("dtr-runs", new))
    assert served_namespaces(copy) == dict.fromkeys(("Namespace", "Role", "RoleBinding", "--namespace"), new)


def test_the_files_the_docs_name_are_those_that_name_dtr_runs() -> None:
    text = (REPO / "docs" / "clusters.md").read_text()
    named = set(re.findall(r"`(\w+\.yaml)`", text[text.index("To serve another namespace"):][:400]))
    assert named == {p.name for p in NAMESPACED.glob("*.yaml") if "dtr-runs" in p.read_text()}
