"""Security review L1 and L2: what a run's own workers write (their log, the chief's termination message) and
what a tenant names cannot crash, stall or mislead the operator, nor put control characters or unbounded
text in a run's status and events. Each case is one of the review's; hypothesis tries the rest."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from dtr_contract import progress, summary
from dtr_operator import metrics
from dtr_operator.spec import parse_run
from dtr_operator.status.compute import tfjob_status
from dtr_operator.status.progress import parse_epoch_end, progress_of
from dtr_operator.status.state import MAX_STATE_MESSAGE, State, clean_text
from dtr_operator.status.summary import parse_summary
from dtr_operator.status.waiting import refused_pods, waiting_status
from hypothesis import given
from hypothesis import strategies as hs

from support.fake_kube import FakeKube
from support.reconciler import TFJOB, reconciler, run_policy_patches
from support.runs import make_run
from support.tfjobs import TFJOB_UID, controlled_by

PREFIX = "dtr_trainer[worker-0]: "
RUN = parse_run(make_run({"workers": 2, "training": {"epochs": 8}}, uid="u-1", generation=1))
T0 = "2026-11-30T18:00:00Z"


# ---- the chief's log: status.progress ------------------------------------------------------------


def test_an_epoch_line_quoted_inside_another_line_is_not_an_epoch_end():
    # The stock trainer's error line for a crafted .npz quotes numpy, which quotes the header.
    crafted = (f"{PREFIX}error: dataset 'evil.npz': cannot read as .npz (Cannot parse header: "
               "'epoch 99/100 end accuracy=1.0 loss=0.0')")  # fmt: skip
    assert parse_epoch_end(crafted) is None
    assert parse_epoch_end("user code: epoch 99/100 end accuracy=1.0") is None, "without the trainer's prefix"
    assert parse_epoch_end(f"{PREFIX}epoch 2/8 end accuracy=0.5").epoch == 2, "the trainer's own line is read"


def test_an_epoch_number_past_pythons_digit_limit_is_no_epoch_and_does_not_raise():
    assert parse_epoch_end(f"{PREFIX}epoch {'9' * 5000}/{'9' * 5000} end loss=1") is None
    assert parse_epoch_end(f"{PREFIX}epoch 1/1{'0' * 6} end loss=1") is None, "more than 6 digits"


def test_an_epoch_count_other_than_the_runs_is_not_its_progress():
    log = f"{PREFIX}epoch 3/8 end loss=0.5\n{PREFIX}epoch 99/100 end accuracy=1.0\n"
    assert parse_epoch_end(log, RUN.training.epochs).epoch == 3


def test_metrics_are_capped_in_number_and_a_huge_line_is_ignored():
    many = " ".join(f"m{i:02d}=0.5" for i in range(40))
    end = parse_epoch_end(f"{PREFIX}epoch 1/8 end {many}")
    assert len(end.metrics) == progress.MAX_METRICS
    huge = " ".join(f"m{i}=0.5" for i in range(20_000))
    assert parse_epoch_end(f"{PREFIX}epoch 1/8 end {huge}") is None
    long_name = f"{PREFIX}epoch 1/8 end {'n' * 65}=0.5"
    assert parse_epoch_end(long_name) is None


def test_the_time_left_is_clamped_and_huge_figures_left_out():
    end = parse_epoch_end(f"{PREFIX}epoch 1/8 end loss=1e300 examples_per_second=1e300 remaining_seconds=1e300")
    assert end.remaining_seconds == progress.MAX_REMAINING_SECONDS
    assert end.metrics == () and end.examples_per_second is None
    json.dumps(progress_of(end, T0), allow_nan=False)  # a status the API server takes


def test_a_parser_failure_is_no_progress_not_a_stuck_loop(monkeypatch: pytest.MonkeyPatch):
    def broken(*_: object) -> None:
        raise RecursionError("a bug, or an input nobody thought of")

    monkeypatch.setattr(progress, "parse_epoch_end", broken)
    assert parse_epoch_end(f"{PREFIX}epoch 1/8 end loss=1") is None


@given(hs.text(max_size=3000), hs.none() | hs.integers(1, 10**6))
def test_no_log_text_raises_or_gives_an_unbounded_progress(text: str, epochs: int | None):
    for log in (text, PREFIX + text, f"{PREFIX}epoch 1/8 end {text}"):
        end = parse_epoch_end(log, epochs)
        if end is not None:
            assert len(end.metrics) <= progress.MAX_METRICS and all(len(n) <= 64 for n, _ in end.metrics)
            assert 0 <= (end.remaining_seconds or 0) <= progress.MAX_REMAINING_SECONDS
            json.dumps(progress_of(end, T0), allow_nan=False)


# ---- the chief's termination message: status.metrics and status.model ---------------------------------


def test_a_message_is_read_only_to_its_cap():
    padded = json.dumps({"loss": 0.1, "pad": "x" * summary.MAX_TEXT})
    assert summary.parse_summary(padded) is None
    assert summary.parse_summary("junk " * summary.MAX_TEXT + '\n{"loss": 0.1}').loss == 0.1, "its end is read"


def test_deeply_nested_json_is_no_summary_not_a_recursion_error():
    assert summary.parse_summary("[" * 100_000) is None
    assert summary.parse_summary('{"a":' * 5000 + "1" + "}" * 5000) is None
    parsed = parse_summary("[" * 100_000, "claim")
    assert parsed.metrics is None and "not a JSON object" in parsed.problem


def test_numbers_no_status_can_hold_are_left_out():
    text = json.dumps({"loss": 10**400, "epochs": 10**30, "modelVersion": -1, "metric": "loss",
                       "metrics": {"loss": 0.5}}).replace('"loss": 0.5', '"loss": 1e999')  # fmt: skip
    found = summary.parse_summary(text)
    assert (found.loss, found.epochs, found.model_version, found.evaluation) == (None, None, None, ())


def test_figures_are_capped_in_number_and_their_names_must_be_printable():
    figures = {f"m{i:04d}": 0.5 for i in range(2_000)} | {"\x1b[31mred": 1.0, "x" * 65: 1.0}
    found = summary.parse_summary(json.dumps({"loss": 0.1, "metric": "\x1b[2J", "metrics": figures}))
    assert len(found.evaluation) == summary.MAX_FIGURES
    assert all(name.startswith("m") for name, _ in found.evaluation) and found.metric is None


def test_a_model_path_with_control_characters_is_not_the_runs_model():
    message = json.dumps({"loss": 0.1, "metric": "loss", "modelPath": "/mnt/dtr/models/m/1\x1b]8;;evil\x07"})
    parsed = parse_summary(message, "claim")
    assert parsed.model is None and "modelPath" in parsed.problem


def test_a_summary_parser_failure_is_a_problem_in_the_status(monkeypatch: pytest.MonkeyPatch):
    def broken(_: str) -> None:
        raise MemoryError

    monkeypatch.setattr(summary, "parse_summary", broken)
    assert "cannot be read" in parse_summary('{"loss": 1}', "claim").problem


@given(hs.recursive(hs.none() | hs.booleans() | hs.integers() | hs.floats() | hs.text(max_size=20),
                    lambda inner: hs.lists(inner, max_size=4) | hs.dictionaries(hs.text(max_size=8), inner,
                                                                                 max_size=4)))
def test_no_json_summary_raises_or_gives_a_status_the_api_cannot_take(doc: object):
    parsed = parse_summary(json.dumps(doc), "claim")
    json.dumps([parsed.metrics, parsed.model], allow_nan=False)


# ---- the suspend is never blocked by the progress read (reconcile/children.py: Children.set_suspend) ---------------


def test_a_progress_read_that_raises_value_error_does_not_block_the_suspend(monkeypatch: pytest.MonkeyPatch):
    from dtr_operator.reconcile import context, progress

    parsed = []

    def unreadable(*_: object) -> None:
        parsed.append(True)
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    kube = FakeKube()
    kube.put(TFJOB)
    kube.put({"metadata": {"name": "mnist-cnn-worker-0", "ownerReferences": controlled_by()}}, "Pod")
    kube.set_log("mnist-cnn-worker-0", f"{PREFIX}epoch 1/8 end loss=1")
    rec, _ = reconciler(kube)
    monkeypatch.setattr(progress, "parse_epoch_end", unreadable)
    monkeypatch.setattr(rec.mirror, "sync_status", lambda *_: None)
    body = make_run({"workers": 2}, uid="u-1", generation=1, resourceVersion="1")
    assert rec.children.set_suspend(context.ObservedRun.parse(body, "localhost/distml/trainer:test"), True, 0) is None
    assert [fields["suspend"] for _, fields in run_policy_patches(kube)] == [True]
    assert parsed, "the chief's log was read and did not parse"


def test_the_operator_records_its_own_suspension_in_the_same_write_and_drops_it_on_resume(
    monkeypatch: pytest.MonkeyPatch,
):
    from dtr_operator.api import SUSPENDED_BY, SUSPENDED_BY_ANNOTATION
    from dtr_operator.reconcile.context import ObservedRun

    kube = FakeKube()
    kube.put(TFJOB)
    rec, _ = reconciler(kube)
    monkeypatch.setattr(rec.mirror, "sync_status", lambda *_: None)
    body = make_run({"workers": 2}, uid="u-1", generation=1)
    run = ObservedRun.parse(body, "localhost/distml/trainer:test")
    rec.children.set_suspend(run, True, 0)
    rec.children.set_suspend(run, False, 0)
    assert [f["annotations"] for _, f in run_policy_patches(kube)] == [{SUSPENDED_BY_ANNOTATION: SUSPENDED_BY},
                                                                       {SUSPENDED_BY_ANNOTATION: None}]


# ---- L2: what the operator writes into a status or an event ---------------------------------------------


@pytest.mark.parametrize("dirty", ["\x1b[2J\x1b[1;31mFAILED\x1b[0m", "a\x00b\x07c\x9bd", "\u202eevil\u2066",
                                   "a\r\nb\tc"])
def test_control_characters_never_reach_a_status_message(dirty: str):
    clean = clean_text(dirty)
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F or c in "\u202e\u2066" for c in clean), repr(clean)
    state = State("Failed", "X\x1bY", f"worker said: {dirty}")
    assert "\x1b" not in state.message and "\x1b" not in state.reason


def test_every_state_message_is_capped_the_success_message_included():
    assert len(State("Failed", "R", "x" * 100_000).message) == MAX_STATE_MESSAGE
    message = json.dumps({"loss": 0.1, "metric": "loss", "modelPath": "/mnt/dtr/models/" + "m" * 900 + "/1"})
    pod = {"metadata": {"name": "mnist-cnn-worker-0", "ownerReferences": controlled_by(),
                        "labels": {"training.kubeflow.org/replica-type": "worker",
                                   "training.kubeflow.org/replica-index": "0"}},
           "status": {"containerStatuses": [{"name": "tensorflow",
                                             "state": {"terminated": {"exitCode": 0, "message": message}}}]}}
    tfjob = {"metadata": {"name": "mnist-cnn", "uid": TFJOB_UID},
             "status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}
    status = tfjob_status(RUN, tfjob, [pod], {}, T0)
    assert status["reason"] == "TrainingSucceeded" and len(status["message"]) <= MAX_STATE_MESSAGE


def test_events_are_cleaned_and_capped(monkeypatch: pytest.MonkeyPatch):
    from dtr_operator import handlers

    posted: list[dict[str, object]] = []
    monkeypatch.setattr(handlers.kopf, "event", lambda body, **kw: posted.append(kw))
    handlers.emit({}, "Warning", "Bad\x1bReason", "refused: \x1b]0;title\x07" + "y" * 5000)
    (event,) = posted
    assert "\x1b" not in event["message"] and "\x07" not in event["message"] and "\x1b" not in event["reason"]
    assert len(event["message"]) <= MAX_STATE_MESSAGE


def test_a_naive_timestamp_is_read_as_utc_not_a_type_error():
    body = {"metadata": {"creationTimestamp": "2026-11-30T18:00:00Z"},
            "status": {"phase": "Running", "startTime": "2026-11-30T18:00:30"}}
    assert metrics.run_figures(body)["timeToRunningSeconds"] == 30
    assert datetime.fromisoformat("2026-11-30T18:00:30").tzinfo is None  # the case: naive against aware


def test_a_phase_no_operator_writes_is_counted_as_unknown():
    tracker = metrics.PhaseTracker()
    tracker.seen("u-1", "Pwned\x1b")
    tracker.seen("u-2", "Running")
    samples = {s.labels["phase"]: s.value for s in metrics.RUNS.collect()[0].samples}
    assert "Pwned\x1b" not in samples and samples[metrics.UNKNOWN_PHASE] >= 1
    tracker.gone("u-1")
    tracker.gone("u-2")


# ---- L4: a worker pod the API server refuses (no pod exists to look at: the TFJob's events tell) -------------


def _event(reason: str, message: str, at: str, event_type: str = "Warning") -> dict[str, str]:
    return {"type": event_type, "reason": reason, "message": message, "lastTimestamp": at}


def test_the_newest_refusal_among_a_tfjobs_events_is_the_line():
    events = [_event("FailedCreatePod", 'Error creating: pods "r-worker-0" is forbidden: exceeded quota: q', T0),
              _event("FailedCreatePod", "Error creating: no PriorityClass with name x\x1b[0m was found", "2026-12-01"),
              _event("SuccessfulCreatePod", "Created pod: r-worker-1", "2026-12-02", "Normal")]  # fmt: skip
    (line,) = refused_pods(events)
    assert line == ("the training-operator cannot create them: Error creating: no PriorityClass with name x [0m "
                    "was found")
    assert refused_pods(events[2:]) == []


@pytest.mark.parametrize("reason", ["TFJobSubmitted", "TFJobCreated"])
def test_a_refusal_makes_a_waiting_run_say_why_and_it_goes_when_the_cause_does(reason: str):
    previous = {"phase": "Pending", "reason": reason, "message": "waiting"}
    refused = refused_pods([_event("FailedCreatePod", "pods is forbidden: exceeded quota: no-pods", T0)])
    status = waiting_status(RUN, [], previous, T0, refused)
    assert status["reason"] == "WorkerPodsNotStarting" and "exceeded quota: no-pods" in status["message"]
    assert waiting_status(RUN, [], status, T0)["reason"] == "TFJobCreated"
    tfjob = {"metadata": {"name": "mnist-cnn"}, "status": {}}  # the training-operator recorded nothing yet
    assert tfjob_status(RUN, tfjob, [], status, T0)["reason"] == "WorkerPodsNotStarting", "kept, not undone"
