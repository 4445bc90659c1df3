"""The host's side of tests/node/test_own_model.py, in the trainer's environment (NumPy, TensorFlow 2.11).

    python own_model_host.py data DIR                  the examples' data: DIR/put (for dtr data put) and
                                                       DIR/kept (held back: the cluster never sees it)
    python own_model_host.py score wine|series MODEL KEPT   -> one JSON line: the exported model's score on
                                                       the kept data and the trivial predictor's

wine: the make_data.py test split, every other wine put (the run's eval split), the rest kept; scored by
accuracy against always answering the most frequent class. series: of make_data.py's held-out files, the
last KEEP kept; scored by mean squared error against always answering the mean (the targets' variance).
"""

import json
import runpy
import shutil
import sys
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "own-model"
KEEP = 2  # series files held back


def make(example: str, where: Path) -> None:
    runpy.run_path(str(EXAMPLES / example / "make_data.py"))["main"](str(where))


def data(root: Path) -> None:
    put, kept = root / "put", root / "kept"
    make("wine", root / "made")
    make("series", put)
    with np.load(root / "made" / "wine.npz") as f:
        d = {key: f[key] for key in f.files}
    np.savez(put / "wine.npz", x_train=d["x_train"], y_train=d["y_train"], x_test=d["x_test"][0::2],
             y_test=d["y_test"][0::2])
    shutil.rmtree(root / "made")
    kept.mkdir()
    np.savez(kept / "wine.npz", x=d["x_test"][1::2], y=d["y_test"][1::2])
    (kept / "series").mkdir()
    for path in sorted((put / "series" / "eval").glob("*.csv"))[-KEEP:]:
        shutil.move(str(path), str(kept / "series" / path.name))


def windows(directory: Path) -> tuple:
    """(window, next value) for every window series_model.load_data makes of the CSV files, in NumPy."""
    sys.path.insert(0, str(EXAMPLES / "series"))
    import series_model  # its WINDOW and STRIDE

    xs, ys = [], []
    for path in sorted(directory.glob("*.csv")):
        values = np.loadtxt(path, delimiter=",", skiprows=1)[:, 1]
        for start in range(0, len(values) - series_model.WINDOW, series_model.STRIDE):
            xs.append(values[start:start + series_model.WINDOW])
            ys.append(values[start + series_model.WINDOW])
    return np.asarray(xs, np.float32)[..., np.newaxis], np.asarray(ys, np.float32)


def score(kind: str, model: Path, kept: Path) -> dict:
    import tensorflow as tf

    serve = tf.saved_model.load(str(model)).signatures["serving_default"]
    if kind == "wine":
        with np.load(kept / "wine.npz") as f:
            x, y = f["x"], f["y"]
        predicted = serve(features=tf.constant(x))["probabilities"].numpy().argmax(axis=1)
        return {"accuracy": float(np.mean(predicted == y)), "majority": float(np.bincount(y).max() / len(y)),
                "examples": len(y)}
    x, y = windows(kept / "series")
    predicted = serve(window=tf.constant(x))["next_value"].numpy()[:, 0]
    return {"mse": float(np.mean((predicted - y) ** 2)), "mean_predictor_mse": float(np.var(y)), "examples": len(y)}


if __name__ == "__main__":
    if sys.argv[1:2] == ["data"] and len(sys.argv) == 3:
        data(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["score"] and len(sys.argv) == 5:
        print(json.dumps(score(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))))
    else:
        sys.exit(__doc__)
