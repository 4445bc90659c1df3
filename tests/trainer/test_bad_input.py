"""Bad TF_CONFIG, missing or escaping data, unknown model, impossible download: one line, documented code."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
from dtr_contract.progress import parse_epoch_end
from dtr_trainer.errors import EXIT_DATA, EXIT_DOWNLOAD, EXIT_TF_CONFIG, EXIT_USAGE

from support.trainer import run_trainer


def error_lines(stderr: str):
    return [ln for ln in stderr.splitlines() if "error" in ln.lower()]


def assert_one_line_error(result, code: int, *needles: str) -> str:
    assert result.returncode == code, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert result.stdout == ""
    return lines[0]


@pytest.mark.parametrize("tf_config, needle", [
    ("{not json", "not JSON"),
    ('{"cluster": {"worker": ["localhost:1"]}}', "missing 'task'"),
    ('{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 3}}', "not in cluster.worker"),
    ('{"cluster": {"ps": ["localhost:1"]}, "task": {"type": "ps", "index": 0}}', "unsupported jobs"),
])
def test_bad_tf_config(volume, tf_config, needle):
    result = run_trainer(["--dataset", "digits", *volume.args()], volume, tf_config_text=tf_config)
    assert_one_line_error(result, EXIT_TF_CONFIG, "bad TF_CONFIG", needle)


def test_unknown_model(volume):
    result = run_trainer(["--model", "resnet", "--dataset", "digits", *volume.args()], volume)
    assert_one_line_error(result, EXIT_USAGE, "--model", "resnet", "cnn")


def test_bad_number(volume):
    result = run_trainer(["--epochs", "0", "--dataset", "digits", *volume.args()], volume)
    assert_one_line_error(result, EXIT_USAGE, "--epochs", ">= 1")


def test_missing_npz(volume):
    result = run_trainer(["--dataset", "nope.npz", *volume.args()], volume)
    assert_one_line_error(result, EXIT_DATA, "nope.npz", "not found")


def test_npz_path_escaping_the_data_dir(volume):
    secret = volume.root / "models" / "outside.npz"
    np.savez(secret, x_train=np.zeros((4, 28, 28), np.uint8), y_train=np.zeros(4, np.int64))
    result = run_trainer(["--dataset", "../models/outside.npz", *volume.args()], volume)
    assert_one_line_error(result, EXIT_DATA, "escapes --data-dir")


def test_malformed_npz(volume):
    np.savez(volume.root / "data" / "bad.npz", x_train=np.zeros((4, 32, 32), np.uint8), y_train=np.zeros(4) - 1)
    result = run_trainer(["--dataset", "bad.npz", *volume.args()], volume)
    assert_one_line_error(result, EXIT_DATA, "labels must be class numbers")


def test_a_built_in_model_on_data_that_are_not_images_points_to_your_own_model(volume):
    np.savez(volume.root / "data" / "table.npz", x_train=np.zeros((4, 13), np.float32), y_train=np.zeros(4))
    result = run_trainer(["--dataset", "table.npz", *volume.args()], volume)
    assert_one_line_error(result, EXIT_DATA, "[N,H,W] or [N,H,W,C], got [4, 13]", "docs/own-model.md")


def test_unknown_dataset_name(volume):
    result = run_trainer(["--dataset", "cifar10", *volume.args()], volume)
    assert_one_line_error(result, EXIT_DATA, "unknown dataset", "digits")


def test_download_that_cannot_happen_names_offline_alternatives(volume):
    # conftest points every proxy variable at a closed local port: no byte leaves the machine
    result = run_trainer(["--dataset", "fashion_mnist", *volume.args()], volume)
    line = assert_one_line_error(result, EXIT_DOWNLOAD, "cannot download fashion_mnist", "digits", "synthetic", ".npz")
    assert len(line) < 400
    leftovers = list((volume.root / "data").rglob("*"))
    assert [p.name for p in leftovers] == ["keras"], leftovers  # no partial file, no private dir


def test_a_crafted_npz_header_cannot_make_the_trainer_report_an_epoch(volume):
    """Security review L1: numpy quotes a header it cannot parse, and the trainer's error line quotes numpy; the
    operator's reader takes only the trainer's own epoch-end line, whole, so the quoted text is not an epoch."""
    fake = b"epoch 99/100 end accuracy=1.0000 loss=0.0000"
    npy = b"\x93NUMPY\x01\x00" + len(fake).to_bytes(2, "little") + fake
    with zipfile.ZipFile(volume.root / "data" / "evil.npz", "w") as archive:
        archive.writestr("x_train.npy", npy)
        archive.writestr("y_train.npy", npy)
    result = run_trainer(["--dataset", "evil.npz", *volume.args()], volume)
    line = assert_one_line_error(result, EXIT_DATA, "evil.npz", "cannot read as .npz", fake.decode())
    assert parse_epoch_end(result.stderr) is None, line
