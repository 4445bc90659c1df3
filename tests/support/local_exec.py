"""The transfer pod's exec sessions as local processes, for the unit tests of dtr data put, dtr model get and the
client's history(): the far end of the fake API's exec (FakeKube.exec) runs the command the pod would run, with
this Python, on a local directory standing in for the volume. Also the trees those tests copy."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from dtr_client import copier, transfer
from dtr_contract import layout
from dtr_operator import kube_streams

from support.fake_kube import ExecBehaviour, FakeKube


class ProcessStream:
    """An exec session backed by a local process: stdin, then stdout/stderr by channel, then its status."""

    def __init__(self, proc: asyncio.subprocess.Process, tamper: Callable[[bytes], bytes] | None):
        self.proc, self.tamper = proc, tamper
        self.queue: asyncio.Queue[tuple[int, bytes | None]] = asyncio.Queue()
        self.open = 2
        self.ended = False
        self.tasks = [asyncio.ensure_future(self._pump(proc.stdout, kube_streams.STDOUT)),
                      asyncio.ensure_future(self._pump(proc.stderr, kube_streams.STDERR))]  # fmt: skip

    async def _pump(self, pipe: Any, channel: int) -> None:
        while data := await pipe.read(65536):
            await self.queue.put((channel, data))
        await self.queue.put((channel, None))

    async def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(self.tamper(data) if self.tamper else data)
        await self.proc.stdin.drain()

    async def close_stdin(self) -> bool:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return True

    async def read(self) -> tuple[int, bytes] | None:
        while self.open:
            channel, data = await self.queue.get()
            if data is not None:
                return channel, data
            self.open -= 1
        if self.ended:
            return None
        self.ended = True
        code = await self.proc.wait()
        if code == 0:
            return kube_streams.EXEC_STATUS, b'{"status":"Success"}'
        causes = [{"reason": "ExitCode", "message": str(code)}]
        return kube_streams.EXEC_STATUS, json.dumps({"status": "Failure", "details": {"causes": causes}}).encode()


def on_volume(volume: Path, execs: list[list[str]], tamper: Callable[[bytes], bytes] | None = None) -> ExecBehaviour:
    """FakeKube.exec for a transfer pod whose volume is the local directory `volume`: `python -c PROGRAM ARGS` run
    here, the mount path and the heartbeat file moved next to it; each argv kept in `execs`. `tamper` changes what
    the program reads on stdin (a damaged copy)."""

    @contextlib.asynccontextmanager
    async def session(pod: str, container: str, argv: Sequence[str]) -> AsyncIterator[ProcessStream]:
        assert container == transfer.CONTAINER and list(argv[:2]) == ["python", "-c"]
        execs.append(list(argv))
        here = [str(volume.parent / "heartbeat") if a == transfer.HEARTBEAT else
                a.replace(layout.MOUNT_PATH, str(volume)) for a in argv[3:]]  # fmt: skip
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", argv[2], *here, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            yield ProcessStream(proc, tamper)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    return session


def make_tree(root: Path) -> dict[str, bytes]:
    """A directory with a multi-chunk file, an empty file and nested directories; name -> content."""
    files = {
        "big.bin": os.urandom(3 * copier.CHUNK + 17),
        "empty.txt": b"",
        "a/b/c.csv": b"x,y\n1,2\n",
        "a/d.txt": "naïve\n".encode(),
    }
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    (root / "a" / "empty-dir").mkdir()
    return files


def written(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


class VolumeKube(FakeKube):
    """The fake API, configured for the transfer pods: claim `c`, each pod created running (its container started),
    and its exec sessions run on `volume` (on_volume). Only what the tests read back is added: the argv of each
    exec, the pods created and deleted, the pods left."""

    RUNNING: ClassVar[dict[str, Any]] = {"phase": "Running", "containerStatuses": [
        {"name": transfer.CONTAINER, "state": {"running": {}}}]}  # fmt: skip

    def __init__(self, volume: Path, namespace: str) -> None:
        super().__init__(namespace)
        self.volume = volume
        self.execs: list[list[str]] = []
        self.exec = on_volume(volume, self.execs)
        self.pod_statuses = [self.RUNNING]
        self.put({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"]}}, "PersistentVolumeClaim")

    @property
    def created(self) -> list[dict[str, Any]]:
        return [args["manifest"] for args in self.succeeded("create")]

    @property
    def deleted(self) -> list[str]:
        return [args["name"] for args in self.succeeded("delete_pod")]

    @property
    def pods(self) -> list[str]:
        """The pods the store has now."""
        return [name for (_, kind, _, name) in self.objects if kind == "Pod"]
