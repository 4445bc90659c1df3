"""The image of dtr's transfer pods (dtr_client.images): one the cluster's nodes have, never this machine's default.
The order (asked for, the watching operator's default, the run's), each source's refusal, and the error naming what
to give, against the fake API; on the real API server with a user who may or may not read the operator's Deployment:
tests/integration/test_first_day.py."""

from __future__ import annotations

import pytest
from dtr_client import images
from dtr_operator.builders import build_tfjob
from dtr_operator.kube import ApiError
from dtr_operator.spec import DEFAULT_TRAINER_IMAGE, parse_run

from support.fake_kube import CLUSTER_TRAINER_IMAGE, FakeKube, operator_deployment
from support.runs import UNIT_NAMESPACE as NS
from support.runs import make_run, run_doc

CUSTOM = "registry.example:5000/ml/own-trainer@sha256:" + "1" * 64
FORBIDDEN = ApiError(403, "Forbidden", "deployments.apps is forbidden")


def choose(fake: FakeKube, option: str | None = None, run: str | None = None, **env: str) -> images.Found:
    return images.cluster_image(fake, NS, option, run, env)


def test_asked_for_comes_first_then_the_watching_operators_default():
    fake = FakeKube(NS)
    fake.put(operator_deployment(NS))
    assert choose(fake, "mine:1", DTR_TRAINER_IMAGE="env:2") == images.Found("mine:1", "--image")
    assert choose(fake, DTR_TRAINER_IMAGE="env:2") == images.Found("env:2", "DTR_TRAINER_IMAGE")
    found = choose(fake)
    assert found.image == CLUSTER_TRAINER_IMAGE
    assert found.why == f"the default trainer image of dtr-system/dtr-operator, the operator watching {NS}"


def test_only_an_operator_that_watches_the_namespace_counts():
    fake = FakeKube(NS)
    fake.put(operator_deployment("other-team", image="other:1"))
    with pytest.raises(images.NoImage, match=f"no operator's Deployment found watching namespace {NS}"):
        choose(fake)
    everywhere = operator_deployment(image="all:1")
    everywhere["metadata"]["namespace"] = "dtr-all"
    fake.put(everywhere)
    assert choose(fake).image == "all:1"


def test_an_operator_without_an_image_setting_gives_its_built_in_default():
    fake = FakeKube(NS)
    bare = operator_deployment(NS)
    bare["spec"]["template"]["spec"]["containers"][0]["env"] = []
    fake.put(bare)
    assert choose(fake).image == DEFAULT_TRAINER_IMAGE  # what that operator really gives runs


def test_when_deployments_cannot_be_read_the_runs_workers_image_then_its_spec_image():
    fake = FakeKube(NS)
    fake.put(operator_deployment(NS))
    fake.fail("request", FORBIDDEN, times=None)
    fake.put(make_run({"image": CUSTOM}, name="r"))
    assert choose(fake, run="r") == images.Found(CUSTOM, "r's spec.image")
    fake.put(build_tfjob(parse_run(make_run({}, name="r"), default_image="from-the-operator:3")))
    assert choose(fake, run="r") == images.Found("from-the-operator:3", "the image of r's workers (its TFJob)")
    fake.fail("get_tfjob", ApiError(403, "Forbidden", "tfjobs is forbidden"), times=None)
    assert choose(fake, run="r").image == CUSTOM


def test_with_nothing_to_read_it_refuses_naming_each_reason_and_what_to_give():
    fake = FakeKube(NS)
    fake.fail("request", FORBIDDEN, times=None)
    fake.put(run_doc("r", NS, {}))
    with pytest.raises(images.NoImage) as refused:
        choose(fake, run="r")
    message = str(refused.value)
    for part in ("no --image, no DTR_TRAINER_IMAGE", "the operators' Deployments cannot be read (forbidden to you)",
                 "r names no spec.image and its TFJob cannot be read", "--image IMAGE or DTR_TRAINER_IMAGE=IMAGE"):
        assert part in message, message
    assert DEFAULT_TRAINER_IMAGE not in message
    with pytest.raises(images.NoImage, match="no run gone to take an image from"):
        choose(fake, run="gone")


def test_the_chooser_asks_only_when_the_pod_is_made_and_says_where_the_image_came_from():
    fake = FakeKube(NS)
    said: list[str] = []
    choose_later = images.chooser(fake, NS, None, None, said.append)
    assert not fake.calls, "nothing asked before the pod is made (a model in a bucket needs none)"
    fake.put(operator_deployment(NS))
    assert choose_later() == CLUSTER_TRAINER_IMAGE
    assert said == [f"the transfer pod's image: {CLUSTER_TRAINER_IMAGE} (the default trainer image of "
                    f"dtr-system/dtr-operator, the operator watching {NS})"]  # fmt: skip
