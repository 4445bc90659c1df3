"""The process node's small pure helpers (dtr_operator.local.node)."""

import pytest
from dtr_operator.local import node as n


def pod(*containers, labels=None):
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": labels or {}},
        "spec": {"containers": list(containers), "serviceAccountName": "sa"},
    }


def test_main_container_is_tensorflow_or_the_only_one():
    tf, side, other = {"name": "tensorflow"}, {"name": "sidecar"}, {"name": "main"}
    assert n.main_container(pod(side, tf)) is tf
    assert n.main_container(pod(other)) is other
    assert n.main_container(pod(side, other)) is None


def test_pod_fields_for_the_downward_api():
    fields = n.pod_fields(pod({"name": "c"}, labels={"app": "x"}), "dtr-local")
    assert fields["metadata.name"] == "p" and fields["metadata.namespace"] == "ns"
    assert fields["metadata.uid"] == "u-1" and fields["spec.nodeName"] == "dtr-local"
    assert fields["status.podIP"] == "127.0.0.1" and fields["spec.serviceAccountName"] == "sa"
    assert fields["metadata.labels['app']"] == "x"


def test_parse_images():
    assert n.parse_images(["distml/trainer:*=/py", "a=b=c"]) == {"distml/trainer:*": "/py", "a": "b=c"}
    for bad in ("no-equals", "=/py", "img="):
        with pytest.raises(SystemExit, match="IMAGE=PYTHON"):
            n.parse_images([bad])
