"""What the operator keeps of each run in memory (reconcile.slim: the index of runs, the Running runs) is bounded
and small whatever the run's size, and parses to the same values for everything its readers use (the TFJob
events, the progress poll, the status writes)."""

from __future__ import annotations

import json

from dtr_operator.reconcile import KEPT_METADATA, slim
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
    assert set(kept["metadata"]) == set(KEPT_METADATA) - {"deletionTimestamp"}
    assert kept["status"] == body["status"] and kept["kind"] == body["kind"]


def test_a_kept_run_parses_to_what_its_readers_use():
    body = _largest_run()
    full, kept = parse_run(body), parse_run(slim(body))
    read = ("name", "namespace", "uid", "generation", "workers", "suspend", "queue_name", "training", "code",
            "storage", "resources", "pvc_name", "tfjob_name")  # fmt: skip
    assert {a: getattr(kept, a) for a in read} == {a: getattr(full, a) for a in read}


def test_a_kept_run_is_a_copy():
    body = _largest_run()
    kept = slim(body)
    kept["status"]["phase"] = "Failed"
    kept["spec"]["training"]["metric"] = "x"
    assert body["status"]["phase"] == "Running" and body["spec"]["training"]["metric"] != "x"


# ---- what kopf keeps as a run's last handled configuration (handlers.SuspendDiffBase) ----------------------------


def test_kopf_stores_spec_suspend_of_the_largest_run_not_its_spec():
    import kopf
    from dtr_operator.handlers import SuspendDiffBase

    body = kopf.Body(_largest_run())
    storage = SuspendDiffBase()
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    [stored] = patch["metadata"]["annotations"].values()
    assert json.loads(stored) == {"spec": {"suspend": True}}


def test_kopf_tells_a_change_of_spec_suspend_alone_and_keeps_a_field_a_handler_names():
    from dtr_operator.handlers import essence

    running, suspended = run_doc("r", "ml", {"workers": 2}), run_doc("r", "ml", {"workers": 3, "suspend": True})
    assert essence(running) == {} != essence(suspended) == {"spec": {"suspend": True}}
    assert essence(run_doc("r", "ml", {"workers": 3}), [("spec", "workers")]) == {"spec": {"workers": 3}}
    assert essence({**running, "status": {"phase": "Running"}}, ["status.phase"]) == {"status": {"phase": "Running"}}


def test_a_run_stored_by_an_older_operator_resumes_not_updates():
    """The annotation of an operator before SuspendDiffBase holds the whole spec: read as spec.suspend alone, kopf
    finds no difference on the first listing and calls the resume handler (kopf.causes: RESUME needs no diff)."""
    import kopf
    from dtr_operator.handlers import SuspendDiffBase

    doc = run_doc("r", "ml", {"workers": 2, "suspend": False})
    old = json.dumps({"spec": doc["spec"], "metadata": {"labels": {"a": "b"}}})
    body = kopf.Body({**doc, "metadata": {**doc["metadata"],
                                          "annotations": {"kopf.zalando.org/last-handled-configuration": old}}})
    storage = SuspendDiffBase()
    fetched, built = storage.fetch(body=body), storage.build(body=body)
    assert fetched == built == {"spec": {"suspend": False}}
    from kopf._cogs.structs.diffs import diff  # what kopf compares them with (causes.detect_changing_cause)

    assert not diff(fetched, built)
    never_handled = kopf.Body({**doc, "metadata": {**doc["metadata"], "annotations": {}}})
    assert storage.fetch(body=never_handled) is None  # still a creation
