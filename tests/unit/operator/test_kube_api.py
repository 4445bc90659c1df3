"""The KubeApi Protocol ties kube.Kube and the unit tier's fake API (support.fake_kube) together: the same methods
with the same signatures, so a renamed or changed Kube method fails here; and the fake plays the API server's part
as Kube meets it (resourceVersions, conflicts, merge patches, errors), which the rest of the unit tier relies on."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from dtr_operator.api import JOB_NAME_LABEL
from dtr_operator.kube import AlreadyExists, ApiError, Conflict, Kube, NotFound, ResourceMissing
from dtr_operator.kube_api import KubeApi

from support.fake_kube import FakeKube
from support.runs import make_run


def protocol_methods() -> list[str]:
    return sorted(name for name, value in vars(KubeApi).items() if inspect.isfunction(value) and name[0] != "_")


def shape(method: Callable[..., Any]) -> inspect.Signature:
    """The method's signature as its callers see it: an @asynccontextmanager generator (AsyncIterator[X]) gives them
    an AbstractAsyncContextManager[X], which is how the Protocol spells it."""
    signature = inspect.signature(method)
    if inspect.isasyncgenfunction(inspect.unwrap(method)):
        returns = re.sub(r"^AsyncIterator\[(.*)\]$", r"AbstractAsyncContextManager[\1]", signature.return_annotation)
        signature = signature.replace(return_annotation=returns)
    return signature


def mismatches(cls: type) -> list[str]:
    """Each Protocol method that `cls` lacks or spells differently (names, kinds, defaults, annotations)."""
    out = []
    for name in protocol_methods():
        method = getattr(cls, name, None)
        if method is None:
            out.append(f"{cls.__name__}.{name}: missing")
        elif shape(method) != shape(getattr(KubeApi, name)):
            out.append(f"{cls.__name__}.{name}{shape(method)} is not KubeApi.{name}{shape(getattr(KubeApi, name))}")
    return out


@pytest.mark.parametrize("cls", [Kube, FakeKube])
def test_kube_and_the_fake_have_every_method_of_the_protocol_with_its_signature(cls: type) -> None:
    assert protocol_methods(), "the Protocol names the calls"
    assert not mismatches(cls), "\n".join(mismatches(cls))


def test_a_missing_or_different_method_is_named() -> None:
    class Drifted(FakeKube):
        get_run = None  # type: ignore[assignment]

        def get_pvc(self, namespace: str, claim: str) -> dict[str, Any] | None:  # type: ignore[override]
            return None

    found = mismatches(Drifted)
    assert "Drifted.get_run: missing" in found and any(m.startswith("Drifted.get_pvc(self, namespace") for m in found)
    assert len(found) == 2


def test_every_public_kube_method_but_its_constructors_and_one_it_keeps_is_in_the_protocol() -> None:
    """A method added to Kube for its callers is added to the Protocol (and so to the fake) too."""
    own = {"from_environment", "for_cli", "tfjob_crd_served"}
    public = {n for n, v in vars(Kube).items() if n[0] != "_" and (inspect.isfunction(v) or hasattr(v, "__wrapped__"))}
    assert public - own == set(protocol_methods())


# ---- the fake plays the API server's part --------------------------------------------------------------


def test_the_store_issues_uids_and_rising_resource_versions_and_refuses_a_second_create() -> None:
    fake = FakeKube()
    made = fake.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ml"}})
    again = fake.put({"metadata": {"name": "d"}, "data": {}}, kind="ConfigMap")
    assert made["metadata"]["uid"] != again["metadata"]["uid"]
    assert int(again["metadata"]["resourceVersion"]) > int(made["metadata"]["resourceVersion"])
    with pytest.raises(AlreadyExists):
        fake.create(made)
    fetched = fake.get_configmap("ml", "c")
    assert fetched == made and fetched is not made
    fetched["data"] = {"x": "y"}  # a copy: the store keeps its own
    assert "data" not in (fake.get_configmap("ml", "c") or {})


def test_a_status_patch_with_a_stale_version_conflicts_and_a_merge_patch_deletes_with_none() -> None:
    fake = FakeKube()
    fake.put(make_run({"workers": 2}, resourceVersion="7", generation=1, uid="u-1"))
    fake.put({**make_run({}, name="other"), "status": {"phase": "Pending"}})
    written = fake.patch_run_status("ml", "mnist-cnn", {"phase": "Pending", "reason": "X", "message": "m"}, "7")
    assert int(written["metadata"]["resourceVersion"]) > 8 and written["metadata"]["generation"] == 1
    with pytest.raises(Conflict):
        fake.patch_run_status("ml", "mnist-cnn", {"phase": "Running"}, "7")
    patched = fake.patch_run_status("ml", "mnist-cnn", {"reason": None, "conditions": [{"type": "A"}]}, None)
    assert patched["status"] == {"phase": "Pending", "message": "m", "conditions": [{"type": "A"}]}
    spec = fake.patch_run_spec("ml", "mnist-cnn", {"suspend": True})
    assert spec["spec"] == {"workers": 2, "suspend": True} and spec["metadata"]["generation"] == 2
    with pytest.raises(NotFound):
        fake.patch_run_status("ml", "gone", {"phase": "Running"}, None)
    assert [c.method for c in fake.calls if c.error] == ["patch_run_status", "patch_run_status"]
    assert [a["status"].get("reason") for a in fake.succeeded("patch_run_status")] == ["X", None]


def test_the_tfjob_crd_can_be_missing_and_its_run_policy_is_merge_patched() -> None:
    fake = FakeKube()
    tfjob = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "j", "namespace": "ml"},
             "spec": {"runPolicy": {"cleanPodPolicy": "None"}}}  # fmt: skip
    fake.create(tfjob)
    patched = fake.patch_tfjob_run_policy("ml", "j", annotations={"a": "b"}, suspend=True)
    assert patched["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "suspend": True}
    assert patched["metadata"]["annotations"] == {"a": "b"}
    assert fake.succeeded("patch_tfjob_run_policy") == [{"namespace": "ml", "name": "j", "annotations": {"a": "b"},
                                                         "suspend": True}]  # fmt: skip
    fake.tfjob_crd = False
    with pytest.raises(ResourceMissing):
        fake.get_tfjob("ml", "j")
    with pytest.raises(ResourceMissing):
        fake.create({**tfjob, "metadata": {"name": "k", "namespace": "ml"}})
    fake.delete("kubeflow.org/v1", "TFJob", "ml", "gone")  # Kube's delete: gone already is fine


def test_pods_by_job_label_their_logs_events_and_a_created_pods_statuses() -> None:
    fake = FakeKube()
    for name, job in (("j-worker-0", "j"), ("k-worker-0", "k")):
        fake.put({"metadata": {"name": name, "labels": {JOB_NAME_LABEL: job}}}, kind="Pod")
    assert [p["metadata"]["name"] for p in fake.list_job_pods("ml", "j")] == ["j-worker-0"]
    assert len(fake.list_pods("ml")) == 2 and fake.list_pods("other") == []
    fake.set_log("j-worker-0", "a\nb\nc\n")
    fake.set_log("j-worker-0", "before\n", previous=True)
    assert fake.pod_log("ml", "j-worker-0", "tensorflow", tail_lines=2) == "b\nc\n"
    assert fake.pod_log("ml", "j-worker-0", "tensorflow", previous=True) == "before\n"
    assert fake.pod_log("ml", "j-worker-0", "other") is None and fake.pod_log("ml", "k-worker-0", "tensorflow") is None
    assert list(fake.follow_pod_log("ml", "j-worker-0", "tensorflow", 1)) == ["c"]
    with pytest.raises(ApiError, match="waiting to start") as err:
        list(fake.follow_pod_log("ml", "k-worker-0", "tensorflow", None))
    assert err.value.status == 400
    fake.add_event("Pod", "j-worker-0", "FailedMount", "Multi-Attach error", lastTimestamp="t")
    [event] = fake.pod_events("ml", "j-worker-0")
    assert (event["reason"], event["lastTimestamp"]) == ("FailedMount", "t")
    assert fake.object_events("ml", "Pod", "x") == []
    fake.pod_statuses = [{"phase": "Pending"}, {"phase": "Running"}]
    fake.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}})
    phases = [(fake.get_pod("ml", "p") or {})["status"]["phase"] for _ in range(3)]
    assert phases == ["Pending", "Running", "Running"]
    fake.delete_pod("ml", "p")
    assert fake.get_pod("ml", "p") is None


def test_request_lists_a_collection_by_label_in_a_namespace_or_everywhere() -> None:
    fake = FakeKube()
    fake.put({"metadata": {"name": "op", "namespace": "a", "labels": {"app": "dtr"}}}, kind="Deployment")
    fake.put({"metadata": {"name": "other", "namespace": "b", "labels": {"app": "x"}}}, kind="Deployment")
    found = fake.request("GET", "/apis/apps/v1/deployments", query=[("labelSelector", "app=dtr")])
    assert [d["metadata"]["name"] for d in found["items"]] == ["op"]
    assert fake.request("GET", "/apis/apps/v1/namespaces/b/deployments")["items"][0]["metadata"]["name"] == "other"
    with pytest.raises(ApiError) as err:
        fake.request("POST", "/apis/apps/v1/namespaces/b/deployments", body={})
    assert err.value.status == 405


def test_a_fault_fails_the_calls_it_names_and_then_lets_them_through() -> None:
    fake = FakeKube()
    fake.fail("get_run", ApiError(503, "ServiceUnavailable", "etcd is down"), times=2)
    fake.fail("get_pvc", ApiError(403, "Forbidden", "no"), times=None, when=lambda args: args["name"] == "x")
    for _ in range(2):
        with pytest.raises(ApiError, match="etcd is down"):
            fake.get_run("ml", "r")
    assert fake.get_run("ml", "r") is None and fake.get_pvc("ml", "y") is None
    for _ in range(3):
        with pytest.raises(ApiError, match="no"):
            fake.get_pvc("ml", "x")
    assert [(c.method, c.error is not None) for c in fake.calls][:3] == [("get_run", True)] * 2 + [("get_run", False)]
    assert fake.succeeded("get_run") == [{"namespace": "ml", "name": "r"}]


def test_a_session_reaches_the_tests_far_end_or_is_refused_as_the_handshake_would() -> None:
    fake = FakeKube()
    fake.put({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}, kind="Pod")

    @contextlib.asynccontextmanager
    async def far_end(pod: str, container: str, argv: Any) -> AsyncIterator[str]:
        yield f"{pod}/{container}: {' '.join(argv)}"

    async def session(pod: str, container: str) -> str:
        async with fake.exec_stream("ml", pod, container, ["ls"]) as stream:
            return stream  # type: ignore[return-value]

    statuses = []
    for pod, container in (("p", "c"), ("gone", "c"), ("p", "sidecar")):
        with pytest.raises(ApiError) as err:
            asyncio.run(session(pod, container))
        statuses.append(err.value.status)
    assert statuses == [501, 404, 400], "no far end given, no pod, no such container"
    fake.exec = far_end
    assert asyncio.run(session("p", "c")) == "p/c: ls"
