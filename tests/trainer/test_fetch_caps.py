"""The --dataset-url download's caps (dtr_trainer.fetch_http, dtr_contract.disk), in this process against an HTTPS
server on 127.0.0.1 (tests/support/https_server.py): a Content-Length above the size cap is refused before a byte is
written, a body without one is stopped at the cap and its partial file removed, and every try together ends by the
deadline. Each is permanent (exit 5) with one line naming the cap and the field that raises it."""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import pytest
from dtr_contract import disk, flags
from dtr_trainer import fetch, fetch_http
from dtr_trainer.errors import EXIT_DOWNLOAD, DataError, DownloadError
from dtr_trainer.fetch import CacheFiles, Fetcher, Source, Timing
from dtr_trainer.fetch_http import Caps
from dtr_trainer.main import parse_args

from support import https_server

BODY = bytes(range(256)) * 4096  # 1 MiB
SHA = hashlib.sha256(BODY).hexdigest()
CAP = 256 * 1024  # a quarter of BODY
DRIP = BODY[:100]  # dripped a byte every 50 ms: 5 s
FAST = Timing(attempts=3, backoff_seconds=0.01, read_timeout_seconds=5, heartbeat_seconds=0.05, stale_seconds=5,
              wait_limit_seconds=30, poll_seconds=0.02, progress_seconds=0)  # fmt: skip

# ---------------------------------------------------------------- pure


def test_the_caps_default_to_the_apis_defaults_and_parse_from_their_flags():
    args = parse_args([flags.EXPORT_DIR, "/x", flags.DATASET_URL, "https://h/t.npz", flags.DATASET_SHA256, SHA])
    assert (args.dataset_max_bytes, args.dataset_timeout_seconds) == (disk.DATASET_MAX_BYTES, 3600)
    given = parse_args([flags.EXPORT_DIR, "/x", flags.DATASET_MAX_BYTES, "5000", flags.DATASET_TIMEOUT_SECONDS, "90"])
    assert (given.dataset_max_bytes, given.dataset_timeout_seconds) == (5000, 90)
    for bad in ("0", "-1", "1.5", "1Gi"):
        with pytest.raises(argparse.ArgumentTypeError, match="at least 1"):
            fetch.positive_int(bad)


def test_cap_text_reads_as_a_quantity():
    assert [fetch_http.cap_text(n) for n in (999, 1024, 100 * 1024, 3 << 29, 1 << 30, 1 << 40)] == [
        "999 bytes", "1 KiB", "100 KiB", "1.5 GiB", "1 GiB", "1 TiB"]  # fmt: skip


def test_each_message_is_one_line_naming_the_cap_the_field_and_its_flag():
    url = "https://h/t.npz"
    advertised = fetch_http.too_large_message(url, 1 << 30, 3 << 30)
    grown = fetch_http.too_large_message(url, 1 << 30, None)
    slow = fetch_http.too_slow_message(url, 600)
    for message, words in ((advertised, ("3 GiB", "1 GiB", "nothing was written", "maxSize", flags.DATASET_MAX_BYTES)),
                           (grown, ("1 GiB", "partial file was removed", "maxSize", flags.DATASET_MAX_BYTES)),
                           (slow, ("600 s", "partial file was removed", "timeoutSeconds",
                                   flags.DATASET_TIMEOUT_SECONDS))):  # fmt: skip
        assert "\n" not in message and message.startswith("dataset ") and url in message[:60], message
        assert all(word in message for word in words), (message, words)


# ---------------------------------------------------------------- against an HTTPS server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    files = {"t.npz": BODY, "small.npz": BODY[:CAP], "d.npz": DRIP}
    with https_server.serving(tmp_path_factory.mktemp("https"), files) as served:
        yield served


@pytest.fixture
def trusted(server, monkeypatch):
    return https_server.trusted_by_this_process(server, monkeypatch)


@pytest.fixture
def written(monkeypatch) -> list[int]:
    """The size of every chunk the download writes to its partial file (fetch_http._write, wrapped)."""
    sizes: list[int] = []
    real = fetch_http._write

    def counting(out, chunk: bytes, url: str) -> None:
        sizes.append(len(chunk))
        real(out, chunk, url)

    monkeypatch.setattr(fetch_http, "_write", counting)
    return sizes


def fetcher(data_dir: Path, url: str, caps: Caps, sha: str = SHA, timing: Timing = FAST) -> Fetcher:
    source = Source(url, sha)
    return Fetcher(source, CacheFiles(source.cache_file(str(data_dir))), lambda line: None, timing, caps)


def leftovers(data_dir: Path, sha: str = SHA) -> list[str]:
    directory = data_dir / "cache" / "sha256" / sha
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_a_file_within_the_cap_downloads(trusted, tmp_path, written):
    path = fetcher(tmp_path, trusted.url("small.npz"), Caps(max_bytes=CAP), sha=hashlib.sha256(BODY[:CAP]).hexdigest())
    assert path.obtain().read_bytes() == BODY[:CAP] and sum(written) == CAP  # exactly the cap is allowed


def test_a_content_length_above_the_cap_is_refused_before_a_byte_is_written(trusted, tmp_path, written):
    # It says 1 byte more than the cap, and sends only the cap's worth: were it read, it would be a short body,
    # tried again 3 times and then retryable; refused on its headers, it is one request and permanent.
    url = trusted.url(f"claims/{CAP + 1}/small.npz")
    started = time.monotonic()
    with pytest.raises(DownloadError, match=r"dataset too large: .* is 256 KiB \(its Content-Length\)") as err:
        fetcher(tmp_path, url, Caps(max_bytes=CAP), sha=hashlib.sha256(BODY[:CAP]).hexdigest()).obtain()
    assert err.value.exit_code == EXIT_DOWNLOAD and "nothing was written" in str(err.value)
    assert written == [] and trusted.requests[f"/claims/{CAP + 1}/small.npz"] == 1
    assert leftovers(tmp_path, hashlib.sha256(BODY[:CAP]).hexdigest()) == []  # no claim, no partial file
    assert time.monotonic() - started < 5


def test_a_body_without_a_content_length_is_stopped_at_the_cap_and_removed(trusted, tmp_path, written):
    with pytest.raises(DownloadError, match=r"dataset too large: .* sent more than the run's cap of 256 KiB") as err:
        fetcher(tmp_path, trusted.url("unsized/t.npz"), Caps(max_bytes=CAP)).obtain()
    assert err.value.exit_code == EXIT_DOWNLOAD and "partial file was removed" in str(err.value)
    assert 0 < sum(written) <= CAP  # what reached the volume: never more than the cap
    assert trusted.requests["/unsized/t.npz"] == 1 and leftovers(tmp_path) == []


def test_a_body_longer_than_its_content_length_is_cut_at_it(trusted, tmp_path, written):
    """The server sends twice what it announced: only the announced bytes are read (so a Content-Length under the
    cap bounds what is written), and they are the file."""
    assert fetcher(tmp_path, trusted.url("longer/t.npz"), Caps(max_bytes=len(BODY))).obtain().read_bytes() == BODY
    assert sum(written) == len(BODY)


def test_a_download_slower_than_its_deadline_ends_for_good_and_is_removed(trusted, tmp_path, written):
    # One byte every 50 ms: never 30 s without a byte, so only the total deadline ends it (without one, the whole
    # file arrives after 5 s, right, and nothing is raised).
    sha = hashlib.sha256(DRIP).hexdigest()
    started = time.monotonic()
    with pytest.raises(DownloadError, match=r"dataset download too slow: .* within the run's limit of 1 s") as err:
        fetcher(tmp_path, trusted.url("drip/d.npz"), Caps(total_seconds=1), sha=sha).obtain()
    assert 1 <= time.monotonic() - started < 3 and err.value.exit_code == EXIT_DOWNLOAD
    assert 0 < len(written) < len(DRIP) and trusted.requests["/drip/d.npz"] == 1 and leftovers(tmp_path, sha) == []


def test_the_deadline_covers_every_try_and_the_pauses_between(trusted, tmp_path):
    """503 twice: a pause of 1 s fits the 1.5 s, the next pause of 2 s would not, so no third try."""
    timing = Timing(**{**vars(FAST), "backoff_seconds": 1.0})
    started = time.monotonic()
    with pytest.raises(DownloadError, match="too slow") as err:
        fetcher(tmp_path, trusted.url("status/503"), Caps(total_seconds=1.5), timing=timing).obtain()
    assert err.value.exit_code == EXIT_DOWNLOAD and trusted.requests["/status/503"] == 2
    assert 1 <= time.monotonic() - started < 3


def test_a_waiter_waits_as_long_as_the_holders_deadline(tmp_path, monkeypatch):
    """dataset_from_args: a worker waiting for another's download gives up only after the holder's own deadline
    (and a stale claim's time), so it never gives up on a holder that is still allowed to download."""
    seen: list[Fetcher] = []

    class Recording(Fetcher):
        def content(self) -> bytes:  # what dataset_from_args loads: the checked bytes (obtain's file, read once)
            seen.append(self)
            return b""

    args = parse_args([flags.EXPORT_DIR, "/x", flags.DATASET_URL, "https://h/t.npz", flags.DATASET_SHA256, SHA,
                       flags.DATA_DIR, str(tmp_path), flags.DATASET_TIMEOUT_SECONDS, "7200",
                       flags.DATASET_MAX_BYTES, "12345"])  # fmt: skip
    monkeypatch.setattr(fetch, "Fetcher", Recording)
    fetch.dataset_from_args(args, lambda line: None)
    (used,) = seen
    assert used.caps == Caps(12345, 7200)
    assert used.timing.wait_limit_seconds == 7200 + Timing().stale_seconds


def test_a_wrong_digest_within_the_cap_is_still_a_mismatch(trusted, tmp_path):
    with pytest.raises(DataError, match="digest mismatch"):
        fetcher(tmp_path, trusted.url("t.npz"), Caps(len(BODY)), sha=hashlib.sha256(b"x").hexdigest()).obtain()
