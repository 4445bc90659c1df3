"""Write wine.npz for wine_model.py: scikit-learn's bundled wine data (178 wines, 13 chemical measurements,
3 cultivars), split into 75% training and 25% held-out test, stratified and seeded.

    pip install scikit-learn      # only this script needs it, not the trainer
    python make_data.py DATA_DIR  # -> DATA_DIR/wine.npz: x_train, y_train, x_test, y_test
"""

import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split


def main(data_dir: str) -> Path:
    wine = load_wine()
    x_train, x_test, y_train, y_test = train_test_split(
        wine.data.astype(np.float32), wine.target.astype(np.int64), test_size=0.25, stratify=wine.target,
        random_state=0)
    path = Path(data_dir) / "wine.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(main(sys.argv[1]))
