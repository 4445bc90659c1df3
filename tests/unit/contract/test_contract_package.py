"""dtr_contract's writers and readers agree with each other (the trainer writes, the operator reads).

The trainer tier runs the same package on the trainer's Python 3.9 against a real trainer's output
(tests/trainer/test_progress_contract.py, test_units.py); here, its pure functions on every input.
"""

from __future__ import annotations

import json
import math

import pytest
from dtr_contract import exits, layout, summary
from dtr_contract.progress import epoch_end_line, parse_epoch_end, parse_epoch_end_line, trainer_line
from hypothesis import given
from hypothesis import strategies as st

RESERVED = {"examples_per_second", "remaining_seconds"}
names = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True).filter(lambda n: n not in RESERVED)
figures = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@st.composite
def epochs(draw) -> tuple[int, int]:
    total = draw(st.integers(1, 10_000))
    return draw(st.integers(1, total)), total


@given(epochs(), st.dictionaries(names, figures, max_size=4), st.floats(0, 1e7), st.none() | st.integers(0, 10**7))
def test_every_epoch_end_line_reads_back(done, metrics, rate, remaining) -> None:
    epoch, total = done
    line = f"2026-11-30T17:25:31.123Z dtr_trainer[worker-0]: {epoch_end_line(epoch, total, metrics, rate, remaining)}"
    end = parse_epoch_end_line(line)
    assert end is not None
    assert (end.epoch, end.epochs, end.remaining_seconds) == (epoch, total, remaining)
    assert end.metrics == tuple(sorted((k, float(f"{v:.4f}")) for k, v in metrics.items()))
    assert end.examples_per_second == float(f"{rate:.1f}")


def test_the_last_epoch_end_of_a_log_is_read_and_other_lines_are_not() -> None:
    lines = [epoch_end_line(1, 3, {"loss": 0.5}, 10.0, 20), "epoch 2/3 begin", "the epoch 2/3 endpoint",
             epoch_end_line(2, 3, {"loss": math.nan}, 11.0, None), "epoch 4/3 end loss=1"]
    end = parse_epoch_end("\n".join(trainer_line("worker-0", line) for line in lines) + "\n")
    assert end is not None and (end.epoch, end.metrics, end.remaining_seconds) == (2, (), None)
    assert parse_epoch_end("epoch 1/3 begin\n") is None


@given(st.dictionaries(names.filter(lambda n: n != summary.EPOCHS), figures, max_size=3), figures,
       st.none() | st.floats(0, 1), st.integers(1, 10_000), st.floats(0, 1e7), st.text(min_size=1),
       st.integers(1, 10**6), st.data())
def test_every_summary_reads_back(extra, loss, accuracy, epochs_done, rate, path, version, data) -> None:
    evaluation = {**extra, summary.LOSS: loss, **({summary.ACCURACY: accuracy} if accuracy is not None else {})}
    metric = data.draw(st.sampled_from(sorted(evaluation)))
    line = summary.summary_json(evaluation, metric, epochs_done, rate, path, version)
    assert "\n" not in line
    read = summary.parse_summary(f"a log line\n{line}\n")
    shown = {name: round(value, 6) for name, value in evaluation.items()}
    assert read == summary.Summary(shown[summary.LOSS], shown.get(summary.ACCURACY), epochs_done, round(rate, 1), path,
                                   version, metric, tuple(sorted(shown.items())))
    assert read.metrics() == {**shown, summary.EXAMPLES_PER_SECOND: read.examples_per_second,
                              summary.EPOCHS: epochs_done}
    assert read.headline() == (metric, shown[metric])


def test_a_summary_has_accuracy_only_when_the_model_reports_it_and_null_for_what_is_not_a_number() -> None:
    line = summary.summary_json({"loss": math.nan, "mae": 0.5}, "mae", 1, 2.0, "/m/1", 1)
    data = json.loads(line)
    assert summary.ACCURACY not in data and data[summary.LOSS] is None and data[summary.METRICS]["loss"] is None
    read = summary.parse_summary(line)
    assert read.loss is None and read.evaluation == (("mae", 0.5),) and read.headline() == ("mae", 0.5)


def test_the_headline_must_be_reported_and_defaults_to_accuracy_then_loss() -> None:
    with pytest.raises(ValueError, match="lacks"):
        summary.summary_json({"loss": 1.0}, "accuracy", 1, 1.0, "/m/1", 1)
    assert summary.default_metric(["loss", "accuracy"]) == summary.ACCURACY
    assert summary.default_metric(["loss", "mae"]) == summary.LOSS
    # a summary of the first format (no metric, no metrics) heads with its accuracy
    assert summary.parse_summary('{"loss": 0.1, "accuracy": 0.9}').headline() == ("accuracy", 0.9)
    assert summary.parse_summary('{"epochs": 1}').headline() is None


def test_a_summary_without_a_json_object_reads_as_none_and_wrong_types_as_missing() -> None:
    assert summary.parse_summary("") is None and summary.parse_summary("[1, 2]") is None
    read = summary.parse_summary('{"loss": "low", "epochs": true, "modelPath": "", "modelVersion": 1.5, '
                                 '"metric": 3, "metrics": {"mae": "x", "auc": true, "f1": 0.5}}')
    assert read == summary.Summary(evaluation=(("f1", 0.5),)) and read.metrics() == {"f1": 0.5}


@given(st.from_regex(r"[a-z0-9][a-z0-9.-]{0,40}", fullmatch=True), st.integers(1, 10**6))
def test_a_versions_base_is_its_models_directory_on_the_volume(model_name, version) -> None:
    export_dir = layout.export_dir(model_name)
    assert layout.model_base(layout.version_dir(export_dir, version)) == layout.in_volume(export_dir)
    assert layout.model_base(layout.version_dir(export_dir, version) + "/") == layout.in_volume(export_dir)
    claim = layout.claim_file(export_dir, version)
    assert claim.rpartition("/")[0] == layout.bookkeeping_dir(export_dir) != export_dir
    assert layout.claimed_version(claim.rpartition("/")[2]) == version


def test_paths_outside_the_volume_or_not_a_version_have_no_base() -> None:
    inside = layout.export_dir("m")
    for path in ("/elsewhere/models/m/1", f"{layout.MOUNT_PATH}x/models/m/1", f"{inside}/latest", f"{inside}/1a",
                 f"{layout.MOUNT_PATH}/1"):
        assert layout.model_base(path) is None, path
    assert layout.in_volume(layout.MOUNT_PATH) is None
    assert layout.claimed_version("claim-") is None and layout.claimed_version("1") is None


def test_backups_are_per_run_object_when_it_has_a_uid() -> None:
    assert layout.backup_dir("r", "u") == f"{layout.backup_dir('r')}/u"
    assert layout.worker_log_file(layout.logs_dir("r"), "worker-1").startswith(layout.logs_dir("r") + "/")


def test_exit_classes() -> None:
    assert [exits.is_retryable(c) for c in (1, 127, 128, exits.PEER_LOST, 255)] == [False, False, True, True, True]
    assert exits.is_peer_lost(exits.PEER_LOST) and not exits.is_peer_lost(exits.PEER_LOST + 1)
    assert exits.is_user_code(exits.USER_CODE) and not exits.is_retryable(exits.USER_CODE)
    assert not exits.is_user_code(exits.PEER_LOST)
    assert exits.is_diverged(exits.DIVERGED) and not exits.is_retryable(exits.DIVERGED)
    assert exits.DIVERGED != exits.USER_CODE and not exits.is_diverged(exits.USER_CODE)
