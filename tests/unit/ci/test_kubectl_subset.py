"""The kubectl commands the tests' Cluster answers in-process (support/kubectl_subset.py): which, and in kubectl's
shape. That the answers equal kubectl's on a real API server: every tier that talks to one runs through them."""

import json

import pytest

from support.kubectl_subset import Request, answer, kubectl_name, plan


@pytest.mark.parametrize(
    ("args", "path", "query"),
    [
        (("get", "pods", "-n", "a", "-o", "json"), "/api/v1/namespaces/a/pods", {}),
        (("get", "pod", "p", "-n", "a", "-o", "json"), "/api/v1/namespaces/a/pods/p", {}),
        (("get", "pod/p", "--namespace=a", "-o", "json"), "/api/v1/namespaces/a/pods/p", {}),
        (("get", "pods", "-A", "-l", "x=y", "-o", "json"), "/api/v1/pods", {"labelSelector": "x=y"}),
        (("get", "node", "n1", "-o", "json"), "/api/v1/nodes/n1", {}),
        (("get", "pv", "-o", "json"), "/api/v1/persistentvolumes", {}),
        (
            ("get", "crd", "tfjobs.kubeflow.org", "-o", "json"),
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/tfjobs.kubeflow.org",
            {},
        ),
        (
            ("get", "networkpolicy", "r", "-n", "a", "-o", "json"),
            "/apis/networking.k8s.io/v1/namespaces/a/networkpolicies/r",
            {},
        ),
        (
            ("get", "pods", "-n", "a", "--field-selector", "status.phase=Running", "-o", "json"),
            "/api/v1/namespaces/a/pods",
            {"fieldSelector": "status.phase=Running"},
        ),
        (
            ("get", "distrainingruns", "r", "-n", "a", "-o", "json"),
            "/apis/distml.dev/v1alpha1/namespaces/a/disttrainingruns/r",
            {},
        ),  # a short name
    ],
)
def test_a_get_as_json_of_a_known_kind_is_one_request(args, path, query) -> None:
    request = plan(args)
    assert request is not None and (request.method, request.path, request.query) == ("GET", path, query)


@pytest.mark.parametrize(
    "args",
    [
        ("get", "pods", "-n", "a"),  # a table, not JSON
        ("get", "pods", "-n", "a", "-o", "jsonpath={.items}"),
        ("get", "pods", "-o", "json"),  # the kubeconfig's namespace: kubectl knows it
        ("get", "pods", "-n", "a", "-o", "json", "--as=mallory"),  # another identity
        ("get", "widgets", "-n", "a", "-o", "json"),  # a kind that needs discovery
        ("get", "pod", "p", "-A", "-o", "json"),  # kubectl refuses it
        ("get", "pods", "-n", "a", "-o", "json", "--ignore-not-found"),
        ("get", "events", "-n", "a", "-o", "json"),  # kubectl's 50 ms: tests/integration/operator_support.py
        ("delete", "namespace", "a"),  # kubectl waits for it to go
        ("delete", "namespace", "a", "--wait=false", "--timeout=9s"),
        ("create", "namespace", "a", "--dry-run=server"),
        ("apply", "-f", "-"),
    ],
)
def test_anything_else_goes_to_kubectl(args) -> None:
    assert plan(args) is None


def test_a_list_is_printed_as_kubectl_prints_it_each_item_with_its_kind() -> None:
    request = plan(("get", "pods", "-n", "a", "-o", "json"))
    body = json.dumps({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
                       "items": [{"metadata": {"name": "p"}}]})  # fmt: skip
    code, out, err = answer(request, 200, body)
    assert (code, err) == (0, "")
    assert json.loads(out) == {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
                               "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}]}  # fmt: skip


def test_an_error_is_kubectls_exit_1_and_its_line() -> None:
    request = plan(("get", "pod", "p", "-n", "a", "-o", "json"))
    body = json.dumps({"kind": "Status", "reason": "NotFound", "message": 'pods "p" not found', "code": 404})
    assert answer(request, 404, body) == (1, "", 'Error from server (NotFound): pods "p" not found\n')
    assert answer(request, 0, "connection refused")[0] == 1


def test_namespaces_are_created_and_deleted_without_waiting() -> None:
    create = plan(("create", "namespace", "t-x"))
    assert create == Request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                                 "metadata": {"name": "t-x"}},
                             done="namespace/t-x created")  # fmt: skip
    assert answer(create, 201, "{}") == (0, "namespace/t-x created\n", "")
    delete = plan(("delete", "namespace", "t-x", "--wait=false", "--ignore-not-found"))
    assert delete is not None and (delete.method, delete.path) == ("DELETE", "/api/v1/namespaces/t-x")
    assert answer(delete, 404, "{}") == (0, "", "")
    strict = plan(("delete", "namespace", "t-x", "--wait=false"))
    assert answer(strict, 404, json.dumps({"reason": "NotFound", "message": "gone"}))[0] == 1


def test_a_merge_patch_of_a_status_is_one_request_and_a_strategic_one_is_kubectls() -> None:
    request = plan(("patch", "pod", "p", "-n", "a", "--subresource=status", "--type=merge", "-p", '{"status": {}}'))
    assert request is not None
    assert (request.method, request.path, request.body, request.content_type) == (
        "PATCH",
        "/api/v1/namespaces/a/pods/p/status",
        {"status": {}},
        "application/merge-patch+json",
    )
    assert answer(request, 200, "{}") == (0, "pod/p patched\n", "")
    assert plan(("patch", "pod", "p", "-n", "a", "-p", '{"status": {}}')) is None
    assert plan(("patch", "node", "n", "--type", "json", "-p", "[]")).path == "/api/v1/nodes/n"


def test_can_i_is_the_access_review_kubectl_sends_as_the_user_it_impersonates() -> None:
    request = plan(("auth", "can-i", "list", "tfjobs.kubeflow.org", "-n", "a", "--as=system:serviceaccount:s:o"))
    assert request is not None and request.headers == {"Impersonate-User": "system:serviceaccount:s:o"}
    assert request.body["spec"]["resourceAttributes"] == {
        "verb": "list",
        "resource": "tfjobs",
        "group": "kubeflow.org",
        "namespace": "a",
    }
    every = plan(("auth", "can-i", "watch", "namespaces", "--all-namespaces", "--subresource=status"))
    assert every.body["spec"]["resourceAttributes"] == {
        "verb": "watch",
        "resource": "namespaces",
        "group": "",
        "namespace": "",
        "subresource": "status",
    }
    assert plan(("auth", "can-i", "create", "deployments", "-n", "a")).body["spec"]["resourceAttributes"]["group"] == (
        "apps"
    )
    assert answer(request, 201, '{"status": {"allowed": true}}') == (0, "yes\n", "")
    assert answer(request, 201, '{"status": {"allowed": false}}') == (1, "no\n", "")
    assert plan(("auth", "can-i", "create", "networkpolicies")) is None  # the kubeconfig's namespace
    assert plan(("auth", "can-i", "list", "widgets", "-n", "a")) is None  # a kind that needs discovery


def test_an_item_is_named_as_kubectl_get_o_name_prints_it() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "r"}}
    assert [kubectl_name(pod), kubectl_name(job)] == ["pod/p", "tfjob.kubeflow.org/r"]


def test_get_o_name_and_ignore_not_found_are_answered_as_kubectl_answers_them() -> None:
    listing = plan(("get", "dtr", "-n", "a", "-o", "name"))
    assert listing is not None and listing.names
    assert listing.path == "/apis/distml.dev/v1alpha1/namespaces/a/disttrainingruns"
    body = json.dumps({"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRunList",
                       "items": [{"metadata": {"name": "x"}}, {"metadata": {"name": "y"}}]})  # fmt: skip
    assert answer(listing, 200, body) == (0, "disttrainingrun.distml.dev/x\ndisttrainingrun.distml.dev/y\n", "")
    one = plan(("get", "pvc", "d", "-n", "a", "-o", "json", "--ignore-not-found"))
    assert one is not None and one.ignore_not_found and not one.names
    assert answer(one, 404, json.dumps({"reason": "NotFound", "message": "gone"})) == (0, "", "")
    assert plan(("get", "pvc", "d", "-n", "a", "-o", "yaml")) is None


def test_create_of_one_json_object_is_a_strict_post_that_kubectl_sends_again_when_refused() -> None:
    doc = {"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingRun", "metadata": {"name": "r", "namespace": "a"},
           "spec": {}}  # fmt: skip
    request = plan(("create", "-f", "-"), json.dumps(doc))
    assert request is not None and request.method == "POST" and request.body == doc and request.retry
    assert request.path == "/apis/distml.dev/v1alpha1/namespaces/a/disttrainingruns"
    assert request.query == {"fieldManager": "kubectl-create", "fieldValidation": "Strict"}  # kubectl's default
    made = json.dumps({**doc, "metadata": {**doc["metadata"], "uid": "u"}})
    assert answer(request, 201, made) == (0, "disttrainingrun.distml.dev/r created\n", "")
    warned = answer(request, 201, made, ('299 - "would violate PodSecurity \\"restricted:latest\\""',))
    assert warned[2] == 'Warning: would violate PodSecurity "restricted:latest"\n'
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}
    assert plan(("create", "-f", "-"), json.dumps(namespace)).path == "/api/v1/namespaces"  # type: ignore[union-attr]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    in_b = plan(("create", "-n", "b", "-f", "-"), json.dumps(pod))
    assert in_b is not None and in_b.path == "/api/v1/namespaces/b/pods"
    for args, stdin in [
        (("create", "-f", "-"), "apiVersion: v1\nkind: Pod\n"),  # YAML
        (("create", "--validate=false", "-f", "-"), json.dumps(doc)),  # a flag not read here
        (("create", "-f", "-"), json.dumps(pod)),  # no namespace: the kubeconfig's
        (("create", "-n", "b", "-f", "-"), json.dumps(doc)),  # two namespaces: kubectl's refusal
        (("create", "-f", "-"), json.dumps({**doc, "apiVersion": "distml.dev/v2"})),  # a version not served
        (("create", "-f", "-"), json.dumps({"apiVersion": "v1", "kind": "List", "items": []})),
        (("apply", "-f", "-"), json.dumps(doc)),
    ]:
        assert plan(args, stdin) is None, (args, stdin)
