"""Write a directory of CSV time series for series_model.py: noisy sums of two sine waves (periods, phases
and amplitudes drawn per series, seeded), one series per file, columns `t,value`; 30 files to train on
and 6 held out.

    python make_data.py DATA_DIR   # -> DATA_DIR/series/train/*.csv and DATA_DIR/series/eval/*.csv
"""

import sys
from pathlib import Path

import numpy as np

LENGTH = 200  # points per series
SPLITS = {"train": 30, "eval": 6}  # files per split


def one_series(rng: np.random.RandomState) -> np.ndarray:
    t = np.arange(LENGTH)
    waves = [rng.uniform(0.5, 1.5) * np.sin(2 * np.pi * t / rng.uniform(12, 40) + rng.uniform(0, 2 * np.pi))
             for _ in range(2)]
    return sum(waves) + rng.normal(0, 0.1, LENGTH)


def main(data_dir: str, seed: int = 0) -> Path:
    rng = np.random.RandomState(seed)
    root = Path(data_dir) / "series"
    for split, files in SPLITS.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        for i in range(files):
            values = one_series(rng)
            rows = "".join(f"{t},{v:.5f}\n" for t, v in enumerate(values))
            (root / split / f"series-{i:03d}.csv").write_text("t,value\n" + rows)
    return root


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(main(sys.argv[1]))
