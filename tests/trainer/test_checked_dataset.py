"""A --dataset-url file (spec.training.datasetSource) is loaded from the bytes whose SHA-256 was checked, not from the
file opened again by its path (issue 39 item 4, security review R12): on a claim shared with other runs, their code
could swap the cached file between the check and the load. No network: the file is in the cache already, as a
later run finds it. The download itself, with real workers: test_fetch_run.py."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from dtr_contract import flags
from dtr_trainer import data, fetch, main, user
from dtr_trainer.errors import DataError
from dtr_trainer.fetch import CacheFiles, Fetcher, Source


def npz(seed: int) -> bytes:
    rng = np.random.RandomState(seed)
    buffer = io.BytesIO()
    np.savez(buffer, x_train=rng.randint(0, 256, (16, 28, 28), dtype=np.uint8), y_train=np.arange(16) % 10,
             x_test=rng.randint(0, 256, (4, 28, 28), dtype=np.uint8), y_test=np.arange(4))  # fmt: skip
    return buffer.getvalue()


GOOD, POISON = npz(1), npz(2)
SOURCE = Source("https://data.example/sets/train.npz", hashlib.sha256(GOOD).hexdigest())


def cached(tmp_path, body: bytes = GOOD) -> Fetcher:
    path = SOURCE.cache_file(str(tmp_path))
    path.parent.mkdir(parents=True)
    path.write_bytes(body)
    return Fetcher(SOURCE, CacheFiles(path), lambda line: None)


def test_the_fetcher_gives_the_bytes_it_hashed_though_the_file_is_swapped_right_after(tmp_path, monkeypatch):
    fetcher = cached(tmp_path)
    hashed = fetch.cached_content

    def hash_then_swap(path, sha256):
        found = hashed(path, sha256)
        path.write_bytes(POISON)  # another run's code, between the check and the load
        return found

    monkeypatch.setattr(fetch, "cached_content", hash_then_swap)
    assert fetcher.content() == GOOD
    assert SOURCE.cache_file(str(tmp_path)).read_bytes() == POISON


def test_a_file_another_worker_published_is_read_and_checked_once_more(tmp_path, monkeypatch):
    """A waiter that saw the claim go looks again; a file that is not the pinned one by then fails the run."""
    fetcher = cached(tmp_path, POISON)
    monkeypatch.setattr(Fetcher, "obtain", lambda self: self.files.target)  # published meanwhile, by another
    with pytest.raises(DataError, match=f"changed on the volume just after it was checked: it is not {SOURCE.sha256}"):
        fetcher.content()
    SOURCE.cache_file(str(tmp_path)).write_bytes(GOOD)
    assert fetcher.content() == GOOD


def test_the_run_gets_the_files_path_and_its_checked_bytes(tmp_path):
    cached(tmp_path)
    args = main.parse_args([flags.DATASET_URL, SOURCE.url, flags.DATASET_SHA256, SOURCE.sha256, flags.DATA_DIR,
                            str(tmp_path), flags.EXPORT_DIR, str(tmp_path / "models" / "m")])  # fmt: skip
    assert fetch.dataset_from_args(args, lambda line: None) == (SOURCE.relative_path(), GOOD)
    args = main.parse_args([flags.DATASET, "digits", flags.EXPORT_DIR, "/x"])
    assert fetch.dataset_from_args(args, lambda line: None) == ("digits", None)


def test_the_built_in_loader_makes_the_arrays_from_those_bytes_and_lets_them_go(tmp_path):
    """main.load_code with the checked bytes: the file on the volume is POISON by now, the arrays are GOOD's."""
    cached(tmp_path, POISON)
    args = main.parse_args([flags.DATASET, SOURCE.relative_path(), flags.DATA_DIR, str(tmp_path), flags.EXPORT_DIR,
                            str(tmp_path / "models" / "m")])  # fmt: skip
    code = main.load_code(args, None, GOOD)
    ctx = user.Context(worker_index=0, num_workers=1, is_chief=True, batch_size_per_worker=4, global_batch_size=4,
                       data_dir=str(tmp_path), seed=0, epochs=1, learning_rate=0.1, dataset=args.dataset)  # fmt: skip
    loaded = user.load_data_before_strategy(code, ctx)  # as main.run calls it: once, before the strategy
    x_train, x_eval = loaded.train.data[0], loaded.eval.data[0]
    expected = data.read_npz(io.BytesIO(GOOD), 0, "good")
    assert np.array_equal(x_train, expected.x_train) and np.array_equal(x_eval, expected.x_eval)
    cells = [c.cell_contents for c in code.load_data.fn.__closure__ or () if isinstance(c.cell_contents, list)]
    assert [None] in cells, "the bytes are let go once the arrays are made"
    assert code.load_data.fn(ctx)[0][0] is x_train, "called again: the same arrays, never the file on the volume"
    by_path = main.load_code(args).load_data.fn(ctx)[0][0]  # the control: by path, the file as it is now
    assert not np.array_equal(by_path, expected.x_train)
