"""`dtr namespaces`: an operator Deployment's flags and environment -> the namespaces it watches."""

from __future__ import annotations

from dtr_client import namespaces as ns


def deployment(args=(), env=None, name="dtr-operator", ready=1):
    container = {"name": "operator", "args": list(args),
                 "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}
    return {"metadata": {"namespace": "dtr-system", "name": name}, "spec": {"replicas": 1, "template": {"spec": {
        "containers": [{"name": "sidecar"}, container]}}}, "status": {"readyReplicas": ready}}  # fmt: skip


def test_flags_and_environment_are_read_as_dtr_operator_reads_them():
    assert ns.watched_namespaces(deployment(["--all-namespaces", "--metrics-port=9090"])) == ()
    assert ns.watched_namespaces(deployment(["--namespace=a", "-n", "b,c"])) == ("a", "b", "c")
    assert ns.watched_namespaces(deployment(env={"DTR_NAMESPACE": "x, y"})) == ("x", "y")
    assert ns.watched_namespaces(deployment(["--all-namespaces"], env={"DTR_NAMESPACE": "x"})) == ()


def test_report_says_whether_a_namespace_is_watched_and_by_whom():
    found = ns.watchers([deployment(["--namespace=ml"]), deployment([], env={"DTR_NAMESPACE": "b"}, name="other")])
    code, lines = ns.report(found, "ml")
    assert code == 0 and lines[0] == "namespace ml: watched by dtr-system/dtr-operator"
    assert "dtr-system/dtr-operator (ready 1/1) watches namespace(s) ml" in lines
    code, lines = ns.report(found, "default")
    assert code == 1 and lines[0].startswith("namespace default: NOT watched: runs created there get no status")
    assert ns.report(found, None)[0] == 0


def test_no_operator_at_all_says_how_to_install_one():
    code, lines = ns.report([], "ml")
    assert code == 1 and "no DistTrainingRun operator found" in lines[0] and "kubectl apply -k deploy/" in lines[0]


def test_an_invalid_other_setting_does_not_hide_the_namespaces():
    assert ns.watched_namespaces(deployment(["--namespace=ml", "--metrics-port=99999"])) == ("ml",)
    assert ns.watched_namespaces(deployment(["--all-namespaces"], env={"DTR_LOG_FORMAT": "xml"})) == ()
    assert ns.watched_namespaces(deployment([], env={"DTR_NAMESPACE": "a", "DTR_LOG_FORMAT": "xml"})) == ("a",)


def test_the_operator_container_else_the_first_and_only_literal_env_values_are_read():
    first_only = {"spec": {"template": {"spec": {"containers": [{"name": "main", "args": ["-n", "a"]}]}}}}
    assert ns.watched_namespaces(first_only) == ("a",)
    assert ns.watched_namespaces({}) == ()
    d = deployment(env={"DTR_NAMESPACE": "x"})
    d["spec"]["template"]["spec"]["containers"][1]["env"].append(
        {"name": "DTR_NAMESPACE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "ns"}}})
    assert ns.watched_namespaces(d) == ("x",)
