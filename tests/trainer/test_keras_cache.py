"""The Keras datasets' cache on a shared volume is used only as published, and loaded from the bytes checked
(dtr_trainer.keras_cache; issue 39 item 4, security review R5): a planted mnist.npz or Fashion-MNIST file is refused
before any download is tried and never trained on; a file that changes after its check is not what loads. No
network: the downloads are stand-ins, or fail at a closed local port (support.trainer's proxies), and the pinned
digests are swapped for those of small files made here where a download has to succeed."""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from dtr_contract import layout
from dtr_trainer import data, keras_cache
from dtr_trainer.errors import EXIT_DOWNLOAD, DownloadError
from dtr_trainer.keras_cache import FILES, Published

from support.trainer import run_trainer


def npz(seed: int, n: int = 6) -> bytes:
    rng = np.random.RandomState(seed)
    buffer = io.BytesIO()
    np.savez(buffer, x_train=rng.randint(0, 256, (n, 28, 28), dtype=np.uint8), y_train=np.arange(n) % 10,
             x_test=rng.randint(0, 256, (2, 28, 28), dtype=np.uint8), y_test=np.arange(2))  # fmt: skip
    return buffer.getvalue()


GOOD, POISON = npz(1), npz(2)


def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def cache(data_dir: Path) -> Path:
    return Path(layout.keras_cache_dir(str(data_dir)))


@pytest.fixture
def pinned_good(monkeypatch):
    """mnist.npz pinned to GOOD's digest: a download of GOOD is a download of the published file."""
    monkeypatch.setitem(keras_cache.FILES, "mnist", (Published("mnist.npz", "mnist.npz", "sha256", sha256(GOOD)),))


class Downloads:
    """A stand-in for Keras' get_file: what it was asked for, in order with the warnings said, and what it returns."""

    def __init__(self, events: list[str], files: dict[str, bytes] | None = None) -> None:
        self.events, self.files = events, files
        self.calls = 0

    def __call__(self, file: Published, into: Path) -> bytes:
        self.calls += 1
        self.events.append(f"download {file.name}")
        assert into.parent.name == "keras" and into.name.startswith(".download-"), into
        if self.files is None:
            raise Exception(f"URL fetch failure on {keras_cache.ORIGIN}{file.name}: None -- [Errno 111] refused")
        time.sleep(0.01)
        return self.files[file.name]


@pytest.fixture
def events(monkeypatch) -> list[str]:
    said: list[str] = []
    monkeypatch.setattr(keras_cache, "_warn", lambda message: said.append(f"warn {message}"))
    return said


def downloading(monkeypatch, downloads: Downloads) -> Downloads:
    """The trainer's own loaders (data.load_arrays) download through the stand-in."""
    monkeypatch.setattr(keras_cache, "keras_download", downloads)
    return downloads


# ---------------------------------------------------------------- the digests


def installed_keras_source(name: str) -> str:
    import keras.datasets

    return (Path(keras.datasets.__file__).parent / f"{name}.py").read_text()


def test_the_digest_pinned_for_mnist_is_the_one_the_installed_keras_passes_to_get_file():
    source = installed_keras_source("mnist")
    (mnist,) = FILES["mnist"]
    assert re.findall(r'"([0-9a-f]{64})"', source) == [mnist.digest] and mnist.algorithm == "sha256"
    assert f'"{keras_cache.ORIGIN}"' in source and '+ "mnist.npz"' in source


def test_fashion_mnist_is_pinned_file_by_file_as_keras_downloads_it_which_publishes_no_digest():
    source = installed_keras_source("fashion_mnist")
    assert "file_hash" not in source, "Keras publishes a digest now: pin that one (keras_cache.py)"
    assert f'"{keras_cache.ORIGIN}"' in source
    names = re.findall(r'"((?:train|t10k)-\w+-idx\d-ubyte\.gz)"', source)
    assert names == [file.name for file in FILES["fashion_mnist"]]
    assert all(re.fullmatch(r"[0-9a-f]{32}", f.digest) and f.algorithm == "md5" for f in FILES["fashion_mnist"])


# ---------------------------------------------------------------- a planted file


def test_a_planted_mnist_is_refused_before_any_download_and_never_trained_on(tmp_path, events, monkeypatch):
    """The real pinned digest; the download fails (offline): the run ends exit 5, naming the planted file and both
    digests; the warning came first, the planted arrays were never made."""
    planted = cache(tmp_path) / "mnist.npz"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(POISON)
    made = []
    monkeypatch.setattr(data, "read_npz", lambda *args: made.append(args))
    downloading(monkeypatch, Downloads(events))
    with pytest.raises(DownloadError) as err:
        data.load_arrays("mnist", str(tmp_path), seed=0)
    line = str(err.value)
    assert err.value.exit_code == EXIT_DOWNLOAD
    assert line.startswith("cannot download mnist: use --dataset digits or synthetic"), line
    assert f"{planted} is not the published mnist.npz: its sha256 is {sha256(POISON)}, not {FILES['mnist'][0].digest}" \
        in line  # fmt: skip
    assert [e.split(" ")[0] for e in events] == ["warn", "download"], events
    assert "not used; downloading it again" in events[0]
    assert made == [] and planted.read_bytes() == POISON, "the planted file is neither loaded nor replaced"
    assert sorted(p.name for p in planted.parent.iterdir()) == ["mnist.npz"], "no private directory left"


def test_an_old_trainers_cache_or_a_planted_file_is_replaced_by_the_published_one(tmp_path, pinned_good, events):
    planted = cache(tmp_path) / "mnist.npz"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(POISON)
    downloads = Downloads(events, {"mnist.npz": GOOD})
    assert keras_cache.load("mnist", str(tmp_path), downloads) == {"mnist.npz": GOOD}
    assert planted.read_bytes() == GOOD and downloads.calls == 1
    assert keras_cache.load("mnist", str(tmp_path), downloads) == {"mnist.npz": GOOD} and downloads.calls == 1
    assert sorted(p.name for p in planted.parent.iterdir()) == ["mnist.npz"]


def test_a_download_that_is_not_the_published_file_is_refused_and_cached_nowhere(tmp_path, pinned_good, events):
    with pytest.raises(DownloadError, match=f"is not the published mnist.npz: its sha256 is {sha256(POISON)}"):
        keras_cache.load("mnist", str(tmp_path), Downloads(events, {"mnist.npz": POISON}))
    assert sorted(p.name for p in cache(tmp_path).iterdir()) == []


def test_a_file_too_large_to_be_the_published_one_is_not_read_whole(tmp_path, pinned_good, events, monkeypatch):
    monkeypatch.setattr(keras_cache, "MAX_BYTES", len(GOOD))
    planted = cache(tmp_path) / "mnist.npz"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(GOOD + b"x" * 10_000)
    assert keras_cache.load("mnist", str(tmp_path), Downloads(events, {"mnist.npz": GOOD})) == {"mnist.npz": GOOD}


# ---------------------------------------------------------------- the bytes checked are the bytes loaded


def test_mnist_is_made_from_the_bytes_checked_not_from_the_file_read_again(tmp_path, pinned_good, monkeypatch):
    """The file is swapped on the volume right after it was read and hashed: the arrays are still GOOD's."""
    path = cache(tmp_path) / "mnist.npz"
    path.parent.mkdir(parents=True)
    path.write_bytes(GOOD)
    read = keras_cache._read

    def read_then_swap(target: Path):
        content = read(target)
        target.write_bytes(POISON)  # another run's code, between the check and the load
        return content

    monkeypatch.setattr(keras_cache, "_read", read_then_swap)
    splits = data.load_arrays("mnist", str(tmp_path), seed=0)
    expected = data.read_npz(io.BytesIO(GOOD), 0, "mnist")
    assert np.array_equal(splits.x_train, expected.x_train) and np.array_equal(splits.y_eval, expected.y_eval)
    assert path.read_bytes() == POISON


def idx(images: np.ndarray, labels: np.ndarray) -> dict[str, bytes]:
    """Gzipped IDX files as Fashion-MNIST's (magic number, counts, then the bytes)."""
    n = len(labels)
    header_images = (2051).to_bytes(4, "big") + n.to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    header_labels = (2049).to_bytes(4, "big") + n.to_bytes(4, "big")
    return {
        "images": gzip.compress(header_images + images.astype(np.uint8).tobytes()),
        "labels": gzip.compress(header_labels + labels.astype(np.uint8).tobytes()),
    }


def test_fashion_mnist_is_made_from_its_four_checked_files_and_a_planted_one_is_downloaded_again(
        tmp_path, events, monkeypatch):  # fmt: skip
    rng = np.random.RandomState(0)
    x_train, x_test = rng.randint(0, 256, (8, 28, 28)), rng.randint(0, 256, (3, 28, 28))
    train, test = idx(x_train, np.arange(8) % 10), idx(x_test, np.arange(3))
    published = {
        "train-labels-idx1-ubyte.gz": train["labels"],
        "train-images-idx3-ubyte.gz": train["images"],
        "t10k-labels-idx1-ubyte.gz": test["labels"],
        "t10k-images-idx3-ubyte.gz": test["images"],
    }
    monkeypatch.setitem(
        keras_cache.FILES,
        "fashion_mnist",
        tuple(
            Published(n, f"fashion_mnist/{n}", "md5", hashlib.md5(body).hexdigest()) for n, body in published.items()
        ),
    )
    folder = cache(tmp_path) / "fashion_mnist"
    folder.mkdir(parents=True)
    for name, body in published.items():
        (folder / name).write_bytes(body)
    planted = idx(x_train, np.zeros(8))["labels"]  # every training label 0
    (folder / "train-labels-idx1-ubyte.gz").write_bytes(planted)
    downloads = downloading(monkeypatch, Downloads(events, published))
    splits = data.load_arrays("fashion_mnist", str(tmp_path), seed=0)
    assert downloads.calls == 1 and events[0].startswith(f"warn {folder / 'train-labels-idx1-ubyte.gz'} is not")
    assert list(splits.y_train) == list(np.arange(8) % 10) and list(splits.y_eval) == [0, 1, 2]
    assert np.array_equal(splits.x_train[..., 0], (x_train / 255.0).astype(np.float32))
    assert splits.x_eval.shape == (3, 28, 28, 1)
    assert (folder / "train-labels-idx1-ubyte.gz").read_bytes() == published["train-labels-idx1-ubyte.gz"]


def test_concurrent_workers_publish_one_complete_file_and_leave_nothing_else(tmp_path, pinned_good, events):
    """Two workers filling the cache at once: the file is absent or complete, never partial."""
    downloads = Downloads(events, {"mnist.npz": GOOD})
    results: list[dict[str, bytes]] = []
    threads = [threading.Thread(target=lambda: results.append(keras_cache.load("mnist", str(tmp_path), downloads)))
               for _ in range(4)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [{"mnist.npz": GOOD}] * 4
    assert sorted(p.name for p in cache(tmp_path).iterdir()) == ["mnist.npz"]


# ---------------------------------------------------------------- through the real CLI


def test_the_trainer_refuses_a_planted_mnist_and_trains_on_nothing(volume):
    """No network (the proxies point at a closed port): a planted mnist.npz is refused, the download fails, exit 5
    with one line naming the file, before any TensorFlow work; the run does not train."""
    planted = cache(volume.root / "data") / "mnist.npz"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(POISON)
    result = run_trainer(["--dataset", "mnist", "--epochs", "1", *volume.args()], volume)
    assert result.returncode == EXIT_DOWNLOAD, result.stderr[-3000:]
    (error,) = [line for line in result.stderr.splitlines() if "error:" in line]
    assert "cannot download mnist" in error and f"{planted} is not the published mnist.npz" in error, error
    warning = f"dtr_trainer: warning: {planted} is not the published mnist.npz"
    assert result.stderr.index(warning) < result.stderr.index(error), "refused before the download was tried"
    assert "epoch 1/1" not in result.stderr and result.stdout == "" and planted.read_bytes() == POISON
