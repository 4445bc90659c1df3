"""kube.py's transport: an API server that does not answer is an ApiError, never a raw urllib3 error."""

import socket

import pytest
from dtr_operator.kube import ApiError, Kube
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
