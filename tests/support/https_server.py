"""An HTTPS server on 127.0.0.1 for the --dataset-url tests: a self-signed certificate the test makes with
the openssl CLI (nothing is downloaded), files served from memory, every request counted by path.

    /<name>              a file of `files` (404 if none)
    /status/<code>       that HTTP status
    /redirect/<any>?to=<url>   302 to <url>
    /short/<name>        a file of `files` with a Content-Length 100 bytes longer than what is sent
    /claims/<n>/<name>   a file of `files` with a Content-Length of n, whatever its size
    /unsized/<name>      a file of `files` with no Content-Length (the body ends when the connection closes)
    /longer/<name>       a file of `files` with its own Content-Length, then as many bytes again
    /drip/<name>         a file of `files` with no Content-Length, one byte every DRIP_SECONDS
"""

from __future__ import annotations

import collections
import contextlib
import http.server
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OPENSSL = "/usr/bin/openssl"
DRIP_SECONDS = 0.05


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, valid for a day; the certificate is its own CA."""
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    return cert, key


@dataclass
class Server:
    cert: Path
    files: dict[str, bytes] = field(default_factory=dict)
    requests: collections.Counter = field(default_factory=collections.Counter)
    port: int = 0

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}/{path.lstrip('/')}"


# How a route sends a file: (the bytes sent, the Content-Length announced or None, one byte at a time).
_SHAPES = {
    "short": lambda body: (body, len(body) + 100, False),
    "unsized": lambda body: (body, None, False),
    "longer": lambda body: (body * 2, len(body), False),
    "drip": lambda body: (body, None, True),
}


def _send(handler: http.server.BaseHTTPRequestHandler, body: bytes, length: int | None, drip: bool = False) -> None:
    """body with this Content-Length (None: none; the connection's end ends the body), at once or dripped."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/octet-stream")
    if length is not None:
        handler.send_header("Content-Length", str(length))
    handler.end_headers()
    step = 1 if drip else max(len(body), 1)
    try:
        for at in range(0, len(body), step):
            handler.wfile.write(body[at : at + step])
            if drip:
                handler.wfile.flush()
                time.sleep(DRIP_SECONDS)
    except OSError:  # the client hung up (a capped download): nothing more to send
        pass
    if length != len(body):
        handler.close_connection = True


def _handler(server: Server) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # the test's output stays its own
            pass

        def do_GET(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            server.requests[parts.path] += 1
            path = parts.path.lstrip("/")
            head, _, rest = path.partition("/")
            if head == "status":
                self.send_error(int(rest))
            elif head == "redirect":
                self.send_response(302)
                self.send_header("Location", urllib.parse.parse_qs(parts.query)["to"][0])
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif head == "claims" and rest.partition("/")[2] in server.files:
                size, _, name = rest.partition("/")
                _send(self, server.files[name], int(size))
            elif head in _SHAPES and rest in server.files:
                body, length, drip = _SHAPES[head](server.files[rest])
                _send(self, body, length, drip)
            elif path in server.files:
                _send(self, server.files[path], len(server.files[path]))
            else:
                self.send_error(404)

    return Handler


def start(directory: Path) -> tuple[Server, http.server.ThreadingHTTPServer]:
    """A running server (stop it with .shutdown() and .server_close())."""
    cert, key = self_signed_cert(directory)
    served = Server(cert)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    httpd.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    served.port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return served, httpd


@contextlib.contextmanager
def serving(directory: Path, files: Mapping[str, bytes]) -> Iterator[Server]:
    """A server of these files for the length of the block."""
    served, httpd = start(directory)
    served.files.update(files)
    try:
        yield served
    finally:
        httpd.shutdown()
        httpd.server_close()


def trusted_by_this_process(server: Server, monkeypatch: Any) -> Server:
    """This process trusts the test's certificate, as a cluster admin's SSL_CERT_FILE makes a worker do; requests
    to it bypass any proxy; what it saw so far is forgotten. A `trusted` fixture's body."""
    monkeypatch.setenv("SSL_CERT_FILE", str(server.cert))
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    server.requests.clear()
    return server
