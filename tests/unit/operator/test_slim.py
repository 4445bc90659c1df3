"""What the operator keeps of each run in memory (reconcile.slim: the index of runs, the Running runs) is bounded
and small whatever the run's size, and parses to the same values for everything its readers use (the TFJob
events, the progress poll, the status writes)."""

from __future__ import annotations

import dataclasses
import json

from dtr_operator.runtime.kept import KEPT_METADATA, slim
from dtr_operator.spec import parse_run

from support.maximal import key, max_name, maximal_spec
from support.runs import run_doc

# The most a kept run takes, in characters of compact JSON, for the largest spec (with a status as written).
MAX_KEPT_CHARS = 8 * 1024


def _largest_run() -> dict:
    body = run_doc(max_name(), "team-a", maximal_spec(), uid="u-1", resourceVersion="12", generation=3,
                   labels={key(i): "v" * 63 for i in range(20)}, annotations={"note": "a" * 200_000},
                   managedFields=[{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:x": {}}}}] * 50)  # fmt: skip
    body["status"] = {"phase": "Running", "reason": "TFJobRunning", "message": "m" * 400, "tfJob": max_name()}
    return body


def _chars(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def test_a_kept_run_is_small_whatever_the_run_carries():
    body = _largest_run()
    kept = slim(body)
    assert _chars(kept) <= MAX_KEPT_CHARS < _chars(body["spec"])
    assert kept["spec"]["export"] == {"modelName": body["spec"]["export"]["modelName"]}, "who else may publish: TFJob's"
    assert set(kept["metadata"]) == set(KEPT_METADATA) - {"deletionTimestamp"}
    assert kept["status"] == body["status"] and kept["kind"] == body["kind"]


def test_a_kept_run_parses_to_what_its_readers_use():
    body = _largest_run()
    full, kept = parse_run(body), parse_run(slim(body))
    read = ("name", "namespace", "uid", "generation", "workers", "suspend", "queue_name", "training", "code",
            "storage", "resources", "pvc_name", "tfjob_name", "disruption")  # fmt: skip
    full = dataclasses.replace(full, training=dataclasses.replace(full.training, params={}))  # the TFJob's alone
    assert {a: getattr(kept, a) for a in read} == {a: getattr(full, a) for a in read}
    assert kept.training.params == {} != parse_run(body).training.params


def test_a_kept_run_is_a_copy():
    body = _largest_run()
    kept = slim(body)
    kept["status"]["phase"] = "Failed"
    kept["spec"]["training"]["metric"] = "x"
    assert body["status"]["phase"] == "Running" and body["spec"]["training"]["metric"] != "x"


# ---- what kopf keeps as a run's last handled configuration (kopf_seams.SuspendDiffBase) --------------------------


def test_kopf_stores_spec_suspend_of_the_largest_run_not_its_spec():
    import kopf
    from dtr_operator.runtime.kopf_seams import SuspendDiffBase

    body = kopf.Body(_largest_run())
    storage = SuspendDiffBase()
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    [stored] = patch["metadata"]["annotations"].values()
    assert json.loads(stored) == {"spec": {"suspend": True}}


def test_kopf_tells_a_change_of_spec_suspend_alone_and_keeps_a_field_a_handler_names():
    from dtr_operator.runtime.kopf_seams import essence

    running, suspended = run_doc("r", "ml", {"workers": 2}), run_doc("r", "ml", {"workers": 3, "suspend": True})
    assert essence(running) == {} != essence(suspended) == {"spec": {"suspend": True}}
    assert essence(run_doc("r", "ml", {"workers": 3}), [("spec", "workers")]) == {"spec": {"workers": 3}}
    assert essence({**running, "status": {"phase": "Running"}}, ["status.phase"]) == {"status": {"phase": "Running"}}


def test_a_run_kopf_stored_as_handled_is_known_as_such_whatever_the_operator_that_stored_it():
    from dtr_operator.runtime.kopf_seams import handled_before

    doc = run_doc("r", "ml", {"workers": 2})
    stored = {"kopf.zalando.org/last-handled-configuration": json.dumps({"spec": {"suspend": False}})}
    older = {"kopf.zalando.org/last-handled-configuration": json.dumps({"spec": doc["spec"]})}
    assert not handled_before(doc)
    assert handled_before({**doc, "metadata": {**doc["metadata"], "annotations": stored}})
    assert handled_before({**doc, "metadata": {**doc["metadata"], "annotations": older}})


def test_a_run_stored_by_an_older_operator_resumes_not_updates():
    """The annotation of an operator before SuspendDiffBase holds the whole spec: read as spec.suspend alone, kopf
    finds no difference on the first listing and calls the resume handler (kopf.causes: RESUME needs no diff)."""
    import kopf
    from dtr_operator.runtime.kopf_seams import SuspendDiffBase

    doc = run_doc("r", "ml", {"workers": 2, "suspend": False})
    old = json.dumps({"spec": doc["spec"], "metadata": {"labels": {"a": "b"}}})
    body = kopf.Body(
        {**doc, "metadata": {**doc["metadata"], "annotations": {"kopf.zalando.org/last-handled-configuration": old}}}
    )
    storage = SuspendDiffBase()
    fetched, built = storage.fetch(body=body), storage.build(body=body)
    assert fetched == built == {"spec": {"suspend": False}}
    from kopf._cogs.structs.diffs import diff  # what kopf compares them with (causes.detect_changing_cause)

    assert not diff(fetched, built)
    never_handled = kopf.Body({**doc, "metadata": {**doc["metadata"], "annotations": {}}})
    assert storage.fetch(body=never_handled) is None  # still a creation


# ---- what kopf's watch keeps of each event before it queues it (kopf_seams.py) ----------------------------------


def _largest_tfjob() -> dict:
    from dtr_operator.builders import build_tfjob

    from support.maximal import expanding_spec

    run = parse_run(run_doc(max_name(), "team-a", expanding_spec(), uid="u-1", generation=3))
    tfjob = build_tfjob(run)
    tfjob["metadata"].update(
        uid="t-1",
        resourceVersion="40",
        managedFields=[{"manager": "dtr-operator", "fieldsV1": {"f:spec": {"f:x": {}}}}] * 50,
    )
    tfjob["status"] = {"conditions": [{"type": "Created", "status": "True", "reason": "TFJobCreated"},
                                      {"type": "Running", "status": "True", "reason": "TFJobRunning"}],
                       "replicaStatuses": {"Worker": {"active": 63, "failed": 1}}}  # fmt: skip
    return tfjob


def test_a_watched_run_keeps_what_kopf_and_the_handlers_read_and_little_else():
    from dtr_operator.runtime.kopf_seams import run_object

    body = _largest_run()
    body["metadata"].update(finalizers=["f"], ownerReferences=[{"uid": "o"}], deletionTimestamp="2026-12-02T00:00:00Z")
    kopf_own = {"kopf.zalando.org/last-handled-configuration": '{"spec": {"suspend": true}}'}
    body["metadata"]["annotations"] = {**kopf_own, "kubectl.kubernetes.io/last-applied-configuration": "x" * 90_000}
    watched = run_object(body)
    assert _chars(watched) <= MAX_KEPT_CHARS + _chars(body["metadata"]) - _chars(body["metadata"]["managedFields"]) \
        - 90_000
    body["metadata"]["labels"] = {f"l{i}": "v" * 63 for i in range(32)}
    watched = run_object(body)
    kept = ("name", "namespace", "uid", "resourceVersion", "generation", "finalizers", "deletionTimestamp")
    assert watched["metadata"] == {**{k: body["metadata"][k] for k in kept}, "annotations": kopf_own}
    assert "kubectl.kubernetes.io/last-applied-configuration" in body["metadata"]["annotations"]  # a copy, not cut
    assert slim(watched) == slim(body)  # the index of runs and the Running runs keep the same
    assert watched["spec"]["suspend"] is True and "affinity" not in watched["spec"]


def test_a_watched_tfjob_mirrors_into_the_same_status_as_the_whole_one():
    from dtr_operator.reconcile import decide
    from dtr_operator.runtime.kopf_seams import tfjob_object
    from dtr_operator.status.compute import tfjob_status
    from dtr_operator.status.state import kueue_queue, suspended_by_other, tfjob_state, worker_counts

    tfjob = _largest_tfjob()
    watched = tfjob_object(tfjob)
    assert _chars(watched) < _chars(tfjob) / 20
    run = parse_run(run_doc(max_name(), "team-a", {"workers": 64}, uid="u-1", generation=3))
    for read in (decide.controller_run, decide.has_news, decide.tfjob_suspended, tfjob_state,
                 worker_counts, kueue_queue, suspended_by_other):  # fmt: skip
        assert read(watched) == read(tfjob), read.__name__
    assert tfjob_status(run, watched, [], {}, "t") == tfjob_status(run, tfjob, [], {}, "t")


def test_only_events_with_an_object_are_slimmed():
    from dtr_operator.runtime.kopf_seams import slimmed

    def cut(obj):
        return {"cut": obj["metadata"]["name"]}

    added = {"type": "ADDED", "object": {"metadata": {"name": "r"}}}
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 410}}
    assert slimmed(added, cut) == {"type": "ADDED", "object": {"cut": "r"}}
    assert slimmed(error, cut) is error and slimmed("LISTED", cut) == "LISTED"


def test_the_wrapped_kopf_watch_slims_runs_tfjobs_and_networkpolicies_only_and_is_installed_once(monkeypatch):
    """kopf's queueing calls watching.infinite_watch by attribute (the seam kopf_seams.install_slim_watch wraps): if a
    kopf upgrade moves it, this test fails rather than the operator's memory quietly growing back."""
    import asyncio
    import inspect

    from dtr_operator.runtime import kopf_seams
    from kopf._cogs.clients import watching
    from kopf._cogs.structs.references import Resource
    from kopf._core.reactor import queueing

    assert "watching.infinite_watch(" in inspect.getsource(queueing.watcher)
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "r", "managedFields": [{"manager": "kubectl"}] * 50,
                           "labels": {"distml.dev/run": "r"}},
              "spec": {"podSelector": {}, "ingress": [{}]}}  # fmt: skip
    events = [{"type": "ADDED", "object": _largest_run()}, {"type": "MODIFIED", "object": _largest_tfjob()},
              {"type": "MODIFIED", "object": policy}]  # fmt: skip

    async def original(*, resource, **_):
        for event in events:
            yield event

    monkeypatch.setattr(watching, "infinite_watch", original)
    kopf_seams.install_slim_watch()
    kopf_seams.install_slim_watch()
    assert watching.infinite_watch is not original

    async def collect(group: str, plural: str) -> list:
        resource = Resource(group=group, version="v1", plural=plural)
        return [event async for event in watching.infinite_watch(resource=resource, settings=None, namespace=None)]

    runs, tfjobs, policies, pods = (asyncio.run(collect(*kind)) for kind in (
        ("distml.dev", "disttrainingruns"), ("kubeflow.org", "tfjobs"), ("networking.k8s.io", "networkpolicies"),
        ("", "pods")))  # fmt: skip
    assert runs[0]["object"] == kopf_seams.run_object(events[0]["object"])
    assert tfjobs[1]["object"] == kopf_seams.tfjob_object(events[1]["object"])
    slim_policy = policies[2]["object"]
    assert slim_policy == kopf_seams.policy_object(policy) and "managedFields" not in slim_policy["metadata"]
    assert slim_policy["spec"] == policy["spec"], "the handler compares the spec"
    assert pods == events


def test_kopf_asks_the_api_server_only_for_networkpolicies_labelled_as_a_runs():
    """A cluster's other NetworkPolicies never reach kopf, which would keep each (its own memory of every object it
    watches) only for the handler's `labels` filter to drop it: the selector goes into kopf's list and watch requests
    (settings.watching.label_selectors, a public setting; its use is read from kopf's source)."""
    import inspect

    import kopf
    from dtr_operator import handlers
    from dtr_operator.api import RUN_LABEL
    from kopf._cogs.clients import fetching, watching
    from kopf._cogs.structs.references import Resource

    settings = kopf.OperatorSettings()
    handlers._tune(settings)
    policies = Resource(group="networking.k8s.io", version="v1", plural="networkpolicies", kind="NetworkPolicy")
    runs = Resource(group="distml.dev", version="v1alpha1", plural="disttrainingruns", kind="DistTrainingRun")
    assert settings.watching.label_selectors.collect(policies) == [RUN_LABEL]
    assert settings.watching.label_selectors.collect(runs) == []
    for module in (watching, fetching):
        assert "settings.watching.label_selectors.collect(resource)" in inspect.getsource(module)
