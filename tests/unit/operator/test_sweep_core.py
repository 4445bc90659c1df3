"""The sweep's pure core: spaces refused with the field named, points the same after a restart, the median rule,
and what a sweep does next from its trials."""

from __future__ import annotations

import math
import re

import pytest
from dtr_operator.sweep import space
from dtr_operator.sweep.decide import Trial, decide, parse_sweep, point
from dtr_operator.sweep.model_based import Outcome
from dtr_operator.sweep.observe import STOPPED, finished_points
from dtr_operator.sweep.prune import HalvingRule, MedianRule, halving_stop, median_stop, rung_of, value_at

SPACE = {"learningRate": {"logUniform": {"min": 1e-4, "max": 1e-1}},
         "width": {"int": {"min": 16, "max": 64, "step": 16}}, "batchSizePerWorker": {"choice": [16, 32]},
         "dropout": {"uniform": {"min": 0.0, "max": 0.5}}}


def sweep_spec(**over):
    spec = {"space": SPACE, "objective": {"metric": "val_accuracy", "goal": "maximize"}, "trials": 8,
            "parallelTrials": 2, "seed": 7}
    spec.update(over)
    return parse_sweep(spec)


@pytest.mark.parametrize("bad, field", [
    ({}, "spec.space: must name at least one"),
    ({"lr": {"normal": {"min": 0, "max": 1}}}, "spec.space.lr: unknown distribution 'normal'"),
    ({"lr": {"choice": []}}, "spec.space.lr.choice: must be a non-empty list"),
    ({"lr": {"uniform": {"min": 2, "max": 1}}}, "spec.space.lr.uniform: min 2 is more than max 1"),
    ({"lr": {"logUniform": {"min": 0, "max": 1}}}, "spec.space.lr.logUniform.min: must be more than 0"),
    ({"w": {"int": {"min": 1, "max": 4, "step": 0.5}}}, "spec.space.w.int: min, max and step must be integers"),
    ({"w": {"uniform": {"min": 1, "max": 4, "step": 1}}}, "spec.space.w.uniform: unknown field 'step'"),
    ({"lr": {"uniform": {"min": 0, "max": 1}, "choice": [1]}}, "spec.space.lr: must be exactly one of"),
    ({"batchSizePerWorker": {"choice": [16, "a"]}}, "spec.space.batchSizePerWorker: must be a choice or int"),
])
def test_a_space_that_cannot_be_searched_is_refused_naming_the_field(bad, field):
    with pytest.raises(space.SpaceError, match="^" + re.escape(field)):
        space.parse_space(bad)


def test_points_are_the_same_after_a_restart_and_stay_in_their_ranges():
    sweep = sweep_spec()
    first = [point(sweep, i) for i in range(8)]
    assert first == [point(sweep_spec(), i) for i in range(8)], "drawn again from the seed and index alone"
    assert first != [point(sweep_spec(seed=8), i) for i in range(8)]
    for p in first:
        assert 1e-4 <= p["learningRate"] <= 1e-1 and p["width"] in (16, 32, 48, 64)
        assert p["batchSizePerWorker"] in (16, 32) and 0.0 <= p["dropout"] <= 0.5
    logs = [math.log10(p["learningRate"]) for p in (point(sweep, i) for i in range(400))]
    assert sum(lg < -2.5 for lg in logs) > 120, "log-uniform: half the draws below the range's log middle"


def test_grid_enumerates_choice_and_int_and_refuses_a_continuous_range():
    grid = sweep_spec(algorithm="grid", trials=100, space={"width": {"int": {"min": 16, "max": 32, "step": 16}},
                                                          "batchSizePerWorker": {"choice": [16, 32, 64]}})
    assert grid.trials == 6, "no more trials than grid points"
    assert [point(grid, i) for i in range(6)] == [
        {"batchSizePerWorker": b, "width": w} for b in (16, 32, 64) for w in (16, 32)]
    with pytest.raises(space.SpaceError, match=r"spec\.space\.dropout: a uniform range has no grid points"):
        sweep_spec(algorithm="grid")


def test_a_point_sets_the_training_fields_and_the_rest_as_params():
    training = {"epochs": 5, "learningRate": 0.01, "params": {"depth": 2}}
    assert space.apply_point(training, {"learningRate": 0.001, "width": 32}) == {
        "epochs": 5, "learningRate": 0.001, "params": {"depth": 2, "width": 32}}
    assert training["params"] == {"depth": 2}, "the template is not changed"


@pytest.mark.parametrize("bad, said", [
    ({"objective": {"goal": "maximize"}}, "spec.objective.metric"),
    ({"objective": {"metric": "val_loss", "goal": "lowest"}}, "spec.objective.goal"),
    ({"algorithm": "bayes"}, "spec.algorithm: one of grid, random"),
])
def test_an_objective_or_algorithm_it_does_not_know_is_refused(bad, said):
    with pytest.raises(space.SpaceError, match=said):
        sweep_spec(**bad)


RULE = MedianRule(warmup_epochs=1, min_trials=2)


def c(*values: float) -> tuple[tuple[int, float], ...]:
    """A curve reported every epoch from epoch 1."""
    return tuple(enumerate(values, start=1))


def test_the_median_rule_stops_a_trial_worse_than_the_finished_ones_at_its_epoch():
    finished = [c(0.5, 0.7, 0.8), c(0.6, 0.8, 0.9), c(0.4, 0.6, 0.7)]
    assert median_stop(c(0.3,), finished, "maximize", "val_accuracy", RULE) is None, "warm-up"
    why = median_stop(c(0.3, 0.5), finished, "maximize", "val_accuracy", RULE)
    assert why == ("its best val_accuracy by epoch 2, 0.5, is worse than the median of 3 finished trials at epoch 2, "
                   "0.7")
    assert median_stop(c(0.3, 0.75), finished, "maximize", "val_accuracy", RULE) is None
    assert median_stop(c(0.3, 0.5), finished[:1], "maximize", "val_accuracy", RULE) is None, "too few to judge"
    assert median_stop(c(2.0, 1.9), [c(1.0, 0.5), c(1.2, 0.6)], "minimize", "val_loss", RULE) is not None


def test_a_sweep_fills_its_slots_then_stops_the_weak_then_ends_with_the_best():
    sweep = sweep_spec(trials=4, earlyStopping={"median": {"warmupEpochs": 1, "minTrials": 2}})
    assert decide(sweep, []).create == (0, 1)
    two = [Trial(0, "s-0", "Running", c(0.5)), Trial(1, "s-1", "", c())]
    assert decide(sweep, two).create == (), "both slots busy"
    done = [Trial(0, "s-0", "Succeeded", c(0.5, 0.8)), Trial(1, "s-1", "Succeeded", c(0.6, 0.9)),
            Trial(2, "s-2", "Running", c(0.2, 0.3))]
    d = decide(sweep, done)
    assert d.stop == (("s-2", "its best val_accuracy by epoch 2, 0.3, is worse than the median of 2 finished trials "
                               "at epoch 2, 0.85"),)
    assert d.create == (3,), "the stopped trial's slot goes to the next"
    end = [*done[:2], Trial(2, "s-2", "Running", c(0.2, 0.3), stopped=True), Trial(3, "s-3", "Succeeded", c(0.7, 0.95))]
    d = decide(sweep, end)
    assert (d.phase, d.best.name, d.counts["stopped"]) == ("Succeeded", "s-3", 1)
    assert d.message == "best val_accuracy 0.95: trial s-3"


def test_too_many_failed_trials_fail_the_sweep_and_stop_the_rest():
    sweep = sweep_spec(trials=6, maxFailedTrials=1)
    trials = [Trial(0, "s-0", "Failed"), Trial(1, "s-1", "Failed"), Trial(2, "s-2", "Running", c(0.4))]
    d = decide(sweep, trials)
    assert (d.phase, d.create, d.stop) == ("Failed", (), (("s-2", "the sweep failed"),))
    assert d.message == "2 trials failed, more than spec.maxFailedTrials (1)"


def test_no_trial_that_reported_the_objective_fails_the_sweep_saying_so():
    d = decide(sweep_spec(trials=1, maxFailedTrials=1), [Trial(0, "s-0", "Succeeded")])
    assert (d.phase, d.message) == ("Failed", "no trial reported val_accuracy to the end")


def test_epochs_the_poll_did_not_see_take_the_nearest_earlier_value():
    finished = [((1, 0.5), (3, 0.9)), ((2, 0.8), (3, 0.95))]  # epoch 2 unseen in one, epoch 1 in the other
    assert value_at(finished[0], 2) == 0.5 and value_at(finished[1], 1) is None
    why = median_stop(((1, 0.2), (2, 0.3)), finished, "maximize", "val_accuracy", RULE)
    assert why is not None and "median of 2 finished trials at epoch 2, 0.65" in why
    assert median_stop(((1, 0.2), (4, 0.3)), finished, "maximize", "val_accuracy", RULE) is None, "none trained so far"


def test_the_best_trial_is_judged_by_its_final_figure_when_the_run_reported_one():
    sweep = sweep_spec(trials=2)
    trials = [Trial(0, "s-0", "Succeeded", c(0.7, 0.9), final=0.85), Trial(1, "s-1", "Succeeded", c(0.6, 0.88))]
    d = decide(sweep, trials)
    assert (d.best.name, d.message) == ("s-1", "best val_accuracy 0.88: trial s-1")


def test_tpe_asks_optuna_for_points_near_the_best_finished_ones_and_the_same_history_gives_the_same_point():
    sweep = sweep_spec(algorithm="tpe", space={"x": {"uniform": {"min": 0.0, "max": 1.0}},
                                               "k": {"choice": ["a", "b"]}})  # fmt: skip
    finished = [Outcome({"x": i / 19, "k": "ab"[i % 2]}, -abs(i / 19 - 0.8) - (0.5 if i % 2 else 0.0))
                for i in range(20)]  # fmt: skip
    asked = [point(sweep, i, finished) for i in range(20, 30)]
    assert asked == [point(sweep, i, finished) for i in range(20, 30)], "seeded by the sweep's seed and the index"
    assert all(0.0 <= p["x"] <= 1.0 and p["k"] in ("a", "b") for p in asked)
    assert sum(abs(p["x"] - 0.8) for p in asked) / 10 < 0.2, "a uniform draw's mean distance is 0.34"
    assert sum(p["k"] == "a" for p in asked) >= 7, "the better choice"
    first = point(sweep, 0, [])
    assert 0.0 <= first["x"] <= 1.0, "no history: a random start"


def test_tpe_is_told_the_trials_stopped_early_and_asks_less_where_they_were():
    """The same six finished trials (a flat objective: TPE keeps asking near the first, x = 0.05), with and without
    twelve stopped early at x < 0.3: told of them (as pruned, with their curves), it asks there less often (0 of
    40 against 40 of 40 with Optuna 5.1.0)."""
    sweep = sweep_spec(algorithm="tpe", space={"x": {"uniform": {"min": 0.0, "max": 1.0}}})
    ended = [Outcome({"x": 0.05 + i * 0.18}, 0.5) for i in range(6)]
    stopped = [Outcome({"x": i * 0.025}, None, ((1, 0.1), (2, 0.12))) for i in range(12)]

    def asked_low(history: list[Outcome]) -> int:
        return sum(point(sweep, i, history)["x"] < 0.3 for i in range(20, 60))

    assert asked_low(ended + stopped) < asked_low(ended) / 2, (asked_low(ended + stopped), asked_low(ended))


def test_a_stopped_trial_is_part_of_the_history_a_search_learns_from_with_its_curve():
    records = [{"index": 0, "run": "s-0", "phase": "Succeeded", "point": {"x": 1}, "curve": [[1, 0.5]],
                "final": 0.6},
               {"index": 1, "run": "s-1", "phase": STOPPED, "point": {"x": 2}, "curve": [[1, 0.2], [2, 0.3]]},
               {"index": 2, "run": "s-2", "phase": "Failed", "point": {"x": 3}, "curve": [[1, 0.9]]}]  # fmt: skip
    assert finished_points(records) == [Outcome({"x": 1}, 0.6), Outcome({"x": 2}, None, ((1, 0.2), (2, 0.3)))]


def test_a_trial_at_its_last_epoch_is_not_stopped_it_ends_by_itself():
    sweep = sweep_spec(trials=3, earlyStopping={"median": {"warmupEpochs": 1, "minTrials": 1}})
    done = Trial(0, "s-0", "Succeeded", c(0.5, 0.8), epochs=2)
    assert decide(sweep, [done, Trial(1, "s-1", "Running", c(0.1, 0.2), epochs=3)]).stop != ()
    assert decide(sweep, [done, Trial(1, "s-1", "Running", c(0.1, 0.2), epochs=2)]).stop == ()


HALVING = HalvingRule(min_epochs=1, reduction_factor=2)


def test_halving_judges_a_trial_at_its_last_rung_against_every_trial_that_reached_it():
    assert [rung_of(e, HalvingRule(2, 3)) for e in (1, 2, 5, 6, 17, 18)] == [None, 2, 2, 6, 6, 18]
    alone = halving_stop(c(0.1, 0.2, 0.3), [], "maximize", "val_accuracy", HALVING)
    assert alone is None, "the first at a rung goes on"
    # at epoch 2 (rung 2): 0.5 is not among the best 1 of 3 (2 // 2 = 1), whatever state the others are in
    others = [c(0.7, 0.8), c(0.4, 0.45, 0.9)]
    why = halving_stop(c(0.3, 0.5), others, "maximize", "val_accuracy", HALVING)
    assert why == ("its best val_accuracy by epoch 2, 0.5, is not among the best 1 of the 3 trials that reached epoch "
                   "2 (successive halving: 1 in 2 goes on)")
    assert halving_stop(c(0.3, 0.85), others, "maximize", "val_accuracy", HALVING) is None
    # at epoch 3 (still rung 2), judged by its best by epoch 2: an epoch past the rung changes nothing
    assert halving_stop(c(0.3, 0.85, 0.1), others, "maximize", "val_accuracy", HALVING) is None
    # a trial that has not reached the rung does not count there
    assert halving_stop(c(0.3, 0.5), [c(0.9)], "maximize", "val_accuracy", HALVING) is None
    assert halving_stop(c(2.0, 1.9), [c(1.0, 0.5), c(1.2, 0.6)], "minimize", "val_loss", HALVING) is not None


def test_a_sweep_with_halving_stops_the_weak_among_running_trials_too_and_refuses_both_rules():
    sweep = sweep_spec(trials=4, maxFailedTrials=1, earlyStopping={"halving": {"minEpochs": 1, "reductionFactor": 2}})
    running = [Trial(0, "s-0", "Running", c(0.8, 0.9)), Trial(1, "s-1", "Running", c(0.2, 0.3)),
               Trial(2, "s-2", "Failed", c(0.99, 0.99))]  # a failed trial's figures count for nothing
    assert decide(sweep, running).stop == (("s-1", "its best val_accuracy by epoch 2, 0.3, is not among the best 1 "
                                                   "of the 2 trials that reached epoch 2 (successive halving: 1 in 2 "
                                                   "goes on)"),)  # fmt: skip
    with pytest.raises(space.SpaceError, match=r"^spec\.earlyStopping: median or halving, not both$"):
        sweep_spec(earlyStopping={"median": {}, "halving": {}})
