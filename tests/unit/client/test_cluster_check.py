"""cluster_check: `dtr render --cluster`'s verdicts from the operators' Deployments, as the operator would judge
each run before creating anything (the node tier runs it against a real operator: tests/node/test_install.py)."""

from __future__ import annotations

from typing import Any

from dtr_client.cluster_check import refusals, verdicts
from dtr_operator.settings import Settings
from dtr_operator.spec import parse_run

from support.runs import run_doc


def operator(name: str = "dtr-operator", args: tuple[str, ...] = (), **env: str) -> dict[str, Any]:
    container = {"name": "operator", "args": ["--log-format=json", *args],
                 "env": [{"name": k, "value": v} for k, v in env.items()]}  # fmt: skip
    return {"metadata": {"namespace": "dtr-system", "name": name}, "spec": {"replicas": 1, "template": {"spec": {
        "containers": [container]}}}, "status": {"readyReplicas": 1}}  # fmt: skip


def run(name: str, namespace: str = "ml", **spec: Any) -> Any:
    return parse_run(run_doc(name, namespace, {"workers": 2, **spec}))


def test_a_run_within_the_operators_settings_would_be_accepted():
    code, lines = verdicts([run("fine")], [operator()])
    assert code == 0 and lines == ["ml/fine: the operator dtr-system/dtr-operator would accept it (watching all "
                                   "namespaces)"]  # fmt: skip


def test_every_refusal_is_named_with_the_operators_reason_and_the_exit_is_1():
    mine = run("mine", image="registry.example.com/me/trainer:1", priorityClassName="urgent",
               training={"code": {"configMap": "my-code"}})  # fmt: skip
    code, lines = verdicts([mine], [operator(DTR_USER_CODE="disallowed")])
    assert code == 1
    reasons = [line.split("would fail it: ")[1].split(":")[0] for line in lines]
    assert reasons == ["ImageNotAllowed", "UserCodeNotAllowed", "PriorityClassNotAllowed"], lines
    allowed = operator(args=("--allowed-priority-classes=urgent",),
                       DTR_ALLOWED_IMAGES="registry.example.com/me/*")  # fmt: skip
    assert verdicts([mine], [allowed])[0] == 0


def test_a_namespace_no_operator_watches_and_an_operator_that_cannot_start_are_said():
    code, lines = verdicts([run("lost", namespace="elsewhere")], [operator(args=("--namespace=ml",))])
    assert code == 1 and "no operator watches namespace elsewhere" in lines[0]
    code, lines = verdicts([run("r")], [operator(DTR_USER_CODE="sometimes")])
    assert code == 1 and "has an invalid setting and does not start: DTR_USER_CODE" in lines[0]


def test_refusals_match_the_operators_own_checks():
    settings = Settings(allowed_images=())
    assert refusals(run("r", image=settings.trainer_image), settings) == []
    assert refusals(run("r", image="docker.io/evil/x:1"), settings)[0].startswith("ImageNotAllowed: spec.image")
