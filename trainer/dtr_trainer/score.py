"""Score an exported model on its run's held-out split, in the trainer's environment (TensorFlow).

    python -m dtr_trainer.score MODEL_DIR [--dataset NAME] [--seed N] [--data-dir DIR]   -> one JSON line

The dataset and seed default to what the model's lineage.json says the run trained on (docs/models.md), so
the split is the one the chief evaluated on and the accuracy is comparable with the run's status metrics.
The model is called through its serving signature, as a server would: one input, one output of class
probabilities (a single column: the probability of class 1). dtr_client's evaluate() runs this from Python
3.11, which has no TensorFlow (docs/client.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
from dtr_contract import flags

from dtr_trainer.lineage import LINEAGE_PATH

EXIT_BAD_INPUT = 2


class ScoreError(Exception):
    """What stops a model from being scored here: one line saying why."""


# ---- pure -------------------------------------------------------------------------------------


def what_to_score(lineage: Mapping[str, Any] | None, dataset: str | None, seed: int | None) -> tuple[str, int]:
    """(dataset, seed): as given, else as the model's lineage records them."""
    training = (lineage or {}).get("training") or {}
    dataset = dataset or training.get("dataset")
    seed = seed if seed is not None else training.get("seed")
    if not dataset or seed is None:
        raise ScoreError(f"the model's {LINEAGE_PATH} names no dataset and seed (a run whose code loads its own "
                         f"data): give {flags.DATASET} and {flags.SEED}")  # fmt: skip
    return str(dataset), int(seed)


def predicted_classes(probabilities: np.ndarray) -> np.ndarray:
    """Class labels from the output: the most probable class, or class 1 above one half for a single column."""
    if probabilities.ndim == 2 and probabilities.shape[1] > 1:
        return probabilities.argmax(axis=1)
    return (probabilities.reshape(-1) > 0.5).astype(np.int64)


def accuracy(probabilities: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(predicted_classes(probabilities) == labels.reshape(-1)))


# ---- the shell --------------------------------------------------------------------------------


def read_lineage(model_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(model_dir, LINEAGE_PATH)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def serve(model_dir: str, x: np.ndarray) -> np.ndarray:
    """The serving signature's single output for the examples x."""
    import tensorflow as tf

    signature = tf.saved_model.load(model_dir).signatures["serving_default"]
    inputs = signature.structured_input_signature[1]
    if len(inputs) != 1 or len(signature.structured_outputs) != 1:
        raise ScoreError(f"{model_dir}: the serving signature has {len(inputs)} input(s) and "
                         f"{len(signature.structured_outputs)} output(s); this scorer calls one of each")  # fmt: skip
    (input_name, spec), = inputs.items()
    (output,) = signature(**{input_name: tf.constant(x, dtype=spec.dtype)}).values()
    return output.numpy()


def score(model_dir: str, dataset: str | None, seed: int | None, data_dir: str) -> dict[str, Any]:
    from dtr_trainer.data import load_arrays

    if not os.path.isdir(model_dir):
        raise ScoreError(f"{model_dir}: no such directory")
    dataset, seed = what_to_score(read_lineage(model_dir), dataset, seed)
    splits = load_arrays(dataset, data_dir, seed)
    probabilities = serve(model_dir, splits.x_eval)
    return {"accuracy": accuracy(probabilities, splits.y_eval), "examples": len(splits.y_eval),
            "dataset": dataset, "seed": seed}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dtr_trainer.score", description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", metavar="MODEL_DIR", help="an exported version: a SavedModel and its lineage.json")
    p.add_argument(flags.DATASET, help="default: the lineage's")
    p.add_argument(flags.SEED, type=int, help="picks the held-out split (default: the lineage's)")
    p.add_argument(flags.DATA_DIR, default="", help="where a .npz dataset is (the run's volume's data directory)")
    args = p.parse_args(argv)
    from dtr_trainer.errors import DataError

    try:
        result = score(args.model_dir, args.dataset, args.seed, args.data_dir)
    except (ScoreError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
