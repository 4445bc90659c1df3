"""kube.Kube.exec_stream against a WebSocket server that speaks the API server's exec protocol: the request
(path, container, the command's arguments, the bearer token, the channel subprotocols), stdin out on channel
0, stdout/stderr/status in by channel, and a refused exec as an ApiError."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiohttp import web
from dtr_operator import kube_streams
from dtr_operator.kube import ApiError, Kube
from kubernetes import client

from support.route_server import serve_route

SEEN: list[dict] = []


async def exec_handler(request: web.Request) -> web.StreamResponse:
    if request.headers.get("authorization") != "Bearer sesame":
        return web.json_response({"kind": "Status", "reason": "Forbidden"}, status=403)
    ws = web.WebSocketResponse(protocols=kube_streams.EXEC_PROTOCOLS)
    await ws.prepare(request)
    SEEN.append({"path": request.path, "container": request.query.get("container"),
                 "command": request.query.getall("command"), "protocol": ws.ws_protocol})  # fmt: skip
    received = b""
    while len(received) < 200_000:  # the test sends this much, in several messages
        message = await ws.receive()
        assert message.data[0] == kube_streams.STDIN
        received += message.data[1:]
    await ws.send_bytes(bytes([kube_streams.STDOUT]) + received[:10])
    await ws.send_bytes(bytes([kube_streams.STDERR]) + b"warning: x\n")
    await ws.send_bytes(bytes([kube_streams.EXEC_STATUS]) + b'{"status":"Success"}')
    await ws.close()
    return ws


@pytest.fixture
def server() -> Iterator[str]:
    with serve_route("/api/v1/namespaces/{ns}/pods/{pod}/exec", exec_handler) as url:
        yield url


def kube_at(host: str, token: str) -> Kube:
    conf = client.Configuration()
    conf.host = host
    conf.api_key = {"authorization": f"Bearer {token}"}
    return Kube(client.ApiClient(conf))


async def session(k: Kube, data: bytes) -> list[tuple[int, bytes]]:
    got = []
    async with k.exec_stream("ml", "dtr-put-c-1", "copy", ["python", "-c", "print('a b&c=d')", "x y"]) as stream:
        await stream.write(data)
        while (item := await stream.read()) is not None:
            got.append(item)
    return got


def test_an_exec_session_sends_stdin_and_reads_every_channel(server):
    SEEN.clear()
    data = bytes(range(256)) * 800
    got = asyncio.run(session(kube_at(server, "sesame"), data))
    assert got == [(kube_streams.STDOUT, data[:10]), (kube_streams.STDERR, b"warning: x\n"),
                   (kube_streams.EXEC_STATUS, b'{"status":"Success"}')]
    seen = SEEN
    assert seen == [{"path": "/api/v1/namespaces/ml/pods/dtr-put-c-1/exec", "container": "copy",
                     "command": ["python", "-c", "print('a b&c=d')", "x y"],
                     "protocol": kube_streams.EXEC_PROTOCOLS[0]}]


def test_a_refused_exec_is_an_api_error_and_no_server_is_status_0(server):
    with pytest.raises(ApiError) as refused:
        asyncio.run(session(kube_at(server, "wrong"), b""))
    assert refused.value.status == 403 and "exec in pod dtr-put-c-1" in refused.value.message
    with pytest.raises(ApiError) as nobody:
        asyncio.run(session(kube_at("http://127.0.0.1:9", "sesame"), b""))
    assert nobody.value.status == 0
