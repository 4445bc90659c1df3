"""The two image names live in three languages: the deploy scripts (deploy/lib.sh), the operator's
Deployment (deploy/base/deployment.yaml) and the operator's default trainer image (spec.py)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from dtr_operator.spec import DEFAULT_TRAINER_IMAGE

REPO = Path(__file__).resolve().parents[2]


def test_the_scripts_the_deployment_and_the_operator_name_the_same_images():
    lib = dict(re.findall(r'\b(OPERATOR_IMAGE|TRAINER_IMAGE)="([^"]+)"', (REPO / "deploy" / "lib.sh").read_text()))
    deployment = yaml.safe_load((REPO / "deploy" / "base" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert lib == {"OPERATOR_IMAGE": container["image"], "TRAINER_IMAGE": DEFAULT_TRAINER_IMAGE}
    assert env["DTR_TRAINER_IMAGE"] == DEFAULT_TRAINER_IMAGE
