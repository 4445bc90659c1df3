"""The Keras datasets (mnist, fashion_mnist) cached on the run's volume: used only when each file's digest is the one
published for it, and loaded from the very bytes that were checked (security review R5: with a claim shared between
runs, one run's code could leave a poisoned <data-dir>/keras/mnist.npz that later runs trained on).

The cache holds the files as Keras downloads them, under <data-dir>/keras/ (dtr_contract.layout.keras_cache_dir):
mnist.npz, and fashion_mnist/ with Fashion-MNIST's four .gz files. Each is read once into memory (11 MB for mnist,
30 MB for fashion_mnist; never more than MAX_BYTES), hashed, and the arrays are made from those bytes, so a file
changed on the volume after its check is never what the run trains on. A file with another digest (changed on the
volume, or a cache written by trainers before this check, which saved the arrays again as <name>.npz) is said once
and downloaded again into a directory of this process's own, through Keras' get_file with the same digest, checked
once more, and published over it with one rename; when it cannot be downloaded (no network), the run fails, exit 5,
naming the file and both digests: nothing it could not check is trained on.

The digests, here and nowhere else in the trainer: mnist.npz's is the SHA-256 Keras itself passes to get_file
(keras/datasets/mnist.py; tests/trainer/test_keras_cache.py reads it from the installed Keras). Keras publishes none
for Fashion-MNIST, whose loader downloads without a hash: these are the MD5s the dataset's authors publish for the
four files (github.com/zalandoresearch/fashion-mnist, README), which torchvision checks too. MD5 is broken for
collisions, which needs both files chosen by the attacker; matching a file published years ago needs a second
preimage, which nobody can make.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sys
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dtr_contract import flags, layout

from dtr_trainer.errors import DataError, DownloadError

ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"  # where Keras' loaders download from
OFFLINE_HINT = f"use {flags.DATASET} digits or synthetic (no download), or put a .npz file in {flags.DATA_DIR}"
MAX_BYTES = 64 * 2**20  # the largest file here is 26 MB: anything larger is not it, and is not read whole


@dataclass(frozen=True)
class Published:
    """One file of a Keras dataset: its name at ORIGIN, where it is cached under <data-dir>/keras/, its digest."""

    name: str
    path: str
    algorithm: str  # hashlib's name: sha256, md5
    digest: str


def _fashion(name: str, md5: str) -> Published:
    return Published(name, f"fashion_mnist/{name}", "md5", md5)


FILES: Mapping[str, tuple[Published, ...]] = {
    "mnist": (Published("mnist.npz", "mnist.npz", "sha256",
                        "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"),),
    "fashion_mnist": (_fashion("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
                      _fashion("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
                      _fashion("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"),
                      _fashion("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79")),
}  # fmt: skip

Download = Callable[[Published, Path], bytes]  # the file into a private directory; its bytes


# ---------------------------------------------------------------- pure


def digest_of(content: bytes, algorithm: str) -> str:
    return hashlib.new(algorithm, content).hexdigest()


def mismatch(where: str, file: Published, got: str) -> str:
    """Why a file is not used: where it is, what digest it has, which one is published."""
    return f"{where} is not the published {file.name}: its {file.algorithm} is {got}, not {file.digest}"


# ---------------------------------------------------------------- shell


def _warn(message: str) -> None:
    print(f"dtr_trainer: warning: {message}", file=sys.stderr, flush=True)


def _read(path: Path) -> bytes | None:
    """The file's bytes (at most MAX_BYTES + 1: a larger file cannot be the published one), None when absent."""
    try:
        with open(path, "rb") as f:
            return f.read(MAX_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def keras_download(file: Published, into: Path) -> bytes:
    """Through Keras' own get_file, as its loaders download (proxies from the environment), with the digest."""
    from tensorflow import keras  # no TensorFlow op runs here

    # Keras prints its progress on stdout, which carries only the summary JSON: send it to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        path = keras.utils.get_file(file.name, origin=ORIGIN + file.name, file_hash=file.digest, cache_dir=str(into),
                                    cache_subdir="")  # fmt: skip
    return Path(path).read_bytes()


def _publish(target: Path, content: bytes) -> None:
    """The checked bytes into the cache with one rename: the file is absent or complete, and a second writer
    replaces it with equal bytes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    try:
        partial.write_bytes(content)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def _downloaded(dataset: str, file: Published, cache: Path, download: Download, refused: str | None) -> bytes:
    """The file downloaded into a directory of this process's own under the cache, checked, and published."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        private = Path(tempfile.mkdtemp(prefix=".download-", dir=cache))
    except OSError as exc:
        raise DataError(f"cannot create cache dir {cache}: {exc.strerror}") from None
    try:
        content = download(file, private)
    except Exception as exc:  # Keras wraps every network failure in a plain Exception
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # The hint before the cause: a status message keeps only a line's first 160 characters.
        refusal = f"; {refused}" if refused else ""
        raise DownloadError(f"cannot download {dataset}: {OFFLINE_HINT} ({reason}){refusal}") from None
    finally:
        shutil.rmtree(private, ignore_errors=True)
    got = digest_of(content, file.algorithm)
    if got != file.digest:
        raise DownloadError(f"cannot download {dataset}: {mismatch(ORIGIN + file.name, file, got)}")
    _publish(cache / file.path, content)
    return content


def checked(dataset: str, file: Published, cache: Path, download: Download) -> bytes:
    """One file's bytes, as published: the cached file's when its digest is the one published, else downloaded."""
    path = cache / file.path
    content = _read(path)
    if content is None:
        return _downloaded(dataset, file, cache, download, None)
    got = digest_of(content, file.algorithm)
    if got == file.digest:
        return content
    refused = mismatch(str(path), file, got)
    _warn(f"{refused} (changed on the volume, or cached by an older trainer): not used; downloading it again")
    return _downloaded(dataset, file, cache, download, refused)


def load(dataset: str, data_dir: str, download: Download | None = None) -> dict[str, bytes]:
    """{file name: its checked bytes} of a Keras dataset (FILES), from the cache on the volume or downloaded (by
    keras_download unless told)."""
    cache = Path(layout.keras_cache_dir(data_dir))
    return {file.name: checked(dataset, file, cache, download or keras_download) for file in FILES[dataset]}
