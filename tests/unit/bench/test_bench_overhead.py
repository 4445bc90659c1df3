"""Unit tests of bench/trainer/overhead.py's pure parts: worker-0's milestones, the phases, the summary."""

from __future__ import annotations

import pytest

from bench.trainer.overhead import Run, accuracy_of, breakdown, epochs_of, markdown, milestones, order, summary
from support.repo import REPO

W0 = "[worker-0] dtr_trainer[worker-0]: "
LINES = [
    (0.5, "[dtr] run digits-cnn: 2 worker(s), restartPolicy OnFailure; ..."),
    (4.0, f"{W0}epoch 1/3 begin"),
    (4.1, "[worker-1] dtr_trainer[worker-1]: epoch 1/3 begin"),
    (8.0, f"{W0}epoch 1/3 end accuracy=0.5 loss=1.6 examples_per_second=399.4 remaining_seconds=2"),
    (8.5, f"{W0}epoch 2/3 end accuracy=0.9 loss=0.4 examples_per_second=1954.4 remaining_seconds=1"),
    (9.0, f"{W0}epoch 3/3 end accuracy=0.9 loss=0.3 examples_per_second=1954.4 remaining_seconds=0"),
    (12.0, '[worker-0] {"loss":0.04,"accuracy":0.983287,"epochs":3}'),
    (12.1, f"{W0}model exported to /tmp/x/1"),
]


def test_milestones_are_worker_0s_first_lines():
    assert milestones(LINES, 3) == {"epoch_1_begin": 4.0, "epoch_1_end": 8.0, "last_epoch_end": 9.0,
                                    "exported": 12.1}
    assert accuracy_of(LINES) == 0.983287


def test_breakdown_counts_epoch_1s_training_as_a_steady_epoch():
    phases, first_overhead, outside = breakdown(milestones(LINES, 3), 13.0, 3)
    assert phases == pytest.approx({"start": 4.0, "epoch_1": 4.0, "epochs_2_n": 1.0, "evaluation_export": 3.1,
                                    "status": 0.9})
    assert first_overhead == pytest.approx(3.5)  # a steady epoch is 0.5 s
    assert outside == pytest.approx(13.0 - 3 * 0.5)
    assert sum(phases.values()) == pytest.approx(13.0)


def test_abba_order_and_the_example_s_epochs():
    assert [order(["a", "b"], r) for r in range(3)] == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert epochs_of(REPO / "examples" / "digits.yaml") == 8


def test_summary_and_markdown_compare_two_trees():
    def run(tree, total, accuracy=0.98):
        phases = {"start": 1.0, "epoch_1": 2.0, "epochs_2_n": 3.0, "evaluation_export": 4.0, "status": total - 10}
        return Run(tree, 0, total, phases, 1.5, total - 4, accuracy, 1.0, 1.0)

    runs = [run("baseline", 20.0), run("current", 12.0), run("baseline", 22.0), run("current", 11.0)]
    got = summary(runs)
    assert got["baseline"]["total"] == {"median": 21.0, "min": 20.0, "max": 22.0}
    assert got["current"]["status"]["median"] == 1.5
    report = {"summary": got, "commits": {"baseline": "abc", "current": "def"}, "command": "x", "date": "d",
              "cpus": 2, "rounds": 2, "loadavg_start": 1.0, "loadavg_end": 2.0}
    text = markdown(report)
    assert "| total | 21.0 (20.0..22.0) | 11.5 (11.0..12.0) | 0.55 |" in text
    assert "| evaluation + export |" in text and "| epochs 2..N |" in text
