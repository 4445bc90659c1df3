"""dtr_trainer.fetch in this process (no TensorFlow): the pure parts, then the download protocol against an HTTPS
server on 127.0.0.1 with a self-signed certificate (tests/support/https_server.py); its caps: test_fetch_caps.py."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import threading
import time
from pathlib import Path
from urllib.parse import quote

import jsonschema
import pytest
from dtr_contract import flags, layout
from dtr_trainer import data, fetch, fetch_http, lineage
from dtr_trainer.errors import (
    EXIT_DATA,
    EXIT_DOWNLOAD,
    EXIT_DOWNLOAD_RETRY,
    DataError,
    DownloadError,
    DownloadRetryError,
    UsageError,
)
from dtr_trainer.fetch import (
    Cached,
    CacheFiles,
    ClaimWatch,
    Fetcher,
    Source,
    Step,
    Timing,
    next_step,
)
from dtr_trainer.lineage import RunIdentity
from dtr_trainer.main import parse_args

from support import https_server

REPO = Path(__file__).resolve().parents[2]
BODY = b"tiny dataset bytes\n" * 1000
SHA = hashlib.sha256(BODY).hexdigest()
OTHER_SHA = hashlib.sha256(b"something else").hexdigest()
FAST = Timing(attempts=3, backoff_seconds=0.01, read_timeout_seconds=5, heartbeat_seconds=0.05, stale_seconds=5,
              wait_limit_seconds=10, poll_seconds=0.02, progress_seconds=0)

# ---------------------------------------------------------------- pure


@pytest.mark.parametrize("url", [
    "https://example.org/data/train.npz",
    "https://example.org:8443/a/b/train-v2.npz?X-Amz-Signature=abc&x=1",
    "HTTPS://example.org/x%2By.csv",
])
def test_https_urls_with_a_file_name_are_accepted(url):
    assert fetch.https_url(url) == url


@pytest.mark.parametrize("url, words", [
    ("http://example.org/train.npz", "only https://"),
    ("ftp://example.org/train.npz", "only https://"),
    ("example.org/train.npz", "only https://"),
    ("https:///train.npz", "no host"),
    ("https://user:secret@example.org/train.npz", "no user or password"),
    ("https://example.org/", "must end in a file name"),
    ("https://example.org/data/", "must end in a file name"),
    ("https://example.org/%2e%2e", "must end in a file name"),
    ("https://example.org/a%2Fb.npz", "must end in a file name"),
    ("https://example.org/.hidden", "must end in a file name"),
])
def test_other_urls_are_refused(url, words):
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        fetch.https_url(url)


def test_digest_is_64_hex_digits_in_any_case():
    assert fetch.sha256_hex(f" {SHA.upper()} ") == SHA
    for bad in (SHA[:-1], SHA + "0", "g" * 64, f"sha256:{SHA}"):
        with pytest.raises(argparse.ArgumentTypeError, match="64 hex digits"):
            fetch.sha256_hex(bad)


def argv(*extra: str) -> list[str]:
    return [flags.EXPORT_DIR, "/x", *extra]


def test_the_flags_parse_into_one_source():
    args = parse_args(argv(flags.DATASET_URL, "https://h/t.npz", flags.DATASET_SHA256, SHA.upper()))
    assert fetch.source_of(args.dataset_url, args.dataset_sha256) == Source("https://h/t.npz", SHA)
    plain = parse_args(argv(flags.DATASET, "digits"))
    assert fetch.source_of(plain.dataset_url, plain.dataset_sha256) is None


@pytest.mark.parametrize("extra, words", [
    ((flags.DATASET_URL, "http://h/t.npz", flags.DATASET_SHA256, SHA), "only https://"),
    ((flags.DATASET_URL, "https://h/t.npz", flags.DATASET_SHA256, "abc"), "64 hex digits"),
    ((flags.DATASET, "digits", flags.DATASET_URL, "https://h/t.npz", flags.DATASET_SHA256, SHA), "not allowed with"),
])
def test_bad_flags_are_usage_errors(extra, words):
    with pytest.raises(UsageError, match=words):
        parse_args(argv(*extra))


def test_url_and_digest_come_together():
    with pytest.raises(UsageError, match=f"{flags.DATASET_URL} needs {flags.DATASET_SHA256}"):
        fetch.source_of("https://h/t.npz", None)
    with pytest.raises(UsageError, match=f"{flags.DATASET_URL}, which is missing"):
        fetch.source_of(None, SHA)


def test_the_cache_path_names_the_digest_and_the_file_and_stays_in_the_data_dir(tmp_path):
    source = Source("https://h/dir/my%20data.npz?sig=x", SHA)
    assert source.file_name == "my data.npz"
    data_dir = str(tmp_path / "data")
    assert str(source.cache_file(data_dir)) == layout.dataset_cache_file(data_dir, SHA, "my data.npz")
    assert source.relative_path() == f"cache/sha256/{SHA}/my data.npz"
    assert Path(data_dir, source.relative_path()) == source.cache_file(data_dir)
    source.cache_file(data_dir).parent.mkdir(parents=True)
    source.cache_file(data_dir).write_bytes(b"x")
    assert data.resolve_npz(data_dir, "cache/sha256/" + SHA + "/my data.npz") == source.cache_file(data_dir)


def test_mismatch_message_is_one_line_with_both_digests_and_the_url():
    message = fetch.mismatch_message(Source("https://h/t.npz", SHA), OTHER_SHA)
    assert "\n" not in message and SHA in message and OTHER_SHA in message and "https://h/t.npz" in message
    assert message.index(OTHER_SHA) < 160  # what a status line keeps


@pytest.mark.parametrize("cached, quiet, waited, step", [
    (Cached.GOOD, None, 0, Step.USE),
    (Cached.MISSING, None, 0, Step.DOWNLOAD),
    (Cached.BAD, None, 0, Step.DOWNLOAD),
    (None, 0.0, 0, Step.WAIT),
    (None, 119.0, 3599, Step.WAIT),
    (None, 120.0, 10, Step.TAKE_OVER),
    (None, 1.0, 3600, Step.GIVE_UP),
])
def test_who_downloads_who_waits(cached, quiet, waited, step):
    assert next_step(cached, quiet, waited, Timing()) is step


def test_a_claim_is_quiet_from_its_last_change_on_our_own_clock():
    watch = ClaimWatch()
    assert watch.quiet_seconds(None, 100.0) is None
    assert watch.quiet_seconds((1, 0, 5), 100.0) == 0.0
    assert watch.quiet_seconds((1, 0, 5), 130.0) == 30.0
    assert watch.quiet_seconds((1, 0, 9), 131.0) == 0.0  # touched by its holder
    assert watch.quiet_seconds((1, 0, 9), 140.5) == 9.5
    assert watch.quiet_seconds(None, 141.0) is None
    assert watch.quiet_seconds((2, 0, 9), 150.0) == 0.0  # a new claim


def test_transient_statuses():
    assert [c for c in (200, 400, 401, 403, 404, 408, 410, 429, 500, 501, 502, 503, 504)
            if fetch_http.is_transient_status(c)] == [408, 429, 500, 502, 503, 504]  # fmt: skip


def test_progress_text():
    assert fetch_http.progress_text(12_500_000, 100_000_000) == "12.5 MB of 100.0 MB (12%)"
    assert fetch_http.progress_text(12_500_000, None) == "12.5 MB"


def test_progress_and_heartbeat_are_throttled(tmp_path):
    now = [0.0]
    lines: list[str] = []
    files = CacheFiles(tmp_path / "t.npz")
    assert files.try_claim("tok")
    os.utime(files.claim, (1, 1))
    beat = fetch._Beat(files, lines.append, Timing(heartbeat_seconds=5, progress_seconds=10), lambda: now[0])
    for t in range(31):
        now[0] = float(t)
        beat(t * 1_000_000, 30_000_000)
    assert lines == ["dataset download: 10.0 MB of 30.0 MB (33%)", "dataset download: 20.0 MB of 30.0 MB (66%)",
                     "dataset download: 30.0 MB of 30.0 MB (100%)"]
    assert os.stat(files.claim).st_mtime > 1  # touched


def test_lineage_records_url_and_digest_and_validates():
    schema = json.loads((REPO / "docs" / "lineage.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    source = Source("https://h/t.npz", SHA)
    figures = lineage.Figures({"loss": 1, "accuracy": 0.5}, "accuracy", 5)
    training = lineage.Training("cnn", source.relative_path(), None, 1, 1, 1, 2, 1, 0.1, 2, source.url, source.sha256)
    doc = lineage.document(RunIdentity(), training, figures, "m", 1, "2.11.0", lineage.utc_now())
    validator.validate(doc)
    assert doc["training"]["datasetSource"] == {"url": "https://h/t.npz", "sha256": SHA}
    plain = lineage.document(RunIdentity(), lineage.Training("cnn", "digits", None, 1, 1, 1, 2, 1, 0.1, 2),
                             figures, "m", 1, "2.11.0", lineage.utc_now())
    validator.validate(plain)
    assert plain["training"]["datasetSource"] is None
    doc["training"]["datasetSource"]["url"] = "http://h/t.npz"
    assert not validator.is_valid(doc)


# ---------------------------------------------------------------- against an HTTPS server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with https_server.serving(tmp_path_factory.mktemp("https"), {"t.npz": BODY}) as served:
        yield served


@pytest.fixture
def trusted(server, monkeypatch):
    return https_server.trusted_by_this_process(server, monkeypatch)


def fetcher(data_dir: Path, url: str, sha: str = SHA, timing: Timing = FAST, log=None) -> Fetcher:
    source = Source(url, sha)
    return Fetcher(source, CacheFiles(source.cache_file(str(data_dir))), log or (lambda line: None), timing)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_downloads_once_then_reuses_and_replaces_a_changed_copy(trusted, tmp_path):
    lines: list[str] = []
    first = fetcher(tmp_path, trusted.url("t.npz"), log=lines.append)
    path = first.obtain()
    assert path.read_bytes() == BODY and trusted.requests["/t.npz"] == 1
    assert leftovers(path.parent) == ["t.npz"]  # no claim, no partial file
    assert fetcher(tmp_path, trusted.url("t.npz")).obtain() == path and trusted.requests["/t.npz"] == 1
    assert any("sha256 verified" in line for line in lines)
    path.write_bytes(BODY[:-1])  # damaged on the volume
    lines.clear()
    assert fetcher(tmp_path, trusted.url("t.npz"), log=lines.append).obtain().read_bytes() == BODY
    assert trusted.requests["/t.npz"] == 2 and any("downloading it again" in line for line in lines)


def test_a_wrong_digest_fails_at_once_and_caches_nothing(trusted, tmp_path):
    with pytest.raises(DataError) as err:
        fetcher(tmp_path, trusted.url("t.npz"), sha=OTHER_SHA).obtain()
    assert err.value.exit_code == EXIT_DATA
    assert SHA in str(err.value) and OTHER_SHA in str(err.value) and trusted.url("t.npz") in str(err.value)
    assert trusted.requests["/t.npz"] == 1  # a mismatch is not retried
    assert leftovers(tmp_path / "cache" / "sha256" / OTHER_SHA) == []


def test_redirects_are_followed_to_https_only(trusted, tmp_path):
    to_https = fetch.https_url(trusted.url(f"redirect/t.npz?to={quote(trusted.url('t.npz'))}"))
    assert fetcher(tmp_path, to_https).obtain().read_bytes() == BODY
    assert trusted.requests["/redirect/t.npz"] == trusted.requests["/t.npz"] == 1
    to_http = fetch.https_url(trusted.url(f"redirect/u.npz?to={quote(f'http://127.0.0.1:{trusted.port}/t.npz')}"))
    with pytest.raises(DownloadError, match=r"redirects to http://.*only https:// is followed") as err:
        fetcher(tmp_path, to_http, sha=OTHER_SHA).obtain()
    assert err.value.exit_code == EXIT_DOWNLOAD and trusted.requests["/t.npz"] == 1


def test_a_missing_file_is_a_permanent_failure(trusted, tmp_path):
    with pytest.raises(DownloadError, match="HTTP 404") as err:
        fetcher(tmp_path, trusted.url("nothing.npz")).obtain()
    assert err.value.exit_code == EXIT_DOWNLOAD and trusted.requests["/nothing.npz"] == 1


@pytest.mark.parametrize("path", ["status/503", "short/t.npz"])
def test_transient_failures_are_tried_again_then_retryable(trusted, tmp_path, path):
    lines: list[str] = []
    with pytest.raises(DownloadRetryError, match="3 tries") as err:
        fetcher(tmp_path, trusted.url(path), log=lines.append).obtain()
    assert err.value.exit_code == EXIT_DOWNLOAD_RETRY
    assert trusted.requests["/" + path] == 3
    assert sum("try " in line for line in lines) == 2
    assert leftovers(tmp_path / "cache" / "sha256" / SHA) == []


def test_an_untrusted_certificate_names_ssl_cert_file(server, monkeypatch, tmp_path):
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-such-bundle.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    with pytest.raises(DownloadError, match="SSL_CERT_FILE") as err:
        fetcher(tmp_path, server.url("t.npz")).obtain()
    assert "TLS certificate was refused" in str(err.value) and err.value.exit_code == EXIT_DOWNLOAD


def test_a_certificate_for_another_name_says_so_without_the_ca_hint(trusted, tmp_path):
    with pytest.raises(DownloadError, match=r"certificate is not valid for 'localhost'\)$"):
        fetcher(tmp_path, f"https://localhost:{trusted.port}/t.npz").obtain()


def test_concurrent_fetchers_download_once(trusted, tmp_path):
    results: list[object] = []

    def one() -> None:
        try:
            results.append(fetcher(tmp_path, trusted.url("t.npz")).obtain().read_bytes())
        except Exception as exc:  # reported by the assert below
            results.append(exc)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [BODY] * 6 and trusted.requests["/t.npz"] == 1


def test_a_waiter_uses_what_the_claims_holder_publishes(trusted, tmp_path):
    waiter = fetcher(tmp_path, trusted.url("t.npz"))
    files = waiter.files
    files.target.parent.mkdir(parents=True)
    assert files.try_claim("holder")

    def holder() -> None:
        time.sleep(0.3)
        files.target.write_bytes(BODY)
        files.release("holder")

    threading.Thread(target=holder).start()
    assert waiter.obtain().read_bytes() == BODY and trusted.requests["/t.npz"] == 0


def test_a_dead_holders_claim_and_partial_file_are_taken_over(trusted, tmp_path):
    lines: list[str] = []
    waiter = fetcher(tmp_path, trusted.url("t.npz"), timing=Timing(**{**vars(FAST), "stale_seconds": 0.3,
                                                                       "partial_max_age_seconds": 60}),
                     log=lines.append)
    files = waiter.files
    files.target.parent.mkdir(parents=True)
    assert files.try_claim("dead")
    old = files.partial("dead")
    old.write_bytes(b"half")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    started = time.monotonic()
    assert waiter.obtain().read_bytes() == BODY
    assert 0.3 <= time.monotonic() - started < 10 and trusted.requests["/t.npz"] == 1
    assert any("taking over" in line for line in lines) and leftovers(files.target.parent) == ["t.npz"]


def test_a_waiter_gives_up_on_a_holder_that_never_finishes(trusted, tmp_path):
    waiter = fetcher(tmp_path, trusted.url("t.npz"), timing=Timing(**{**vars(FAST), "wait_limit_seconds": 0.5}))
    files = waiter.files
    files.target.parent.mkdir(parents=True)
    assert files.try_claim("slow")
    files.claim.write_text("slow worker-0 (pid 1)\n")  # as another pod's trainer would have named itself
    stop = threading.Event()

    def alive() -> None:  # a holder that still shows life, as the trainer's does: by the claim's mtime
        while not stop.wait(0.05):
            files.touch_claim()

    threading.Thread(target=alive).start()
    try:
        with pytest.raises(DownloadRetryError, match="gave up after 0 s waiting for worker-0") as err:
            waiter.obtain()
    finally:
        stop.set()
    assert err.value.exit_code == EXIT_DOWNLOAD_RETRY and trusted.requests["/t.npz"] == 0
