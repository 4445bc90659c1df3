"""The framing of the API server's WebSocket streams that kube.py opens: an exec session's channels and a
port-forward's (the kubelet's v4 protocol). No API call here: kube.py connects, these read and write frames."""

from __future__ import annotations

import aiohttp

# The exec WebSocket's subprotocols (v5, Kubernetes 1.29+, adds closing a stream) and channels.
EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, EXEC_STATUS, CLOSE_STREAM = 0, 1, 2, 3, 255
EXEC_CHUNK = 64 * 1024  # bytes of stdin per WebSocket message
EXEC_CLOSE_TIMEOUT = 2.0  # seconds to wait for the server's answer to our close


class ExecStream:
    """One exec session in a container: write to the process's stdin, read what it says by channel."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self._ws = ws

    async def write(self, data: bytes) -> None:
        for start in range(0, len(data), EXEC_CHUNK):
            await self._ws.send_bytes(bytes([STDIN]) + data[start : start + EXEC_CHUNK])

    async def close_stdin(self) -> bool:
        """End the process's stdin (it reads EOF), if the server speaks v5; False if it cannot."""
        if self._ws.protocol != EXEC_PROTOCOLS[0]:
            return False
        await self._ws.send_bytes(bytes([CLOSE_STREAM, STDIN]))
        return True

    async def read(self) -> tuple[int, bytes] | None:
        """(channel, bytes): STDOUT, STDERR, or EXEC_STATUS (the process's end, a metav1.Status); None once
        the session has closed."""
        while True:
            message = await self._ws.receive()
            if message.type == aiohttp.WSMsgType.BINARY and message.data:
                return message.data[0], message.data[1:]
            if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED,
                                aiohttp.WSMsgType.ERROR):  # fmt: skip
                return None


# The port-forward WebSocket (the kubelet's v4 protocol): channel 0 carries the connection's bytes, channel 1
# the kubelet's error text; the first message on each starts with the port, 2 bytes little-endian.
PORTFORWARD_PROTOCOLS = ("v4.channel.k8s.io",)
PORTFORWARD_DATA, PORTFORWARD_ERROR = 0, 1


class PortForwardError(Exception):
    """The kubelet could not connect to the pod's port, or broke the connection: its words."""


class PortForwardStream:
    """One forwarded TCP connection: write what the local side sends, read what the pod's port answers."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self._ws = ws
        self._prefixed: set[int] = set()  # channels whose port prefix has been read

    async def write(self, data: bytes) -> None:
        for start in range(0, len(data), EXEC_CHUNK):
            await self._ws.send_bytes(bytes([PORTFORWARD_DATA]) + data[start : start + EXEC_CHUNK])

    async def read(self) -> bytes | None:
        """The next bytes from the pod's port; None once the connection has closed; PortForwardError with what
        the kubelet said when it could not connect or lost the connection."""
        while True:
            message = await self._ws.receive()
            if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED,
                                aiohttp.WSMsgType.ERROR):  # fmt: skip
                return None
            if message.type != aiohttp.WSMsgType.BINARY or not message.data:
                continue
            channel, data = message.data[0], message.data[1:]
            if channel not in self._prefixed:
                self._prefixed.add(channel)
                data = data[2:]
            if channel == PORTFORWARD_ERROR and data:
                raise PortForwardError(data.decode("utf-8", "replace"))
            if channel == PORTFORWARD_DATA and data:
                return data
