"""One --dataset-url download over HTTPS into a partial file, tried again while the failure is transient, and capped.

The caps (dtr_contract.disk; the run's spec.training.datasetSource.maxSize and timeoutSeconds, passed as
--dataset-max-bytes and --dataset-timeout-seconds) hold whatever the server does: a Content-Length above
max_bytes is refused before the partial file is opened; a body without one that grows past max_bytes is stopped
at the read that would cross it (the caller removes the partial file); and all tries together, the pauses between
them included, end by the deadline: checked after every read, and no read waits longer than what is left (nor
than Timing.read_timeout_seconds). Both are permanent (DownloadError, exit 5): the same server sends the same
file, and the digest pins it, so a retry could only fail again after as long.

fetch.py holds the protocol around it (the claim, waiting, publishing); this module knows only one URL and one file.
Stdlib only: no TensorFlow op runs here.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from dtr_contract import disk, flags

from dtr_trainer import volume
from dtr_trainer.errors import DownloadError, DownloadRetryError, VolumeError

if TYPE_CHECKING:  # fetch imports this module: only the type checker reads these two
    from dtr_trainer.fetch import Timing, _Beat

NET_CHUNK = 1 << 16  # at most this per socket read: the claim's heartbeat and progress run between reads
X509_V_ERR_HOSTNAME_MISMATCH = 62  # OpenSSL's verify code: the certificate is for another host name
TRANSIENT_HTTP = frozenset({408, 425, 429})  # and every 5xx but 501 (not implemented: it stays so)
CA_HINT = (
    "if the server's certificate comes from a CA of your own, a cluster admin mounts a CA bundle into the "
    "workers and sets SSL_CERT_FILE to it (docs/trainer.md#data-from-a-url)"
)
MAX_SIZE_FIELD = "spec.training.datasetSource.maxSize"
TIMEOUT_FIELD = "spec.training.datasetSource.timeoutSeconds"
_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


@dataclass(frozen=True)
class Caps:
    """What one download may take: bytes, and seconds for all its tries (the flags; dtr_contract.disk's defaults)."""

    max_bytes: int = disk.DATASET_MAX_BYTES
    total_seconds: float = disk.DATASET_TIMEOUT_SECONDS


# ---------------------------------------------------------------- pure: words


def is_transient_status(code: int) -> bool:
    """HTTP statuses a later try may not see: timeouts, rate limits, server errors."""
    return code in TRANSIENT_HTTP or (500 <= code <= 599 and code != 501)


def certificate_message(url: str, code: int, text: str) -> str:
    """The server's certificate was refused: what OpenSSL said, and, unless only the name was wrong, the CA hint."""
    hint = "" if code == X509_V_ERR_HOSTNAME_MISMATCH else f"; {CA_HINT}"
    return f"cannot download {url}: its TLS certificate was refused ({text.rstrip('.')}){hint}"


def size_text(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def progress_text(done: int, total: int | None) -> str:
    if total:
        return f"{size_text(done)} of {size_text(total)} ({100 * done // total}%)"
    return size_text(done)


def cap_text(n: int) -> str:
    """A byte count as a quantity reads it: 1 GiB, 1.5 GiB, 100 KiB, 999 bytes."""
    return next((f"{n / size:.4g} {unit}" for unit, size in _UNITS if n >= size), f"{n} bytes")


def too_large_message(url: str, cap: int, advertised: int | None) -> str:
    """The download is larger than the cap: advertised (its Content-Length), or found while reading (None)."""
    if advertised is not None:
        what = (
            f"is {cap_text(advertised)} (its Content-Length), more than the run's cap of {cap_text(cap)}; "
            "nothing was written"
        )
    else:
        what = f"sent more than the run's cap of {cap_text(cap)}; the partial file was removed"
    return (
        f"dataset too large: {url} {what}. If the file is meant to be this large, raise {MAX_SIZE_FIELD} "
        f"({flags.DATASET_MAX_BYTES})"
    )


def too_slow_message(url: str, seconds: float) -> str:
    return (
        f"dataset download too slow: {url} did not arrive within the run's limit of {seconds:g} s (every try "
        f"together); the partial file was removed. Raise {TIMEOUT_FIELD} ({flags.DATASET_TIMEOUT_SECONDS}), or "
        "serve the file from somewhere faster"
    )


# ---------------------------------------------------------------- shell: HTTPS


class Transient(Exception):
    """A failure a later try may not see (network, timeout, 5xx): retried, then EXIT_DOWNLOAD_RETRY."""


class _HttpsOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects (object stores and release pages use them) but never to anything but https."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # urllib's signature
        if urllib.parse.urlsplit(newurl).scheme.lower() != "https":
            fp.close()
            raise DownloadError(
                f"cannot download {req.full_url}: it redirects to {newurl}, and only https:// is followed"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def opener() -> urllib.request.OpenerDirector:
    """The system's CAs, or the bundle SSL_CERT_FILE names (OpenSSL reads it here); proxies from the env."""
    context = ssl.create_default_context()
    return urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _HttpsOnlyRedirects())


def _open(url: str, timeout: float):  # an http.client.HTTPResponse
    try:
        return opener().open(url, timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        if is_transient_status(exc.code):
            raise Transient(f"HTTP {exc.code} {exc.reason}") from None
        raise DownloadError(f"cannot download {url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ssl.SSLCertVerificationError):
            raise DownloadError(certificate_message(url, exc.reason.verify_code, exc.reason.verify_message)) from None
        raise Transient(str(exc.reason)) from None
    except (OSError, http.client.HTTPException) as exc:
        raise Transient(f"{type(exc).__name__}: {exc}") from None


def _read(response) -> bytes:
    try:
        return response.read1(NET_CHUNK)  # what one read brings, not a full chunk: never blocks past a read
    except (OSError, http.client.HTTPException) as exc:
        raise Transient(f"{type(exc).__name__}: {exc}") from None


def content_length(headers) -> int | None:  # an http.client.HTTPMessage
    value = headers.get("Content-Length")
    return int(value) if value and value.isdigit() else None


def _write(out, chunk: bytes, url: str) -> None:
    try:
        out.write(chunk)
    except OSError as exc:
        if volume.is_full(exc):
            raise VolumeError(volume.full_message(f"downloading {url}")) from None
        raise


@dataclass(frozen=True)
class _Try:
    """One try's bounds: the cap, the deadline on the beat's clock, and the longest a read may wait."""

    url: str
    caps: Caps
    deadline: float
    read_timeout: float

    def left(self, clock: Callable[[], float]) -> float:
        """Seconds left before the deadline; DownloadError once there are none."""
        left = self.deadline - clock()
        if left <= 0:
            raise DownloadError(too_slow_message(self.url, self.caps.total_seconds))
        return left


def _copy(response, out, beat: _Beat, bounds: _Try, total: int | None) -> str:
    """The body into out, bounded by the cap and the deadline; its SHA-256."""
    digest, done = hashlib.sha256(), 0
    while chunk := _read(response):
        if done + len(chunk) > bounds.caps.max_bytes:
            raise DownloadError(too_large_message(bounds.url, bounds.caps.max_bytes, None))
        _write(out, chunk, bounds.url)
        digest.update(chunk)
        done += len(chunk)
        beat(done, total)
        bounds.left(beat.clock)
    out.flush()
    os.fsync(out.fileno())
    if total is not None and done != total:
        raise Transient(f"the connection closed after {done} of {total} bytes")
    return digest.hexdigest()


def download_once(partial: Path, beat: _Beat, bounds: _Try) -> str:
    """bounds.url into partial; its SHA-256. Transient for what a later try may fix (a short body included)."""
    with _open(bounds.url, min(bounds.read_timeout, bounds.left(beat.clock))) as response:
        total = content_length(response.headers)
        if total is not None and total > bounds.caps.max_bytes:  # refused before the file is opened
            raise DownloadError(too_large_message(bounds.url, bounds.caps.max_bytes, total))
        with open(partial, "wb") as out:
            return _copy(response, out, beat, bounds, total)


def download(url: str, partial: Path, beat: _Beat, timing: Timing, caps: Caps, sleep: Callable[[float], None]) -> str:
    """download_once, tried Timing.attempts times while the failure is transient, all by caps.total_seconds."""
    bounds = _Try(url, caps, beat.clock() + caps.total_seconds, timing.read_timeout_seconds)
    for attempt in range(1, timing.attempts):
        try:
            return download_once(partial, beat, bounds)
        except Transient as exc:
            delay = timing.backoff_seconds * attempt
            if bounds.left(beat.clock) <= delay:
                raise DownloadError(too_slow_message(url, caps.total_seconds)) from None
            beat.log(f"dataset download failed ({exc}); try {attempt + 1} of {timing.attempts} in {delay:g} s")
            beat.pause(delay, sleep)
    try:
        return download_once(partial, beat, bounds)
    except Transient as exc:
        failure = exc
    bounds.left(beat.clock)  # a last try that failed past the deadline: too slow, not retryable
    raise DownloadRetryError(f"cannot download {url} now ({failure}; {timing.attempts} tries): exiting to be restarted")
