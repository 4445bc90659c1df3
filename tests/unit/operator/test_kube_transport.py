"""kube.py's transport: an API server that does not answer is an ApiError, never a raw urllib3 error."""

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from dtr_operator.kube import AlreadyExists, ApiError, Kube
from kubernetes import client


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_api_error_zero():
    conf = client.Configuration()
    conf.host = f"https://127.0.0.1:{closed_port()}"
    conf.verify_ssl = False
    conf.retries = 0
    kube = Kube(client.ApiClient(conf))
    with pytest.raises(ApiError) as err:
        kube.request("GET", "/api")
    assert err.value.status == 0
    assert err.value.reason == "Unreachable"
    assert err.value.retryable


class Answers(BaseHTTPRequestHandler):
    """Answers each path with a fixed (status, body) of ANSWERS and remembers the request line."""

    def answer(self) -> None:
        self.server.seen.append(self.path)  # type: ignore[attr-defined]
        status, body = ANSWERS[self.path.split("?")[0]]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = answer

    def log_message(self, *args) -> None:
        pass


ANSWERS = {
    "/empty": (200, b""),
    "/text": (200, b"plain words"),
    "/proxy": (502, b"<html>Bad gateway</html>"),
    "/exists": (409, json.dumps({"reason": "AlreadyExists", "message": "it is there"}).encode()),
}


@pytest.fixture
def answering() -> Iterator[tuple[Kube, list[str]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    server.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    conf = client.Configuration()
    conf.host = f"http://127.0.0.1:{server.server_port}"
    try:
        yield Kube(client.ApiClient(conf)), server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()


def test_answers_that_are_not_json_become_a_message_and_errors_keep_their_status(answering):
    kube, seen = answering
    assert kube.request("GET", "/empty") == {}
    assert kube.request("GET", "/text") == {"message": "plain words"}
    with pytest.raises(ApiError) as err:
        kube.request("GET", "/proxy")
    assert (err.value.status, err.value.reason, err.value.message) == (502, "502", "<html>Bad gateway</html>")
    with pytest.raises(AlreadyExists):
        kube.request("POST", "/exists", body={})
    assert seen[-1] == "/exists?fieldManager=dtr-operator"
