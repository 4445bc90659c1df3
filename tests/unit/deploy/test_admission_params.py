"""deploy/base/admission.yaml's policy on spec.training.params holds what the CRD cannot (fields_params.py), with the
contract's grammar (dtr_contract.params): its name rule is the contract's regex and its messages the contract's
words; a change to one side fails here."""

from __future__ import annotations

import re

import yaml
from dtr_contract import params

from support.repo import REPO

POLICY = "disttrainingruns.distml.dev-params"


def _policy() -> dict:
    docs = yaml.safe_load_all((REPO / "deploy" / "base" / "admission.yaml").read_text())
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == POLICY]
    return policy


def test_the_policys_names_are_the_contracts() -> None:
    names, values = _policy()["spec"]["validations"]
    assert f"k.matches('^{params.NAME}$')" in names["expression"]
    assert params.NAME_WORDS in " ".join(names["message"].split())
    assert params.VALUE_WORDS in values["message"]


def test_the_policy_is_bound_to_deny() -> None:
    docs = yaml.safe_load_all((REPO / "deploy" / "base" / "admission.yaml").read_text())
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"
                  and d["spec"]["policyName"] == POLICY]  # fmt: skip
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_every_value_type_the_contract_admits_is_one_the_policy_admits() -> None:
    expression = _policy()["spec"]["validations"][1]["expression"]
    assert set(re.findall(r"== (\w+)", expression)) == {"int", "double", "bool", "string"}
