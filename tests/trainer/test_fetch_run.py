"""--dataset-url through the real CLI: two MWMS workers train on an .npz served over HTTPS by this test (a
self-signed certificate the workers trust through SSL_CERT_FILE); the file is downloaded once, a second run
downloads nothing, and each refusal is one line with its exit code, before any TensorFlow work."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from dtr_contract import exits, flags, layout
from dtr_trainer.errors import EXIT_DATA, EXIT_DOWNLOAD, EXIT_DOWNLOAD_RETRY, EXIT_USAGE, EXIT_VOLUME

from devcluster.controlplane import free_ports
from support import https_server
from support.trainer import Volume, kill_all, start_workers, trainer_env, validate_lineage

MODEL = "url-cnn"


def tiny_npz() -> bytes:
    rng = np.random.RandomState(3)
    arrays = {"x_train": rng.randint(0, 256, (256, 28, 28), dtype=np.uint8), "y_train": rng.randint(0, 10, 256),
              "x_test": rng.randint(0, 256, (64, 28, 28), dtype=np.uint8), "y_test": rng.randint(0, 10, 64)}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


BODY = tiny_npz()
SHA = hashlib.sha256(BODY).hexdigest()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with https_server.serving(tmp_path_factory.mktemp("https"), {"tiny.npz": BODY}) as served:
        yield served


def url_args(server, sha: str = SHA, path: str = "tiny.npz") -> list[str]:
    return [flags.DATASET_URL, server.url(path), flags.DATASET_SHA256, sha, "--epochs", "1",
            "--batch-size-per-worker", "16"]


def run_cli(args: list[str], volume: Volume, server) -> subprocess.CompletedProcess:
    """One worker, no TF_CONFIG, trusting the test's certificate as a cluster admin's SSL_CERT_FILE makes it."""
    return subprocess.run([sys.executable, "-m", "dtr_trainer", *args],
                          env={**trainer_env(volume, None), "SSL_CERT_FILE": str(server.cert)},
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip


def one_error_line(result: subprocess.CompletedProcess, code: int) -> str:
    assert result.returncode == code, result.stderr[-3000:]
    lines = [ln for ln in result.stderr.splitlines() if "error" in ln.lower()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def two_workers(server, tmp_path_factory):
    volume = Volume(tmp_path_factory.mktemp("url-run") / "mnt-dtr")
    server.requests.clear()
    workers = start_workers(volume, free_ports(2), url_args(server) + volume.args(MODEL),
                            env_extra={"SSL_CERT_FILE": str(server.cert)})
    try:
        codes = [w.wait() for w in workers]
    finally:
        kill_all(workers)
    return volume, workers, codes, server.requests["/tiny.npz"]


def test_two_workers_download_once_and_both_train_on_the_file(two_workers):
    volume, workers, codes, requests = two_workers
    assert codes == [0, 0], "\n".join(w.log()[-2000:] for w in workers)
    assert requests == 1
    logs = [w.log() for w in workers]
    downloaded = ["downloaded" in log for log in logs]
    assert sorted(downloaded) == [False, True], logs  # one downloads, the other waits and checks the file
    assert "using the cached" in logs[downloaded.index(False)], logs
    for log in logs:  # both trained on the served file's 256 + 64 examples
        assert "2 worker(s)" in log and "256 train / 64 eval examples" in log, log[-2000:]
    cached = layout.dataset_cache_file(str(volume.root / "data"), SHA, "tiny.npz")
    assert Path(cached).read_bytes() == BODY
    assert sorted(p.name for p in (volume.root / "data" / "cache" / "sha256" / SHA).iterdir()) == ["tiny.npz"]


def test_the_lineage_records_the_url_and_the_digest(two_workers, server):
    volume, _, codes, _ = two_workers
    assert codes == [0, 0]
    doc = validate_lineage(volume.root / "models" / MODEL / "1")
    assert doc["training"]["datasetSource"] == {"url": server.url("tiny.npz"), "sha256": SHA}
    assert doc["training"]["dataset"] == f"cache/sha256/{SHA}/tiny.npz"


def test_a_second_run_uses_the_cache_without_a_request(two_workers, server):
    """The second run stops at the volume check that follows the data (its --backup-dir is a file): a whole
    second training would add 20 s and show nothing more, the first run trained on this very file."""
    volume, _, codes, _ = two_workers
    assert codes == [0, 0]
    before = server.requests["/tiny.npz"]
    not_a_dir = volume.root / "backup" / "a-file"
    not_a_dir.write_text("")
    result = run_cli(url_args(server) + volume.args(MODEL, run="run2") + ["--backup-dir", str(not_a_dir)], volume,
                     server)
    one_error_line(result, EXIT_VOLUME)
    assert server.requests["/tiny.npz"] == before and "downloading" not in result.stderr
    assert f"using the cached {volume.root / 'data' / 'cache' / 'sha256' / SHA / 'tiny.npz'}" in result.stderr


def test_a_wrong_digest_fails_for_good_at_once_naming_both_digests(server, volume):
    wrong = hashlib.sha256(b"not the file").hexdigest()
    started = time.monotonic()
    result = run_cli(url_args(server, sha=wrong) + volume.args(MODEL), volume, server)
    line = one_error_line(result, EXIT_DATA)
    assert wrong in line and SHA in line and server.url("tiny.npz") in line
    assert not exits.is_retryable(result.returncode) and time.monotonic() - started < 60
    assert "epoch" not in result.stderr and not list((volume.root / "data" / "cache" / "sha256" / wrong).iterdir())


def test_a_file_larger_than_its_cap_fails_for_good_naming_the_field_and_leaves_nothing(server, volume):
    capped = [*url_args(server), flags.DATASET_MAX_BYTES, str(len(BODY) - 1), *volume.args(MODEL)]
    line = one_error_line(run_cli(capped, volume, server), EXIT_DOWNLOAD)
    assert "dataset too large" in line and "spec.training.datasetSource.maxSize" in line, line
    assert not exits.is_retryable(EXIT_DOWNLOAD) and "epoch" not in line
    assert not list((volume.root / "data" / "cache" / "sha256" / SHA).iterdir())


def test_http_is_refused(server, volume):
    plain = [flags.DATASET_URL, f"http://127.0.0.1:{server.port}/tiny.npz", flags.DATASET_SHA256, SHA]
    line = one_error_line(run_cli(plain + volume.args(MODEL), volume, server), EXIT_USAGE)
    assert flags.DATASET_URL in line and "only https://" in line


def test_an_unreachable_url_is_retryable(server, volume):
    closed = free_ports(1)[0]
    args = [flags.DATASET_URL, f"https://127.0.0.1:{closed}/tiny.npz", flags.DATASET_SHA256, SHA]
    line = one_error_line(run_cli(args + volume.args(MODEL), volume, server), EXIT_DOWNLOAD_RETRY)
    assert "3 tries" in line and exits.is_retryable(EXIT_DOWNLOAD_RETRY)
