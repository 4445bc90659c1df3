"""A dataset from an https:// URL with a pinned SHA-256, downloaded once into the volume's data cache.

`--dataset-url URL --dataset-sha256 HEX` put the file at <data-dir>/cache/sha256/<digest>/<name from the URL>
(dtr_contract.layout); from then on it is the run's dataset, as a `.npz` under --data-dir is. All workers
start here at once: the first to create the claim file exclusively downloads into a partial file of its
own, checks the digest and renames the file into place; the others wait for the claim to go and check the
file's digest themselves. The cache is content-addressed and a file is published only after its digest
matched, so the claim only saves downloads: a race that lets two processes download (a claim taken over
from a holder that was only slow) publishes equal bytes twice, never a wrong file. The run loads the bytes it hashed
(Fetcher.content), not the path again: on a shared claim another run's code could swap the file (review R12).

The download itself, over HTTPS and capped in size and time (--dataset-max-bytes, --dataset-timeout-seconds), is
fetch_http's. The pure parts (URL and digest checks, paths, the waiting decisions) are apart from the shell (files),
so they are tested without a network. Stdlib only: no TensorFlow op runs here.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import hashlib
import os
import posixpath
import re
import socket
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dtr_contract import flags, layout

from dtr_trainer import volume
from dtr_trainer.errors import DataError, DownloadRetryError, UsageError
from dtr_trainer.fetch_http import Caps, download, progress_text, size_text

Log = Callable[[str], None]
Stamp = tuple[int, int, int]  # a claim file's (inode, size, mtime in ns): changes whenever its holder touches it

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# What a file name in the cache may be: no path separator, no leading dot (the cache's own files are hidden).
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,199}")


@dataclass(frozen=True)
class Timing:
    attempts: int = 3  # tries of a transient failure before exiting to be restarted (EXIT_DOWNLOAD_RETRY)
    backoff_seconds: float = 2.0  # before try n+1: n x this
    read_timeout_seconds: float = 30.0  # connect, and each read
    heartbeat_seconds: float = 5.0  # the holder touches its claim at least this often while it downloads
    # A claim unchanged this long (on the waiter's own clock) belongs to a holder that died: taken over.
    # Well above the longest silence of a live holder: one read timeout, or a backoff between tries.
    stale_seconds: float = 120.0
    # A waiter gives up (retryable) even if the holder still shows life; dataset_from_args makes it the holder's
    # deadline (--dataset-timeout-seconds) and a stale claim's time more, so a live holder is never given up on.
    wait_limit_seconds: float = 3600.0
    poll_seconds: float = 0.5
    progress_seconds: float = 10.0  # at most one progress line this often
    partial_max_age_seconds: float = 3600.0  # a dead holder's partial file older than this is removed


# ---------------------------------------------------------------- pure: flags and paths


@dataclass(frozen=True)
class Source:
    url: str
    sha256: str

    @property
    def file_name(self) -> str:
        return url_file_name(self.url)

    def relative_path(self) -> str:
        """The cached file's path relative to --data-dir: a valid --dataset for a later run without network."""
        return layout.dataset_cache_file("", self.sha256, self.file_name).lstrip("/")

    def cache_file(self, data_dir: str) -> Path:
        return Path(layout.dataset_cache_file(data_dir, self.sha256, self.file_name))


def url_file_name(url: str) -> str:
    """The URL path's last segment, percent-decoded (the query, as in a pre-signed URL, is not part of it)."""
    segment = posixpath.basename(urllib.parse.urlsplit(url).path)
    return urllib.parse.unquote(segment)


def https_url(text: str) -> str:
    """argparse type of --dataset-url: https, a host, a file name at the end, no credentials."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme.lower() != "https":
        raise argparse.ArgumentTypeError(f"only https:// URLs are fetched, got {text!r}")
    if not parts.hostname:
        raise argparse.ArgumentTypeError(f"no host in {text!r}")
    if parts.username is not None or parts.password is not None:
        raise argparse.ArgumentTypeError("no user or password in the URL: it would be written to the logs and "
                                         "lineage.json")
    name = url_file_name(text)
    if not SAFE_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(f"the URL's path must end in a file name (letters, digits, ._+-), got "
                                         f"{name!r} in {text!r}")
    return text


def sha256_hex(text: str) -> str:
    """argparse type of --dataset-sha256 and --code-sha256: 64 hex digits as `sha256sum FILE` prints, any case."""
    digest = text.strip().lower()
    if not SHA256_HEX.fullmatch(digest):
        raise argparse.ArgumentTypeError(f"must be 64 hex digits (sha256sum FILE), got {text!r}")
    return digest


def add_arguments(parser: argparse.ArgumentParser, sources: argparse._MutuallyExclusiveGroup) -> None:
    """--dataset-url in the group that holds --dataset (one source of data), --dataset-sha256 beside it."""
    sources.add_argument(flags.DATASET_URL, type=https_url, default=None,
                         help=f"an https:// file to download once into <data-dir>/cache/ and train on "
                              f"(needs {flags.DATASET_SHA256})")
    parser.add_argument(flags.DATASET_SHA256, type=sha256_hex, default=None,
                        help=f"the SHA-256 of the {flags.DATASET_URL} file; a mismatch fails the run")
    parser.add_argument(flags.DATASET_MAX_BYTES, type=positive_int, default=Caps.max_bytes, metavar="N",
                        help=f"a larger {flags.DATASET_URL} file fails the run before it fills the volume "
                             f"[{Caps.max_bytes}]")
    parser.add_argument(flags.DATASET_TIMEOUT_SECONDS, type=positive_int, default=Caps.total_seconds, metavar="S",
                        help="the download, every try together, fails the run once it takes longer "
                             f"[{Caps.total_seconds}]")


def positive_int(text: str) -> int:
    """argparse type of the download's caps."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def source_of(url: str | None, sha256: str | None) -> Source | None:
    """The pair of flags as one Source; None when neither is given."""
    if url and not sha256:
        raise UsageError(f"{flags.DATASET_URL} needs {flags.DATASET_SHA256} (64 hex digits: sha256sum FILE)")
    if sha256 and not url:
        raise UsageError(f"{flags.DATASET_SHA256} is for {flags.DATASET_URL}, which is missing")
    return Source(url, sha256) if url and sha256 else None


def mismatch_message(source: Source, got: str) -> str:
    """One line naming both digests and the URL, digests first (a status line keeps the first 160 characters)."""
    return (f"dataset digest mismatch: got sha256 {got}, expected {source.sha256} "
            f"({flags.DATASET_SHA256}) for {source.url}; nothing was cached")


# ---------------------------------------------------------------- pure: who downloads, who waits


class Cached(enum.Enum):
    MISSING = "missing"
    GOOD = "good"  # its digest is the pinned one
    BAD = "bad"  # another digest: truncated or changed on the volume; downloaded again


class Step(enum.Enum):
    USE = "use"
    DOWNLOAD = "download"  # nobody holds the claim and there is no good file: claim it, download
    WAIT = "wait"
    TAKE_OVER = "take over"  # the claim has not changed for Timing.stale_seconds: its holder is gone
    GIVE_UP = "give up"


def next_step(cached: Cached | None, claim_quiet: float | None, waited: float, timing: Timing) -> Step:
    """cached: the file, looked at only when nobody holds the claim (None otherwise); claim_quiet: seconds
    the claim has not changed, by this process's clock (None: no claim); waited: seconds in this wait."""
    if claim_quiet is None:
        return Step.USE if cached is Cached.GOOD else Step.DOWNLOAD
    if claim_quiet >= timing.stale_seconds:
        return Step.TAKE_OVER
    if waited >= timing.wait_limit_seconds:
        return Step.GIVE_UP
    return Step.WAIT


@dataclass
class ClaimWatch:
    """How long a claim has stayed as it is, on this process's monotonic clock: the volume's clock and
    other nodes' clocks may differ from ours, so a claim's mtime is only ever compared with itself."""

    stamp: Stamp | None = None
    since: float = 0.0

    def quiet_seconds(self, stamp: Stamp | None, now: float) -> float | None:
        if stamp != self.stamp:
            self.stamp, self.since = stamp, now
        return None if stamp is None else now - self.since


# ---------------------------------------------------------------- shell: files


@dataclass(frozen=True)
class CacheFiles:
    """The cached file and its hidden neighbours: the claim, and one partial file per downloader."""

    target: Path

    @property
    def claim(self) -> Path:
        return self.target.with_name(f".{self.target.name}.claim")

    def partial(self, token: str) -> Path:
        return self.target.with_name(f".{self.target.name}.partial-{token}")

    def claim_stamp(self) -> Stamp | None:
        try:
            st = os.stat(self.claim)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def claim_holder(self) -> str:
        try:
            return self.claim.read_text().split(maxsplit=1)[1].strip()
        except (OSError, IndexError):
            return "another worker"

    def try_claim(self, token: str) -> bool:
        """Create the claim exclusively (O_EXCL is atomic on local and NFS volumes); False if it exists."""
        try:
            fd = os.open(self.claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(f"{token} {socket.gethostname()} (pid {os.getpid()})\n")
        return True

    def touch_claim(self) -> None:
        # Gone if a waiter thought us dead and took it over: our download still counts.
        with contextlib.suppress(FileNotFoundError):
            os.utime(self.claim)

    def release(self, token: str) -> None:
        """Remove the claim if it is still ours (a waiter may have taken it over and claimed anew)."""
        try:
            if self.claim.read_text().startswith(token):
                self.claim.unlink()
        except FileNotFoundError:
            pass

    def take_over(self, stamp: Stamp) -> None:
        """Remove a dead holder's claim, unless it changed since we judged it (then its holder lives)."""
        if self.claim_stamp() == stamp:
            self.claim.unlink(missing_ok=True)

    def remove_old_partials(self, max_age_seconds: float) -> None:
        """Partial files of holders that died (a live holder writes to its own all the time)."""
        cutoff = time.time() - max_age_seconds
        for path in self.target.parent.glob(f".{self.target.name}.partial-*"):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
            except FileNotFoundError:
                pass


def cached_content(path: Path, sha256: str) -> tuple[Cached, bytes | None]:
    """The file's state, and when it is GOOD the very bytes whose digest matched: what the run loads."""
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        return Cached.MISSING, None
    return (Cached.GOOD, content) if hashlib.sha256(content).hexdigest() == sha256 else (Cached.BAD, None)


# ---------------------------------------------------------------- shell: progress and heartbeat


class _Beat:
    """Called after each chunk: keeps the claim fresh and logs progress now and then."""

    def __init__(self, files: CacheFiles, log: Log, timing: Timing, clock: Callable[[], float]) -> None:
        self.files, self.log, self.timing, self.clock = files, log, timing, clock
        self.touched = self.reported = clock()

    def __call__(self, done: int, total: int | None) -> None:
        now = self.clock()
        if now - self.touched >= self.timing.heartbeat_seconds:
            self.files.touch_claim()
            self.touched = now
        if now - self.reported >= self.timing.progress_seconds:
            self.log(f"dataset download: {progress_text(done, total)}")
            self.reported = now

    def pause(self, seconds: float, sleep: Callable[[float], None]) -> None:
        """Wait between tries, still touching the claim."""
        end = self.clock() + seconds
        while (left := end - self.clock()) > 0:
            sleep(min(left, self.timing.heartbeat_seconds))
            self.files.touch_claim()


# ---------------------------------------------------------------- shell: the protocol


@dataclass
class Fetcher:
    source: Source
    files: CacheFiles
    log: Log
    timing: Timing = Timing()
    caps: Caps = field(default_factory=Caps)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    verified: bytes | None = field(default=None, repr=False)  # the bytes the last look found GOOD

    def content(self) -> bytes:
        """The bytes whose digest matched, from the last look or, once published by any process, read and checked."""
        path = self.obtain()
        if (content := self.verified or cached_content(path, self.source.sha256)[1]) is None:
            raise DataError(f"{path} changed on the volume just after it was checked: it is not {self.source.sha256}")
        return content

    def obtain(self) -> Path:
        """The verified cached file: found, downloaded by this process, or waited for."""
        watch, started, said = ClaimWatch(), self.clock(), set()
        while True:
            stamp = self.files.claim_stamp()
            quiet = watch.quiet_seconds(stamp, self.clock())
            cached = self._look(said) if stamp is None else None
            step = next_step(cached, quiet, self.clock() - started, self.timing)
            if step is Step.USE:
                self.log(f"using the cached {self.files.target} (sha256 verified)")
                return self.files.target
            if step is Step.DOWNLOAD and self._claim_and_download():
                return self.files.target
            self._not_yet(step, stamp, quiet, said)

    def _look(self, said: set) -> Cached:
        cached, self.verified = cached_content(self.files.target, self.source.sha256)
        if cached is Cached.BAD and Cached.BAD not in said:
            said.add(Cached.BAD)
            self.log(f"{self.files.target} does not have sha256 {self.source.sha256} (changed on the volume?): "
                     "downloading it again")
        return cached

    def _not_yet(self, step: Step, stamp: Stamp | None, quiet: float | None, said: set) -> None:
        if step is Step.TAKE_OVER and stamp is not None:
            self.log(f"the download claim {self.files.claim} has not changed for {quiet:.0f} s (its holder is "
                     "gone): taking over")
            self.files.take_over(stamp)
        elif step is Step.GIVE_UP:
            raise DownloadRetryError(
                f"gave up after {self.timing.wait_limit_seconds:.0f} s waiting for {self.files.claim_holder()} "
                f"to download {self.source.url} (claim {self.files.claim}): exiting to be restarted")
        elif step is Step.WAIT:
            if Step.WAIT not in said:
                said.add(Step.WAIT)
                self.log(f"waiting for {self.files.claim_holder()} to download {self.source.url}")
            self.sleep(self.timing.poll_seconds)

    def _claim_and_download(self) -> bool:
        """False when another process claimed first."""
        volume.check_writable([str(self.files.target.parent)])
        token = uuid.uuid4().hex
        if not self.files.try_claim(token):
            return False
        try:
            # Published between our look and our claim: nothing to do.
            if cached_content(self.files.target, self.source.sha256)[0] is not Cached.GOOD:
                self._download_and_publish(token)
        finally:
            self.files.release(token)
        return True

    def _download_and_publish(self, token: str) -> None:
        self.files.remove_old_partials(self.timing.partial_max_age_seconds)
        partial = self.files.partial(token)
        started = self.clock()
        self.log(f"downloading {self.source.url} into {self.files.target}")
        try:
            beat = _Beat(self.files, self.log, self.timing, self.clock)
            got = download(self.source.url, partial, beat, self.timing, self.caps, self.sleep)
            if got != self.source.sha256:
                raise DataError(mismatch_message(self.source, got))
            os.replace(partial, self.files.target)
        finally:
            partial.unlink(missing_ok=True)
        size = self.files.target.stat().st_size
        self.log(f"downloaded {size_text(size)} in {self.clock() - started:.1f} s, sha256 verified")


def dataset_from_args(args: argparse.Namespace, log: Log) -> tuple[str, bytes | None]:
    """main's hook: --dataset as given, or, with --dataset-url, the verified file's path relative to --data-dir
    (downloaded here if the cache does not have it) and its bytes as checked, which the run loads."""
    source = source_of(args.dataset_url, args.dataset_sha256)
    if source is None:
        return args.dataset, None
    caps = Caps(args.dataset_max_bytes, args.dataset_timeout_seconds)
    timing = dataclasses.replace(Timing(), wait_limit_seconds=caps.total_seconds + Timing.stale_seconds)
    fetcher = Fetcher(source, CacheFiles(source.cache_file(args.data_dir)), log, timing, caps)
    return source.relative_path(), fetcher.content()
