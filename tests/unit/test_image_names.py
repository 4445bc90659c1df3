"""The two image names: one home each, fully qualified everywhere (docs/images.md#names).

Homes: deploy/lib.sh for the scripts (and, through devcluster.node.image_names, the tests), fields.py for the
operator's default trainer image; the Deployment spells both because kustomize cannot read either, so it is tied
here. Everything else reads a home. A name without a registry host resolves to docker.io on a node (the name
whoever owns it there publishes), so no file may spell one.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import yaml
from dtr_operator.spec import DEFAULT_TRAINER_IMAGE

from devcluster.node import image_names

REPO = Path(__file__).resolve().parents[2]
OPERATOR, TRAINER = image_names()
# the project's two repositories, with whatever precedes them on the line
REFERENCE = re.compile(r"(?P<before>[\w./:${}-]*?)(?<![\w.-])distml/(?:trainer|operator)\b")
# where a default name may be spelled in full: its homes, what is generated from them, and the docs
DEFAULT_NAME_FILES = {"deploy/lib.sh", "operator/dtr_operator/fields.py", "deploy/base/deployment.yaml",
                      "crds/disttrainingrun.yaml", "examples/own-model/Dockerfile"}  # fmt: skip
# names as a run author may write them: the allow-list matcher's cases, the look-alike attacks; the page that
# explains why such names are not used; this file's own scan cases
UNQUALIFIED_ALLOWED = {"tests/unit/test_cli.py", "tests/reliability/attacks/supply.yaml", "docs/images.md",
                       "tests/unit/test_image_names.py", "operator/dtr_operator/imageref.py",
                       "operator/dtr_operator/settings.py", "tests/unit/test_image_refs.py",
                       "tests/reliability/attacks/policy.yaml"}  # fmt: skip


def tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if Path(p).suffix not in {".npz", ".png", ".tar", ".gz"}]


def spelled(pattern: re.Pattern[str]) -> list[tuple[str, int, str]]:
    found = []
    for path in tracked_text_files():
        try:
            lines = (REPO / path).read_text().splitlines()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        found += [(path, n, line.strip()) for n, line in enumerate(lines, 1) if pattern.search(line)]
    return found


def test_the_scripts_the_deployment_and_the_operator_name_the_same_images():
    deployment = yaml.safe_load((REPO / "deploy" / "base" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (container["image"], DEFAULT_TRAINER_IMAGE) == (OPERATOR, TRAINER)
    assert env["DTR_TRAINER_IMAGE"] == DEFAULT_TRAINER_IMAGE
    # the allow-list beside the default: any digest of its repository, never a tag (tags move)
    assert env["DTR_ALLOWED_IMAGES"] == DEFAULT_TRAINER_IMAGE.rsplit(":", 1)[0] + "@sha256:*"


def test_the_default_names_are_on_a_registry_host_that_serves_nothing():
    for name in (OPERATOR, TRAINER):
        host, _, path = name.partition("/")
        assert host == "localhost" and path.startswith("distml/"), name


def test_no_file_names_a_project_image_without_a_registry_host():
    unqualified = [(path, n, line) for path, n, line in spelled(REFERENCE)
                   if path not in UNQUALIFIED_ALLOWED
                   and any(not m["before"].endswith("/") for m in REFERENCE.finditer(line))]  # fmt: skip
    assert not unqualified, "\n".join(f"{p}:{n}: {line}" for p, n, line in unqualified)


def test_code_reads_the_default_names_from_their_homes():
    names = re.compile("(" + "|".join(re.escape(n) for n in (OPERATOR, TRAINER)) + r")(?![\w.-])")
    elsewhere = [(p, n, line) for p, n, line in spelled(names)
                 if p not in DEFAULT_NAME_FILES and not p.startswith("docs/")]  # fmt: skip
    assert not elsewhere, "\n".join(f"{p}:{n}: {line}" for p, n, line in elsewhere)


def test_the_scan_sees_what_it_looks_for():
    assert REFERENCE.search("FROM distml/trainer:1") and not REFERENCE.search("x registry.example/fooxdistml/trainer")
    assert [m["before"] for m in REFERENCE.finditer("a localhost/distml/trainer:1 and distml/operator")] == \
        ["localhost/", ""]


def shipped_settings():
    """The operator's settings as deploy/ runs it: its environment from the Deployment."""
    from dtr_operator import settings

    deployment = yaml.safe_load((REPO / "deploy" / "base" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return settings.from_args(parser.parse_args(container["args"]), env)


def test_the_shipped_allow_list_refuses_every_look_alike_attack_and_admits_the_default_and_its_digests():
    attacks = yaml.safe_load((REPO / "tests" / "reliability" / "attacks" / "supply.yaml").read_text())
    s = shipped_settings()
    assert attacks and all(a["reason"] == "ImageNotAllowed" and a["refused_by"] == "operator" for a in attacks)
    for attack in attacks:
        assert s.image_refusal(attack["spec"]["image"]) is not None, attack["id"]
    assert s.image_refusal(TRAINER) is None
    assert s.image_refusal(TRAINER.rsplit(":", 1)[0] + "@sha256:" + "0" * 64) is None
