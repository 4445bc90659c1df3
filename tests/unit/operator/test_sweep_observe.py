"""A sweep's trials as the operator folds its runs into the sweep's status, the status it writes, and the trial's run
it creates. Pure."""

from __future__ import annotations

from dtr_operator.reconcile.sweeps import owned_trials
from dtr_operator.sweep.decide import decide, parse_sweep
from dtr_operator.sweep.observe import MAX_POINTS, RUN_DELETED, fold, refused, trial_run, trials, written

SPEC = {"template": {"spec": {"workers": 3, "training": {"epochs": 4, "params": {"depth": 2}}}},
        "space": {"width": {"choice": [8, 16]}, "learningRate": {"choice": [0.1]}}, "algorithm": "grid",
        "trials": 2, "parallelTrials": 2, "objective": {"metric": "val_accuracy"}}  # fmt: skip
SWEEP = {"metadata": {"name": "s", "namespace": "ml", "uid": "u-1"}, "spec": SPEC}


def run(phase: str, epoch: int | None = None, value: str = "0.5", **status) -> dict:
    progress = {"epoch": epoch, "metrics": [{"name": "val_accuracy", "value": value}, {"name": "loss", "value": "1"}]}
    return {"status": {"phase": phase, **({"progress": progress} if epoch else {}), **status}}


def test_a_trial_is_the_template_with_its_point_owned_by_the_sweep():
    body = trial_run(SWEEP, 1, {"learningRate": 0.1, "width": 16})
    assert body["metadata"]["name"] == "s-1" and body["metadata"]["namespace"] == "ml"
    labels = body["metadata"]["labels"]
    assert labels["distml.dev/sweep"] == "s" and labels["distml.dev/trial"] == "1"
    assert body["metadata"]["ownerReferences"] == [{"apiVersion": "distml.dev/v1alpha1", "kind": "DistTrainingSweep",
                                                    "name": "s", "uid": "u-1", "controller": True,
                                                    "blockOwnerDeletion": True}]  # fmt: skip
    assert body["spec"] == {"workers": 3, "training": {"epochs": 4, "learningRate": 0.1,
                                                       "params": {"depth": 2, "width": 16}}}  # fmt: skip
    assert SPEC["template"]["spec"]["training"] == {"epochs": 4, "params": {"depth": 2}}, "the template unchanged"


def test_each_epoch_seen_is_kept_once_and_the_final_figure_when_the_run_succeeds():
    records = [{"index": 0, "run": "s-0", "phase": ""}]
    records = fold(records, {0: run("Running", 1, "0.5")}, "val_accuracy")
    records = fold(records, {0: run("Running", 1, "0.5")}, "val_accuracy")
    records = fold(records, {0: run("Running", 3, "0.7")}, "val_accuracy")  # epoch 2 unseen
    assert records[0]["curve"] == [[1, 0.5], [3, 0.7]]
    done = fold(records, {0: run("Succeeded", 4, "0.7", metrics={"accuracy": 0.82})}, "val_accuracy")
    assert done[0]["curve"] == [[1, 0.5], [3, 0.7]], "a succeeded run's progress says epoch 4 beside epoch 3's figures"
    assert done[0]["final"] == 0.82
    assert trials(done)[0].value == 0.82
    assert fold(done, {}, "val_accuracy") == done, "a finished trial's record is kept as it is"


def test_a_run_deleted_before_it_finished_fails_its_trial_and_a_never_seen_one_waits():
    records = [{"index": 0, "run": "s-0", "phase": "Running"}, {"index": 1, "run": "s-1", "phase": ""}]
    folded = fold(records, {}, "val_accuracy")
    assert folded[0] == {"index": 0, "run": "s-0", "phase": "Failed", "reason": RUN_DELETED}
    assert folded[1] == records[1], "not made yet: the next turn creates it"


def test_a_curve_is_bounded():
    records = [{"index": 0, "run": "s-0", "phase": "Running", "curve": [[e, 0.5] for e in range(1, MAX_POINTS + 1)]}]
    assert len(fold(records, {0: run("Running", MAX_POINTS + 1)}, "val_accuracy")[0]["curve"]) == MAX_POINTS


def test_the_status_written_has_the_new_trials_the_counts_and_a_refusal_named():
    sweep = parse_sweep(SPEC)
    status = written(sweep, "s", [], decide(sweep, []), {})
    assert [(t["run"], t["phase"], t["point"]) for t in status["trials"]] == [
        ("s-0", "", {"learningRate": 0.1, "width": 8}), ("s-1", "", {"learningRate": 0.1, "width": 16})]
    assert (status["phase"], status["trialsDone"]) == ("Running", "0/2")
    records = refused(status["trials"], "s-0", "spec.training.params: Too many: 13")
    failed = written(sweep, "s", records, decide(sweep, trials(records)), {})
    assert failed["phase"] == "Failed"
    assert failed["message"] == ("1 trials failed, more than spec.maxFailedTrials (0); s-0: the API server refused "
                                 "its run: spec.training.params: Too many: 13")  # fmt: skip
    assert [t["phase"] for t in failed["trials"]] == ["Failed", "Stopped"]


def test_only_the_runs_the_sweep_controls_are_its_trials():
    mine = {"metadata": {"labels": {"distml.dev/trial": "0"},
                         "ownerReferences": [{"uid": "u-1", "controller": True}]}}  # fmt: skip
    labelled_only = {"metadata": {"labels": {"distml.dev/trial": "1"}}}
    other = {"metadata": {"labels": {"distml.dev/trial": "2"}, "ownerReferences": [{"uid": "u-2", "controller": True}]}}
    assert owned_trials(SWEEP, [mine, labelled_only, other]) == {0: mine}
