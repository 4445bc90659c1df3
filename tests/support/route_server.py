"""One aiohttp route served on 127.0.0.1 from a thread of its own: a stand-in for an API server endpoint (pods/exec,
pods/portforward) that the code under test reaches over a real WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator

from aiohttp import web


@contextlib.contextmanager
def serve_route(path: str, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Iterator[str]:
    """The server's base URL (http://127.0.0.1:PORT) while in the block; GET `path` goes to `handler`."""
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        with contextlib.suppress(RuntimeError):
            loop.run_until_complete(runner.cleanup())
