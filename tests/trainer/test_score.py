"""dtr_trainer.score's decisions (what to score on, the predicted classes); the whole scorer runs in
tests/e2e/test_notebook.py, where the notebook's last cell compares its accuracy with the run's status."""

from __future__ import annotations

import numpy as np
import pytest
from dtr_trainer import score


def test_the_dataset_and_seed_come_from_the_lineage_unless_given() -> None:
    lineage = {"training": {"dataset": "digits", "seed": 42}}
    assert score.what_to_score(lineage, None, None) == ("digits", 42)
    assert score.what_to_score(lineage, "wine.npz", 0) == ("wine.npz", 0)
    assert score.what_to_score(None, "digits", 7) == ("digits", 7)
    for lineage in (None, {"training": {"dataset": None, "seed": 42}}, {"training": {"dataset": "digits"}}):
        with pytest.raises(score.ScoreError, match="names no dataset and seed"):
            score.what_to_score(lineage, None, None)


def test_classes_are_the_most_probable_or_class_one_above_a_half_for_one_column() -> None:
    assert score.predicted_classes(np.array([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1]])).tolist() == [1, 0]
    assert score.predicted_classes(np.array([[0.2], [0.9], [0.5]])).tolist() == [0, 1, 0]
    assert score.accuracy(np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]]), np.array([1, 1, 1])) == pytest.approx(2 / 3)


def test_a_missing_model_directory_is_bad_input(tmp_path, capsys) -> None:
    assert score.main([str(tmp_path / "none")]) == score.EXIT_BAD_INPUT
    assert "no such directory" in capsys.readouterr().err
