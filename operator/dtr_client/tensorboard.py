"""TensorBoard for a run: TrainingClient.tensorboard(name) -> TensorBoardHandle, and `dtr tensorboard RUN`.

The chief writes TensorBoard's event files to the run's log dir (contract layout.logs_dir). Locally, TensorBoard
runs from the trainer's Python (the one `dtr run` uses) on that directory under the local backend's volumes.
On a cluster, a short-lived pod of the run's image serves its claim read-only (transfer.
tensorboard_pod), and a local port is forwarded to it, each connection over its own port-forward WebSocket
(kube.portforward_stream): through the API server and the kubelet, so the run's NetworkPolicy stays as it is.
Either way the handle is returned once TensorBoard answers HTTP, and stop() ends it (the pod is deleted).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import secrets
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from dtr_contract import layout

from dtr_operator.api import KIND
from dtr_operator.spec import SpecError, parse_run

from . import transfer as tr
from .results import RunNotFound

READY_PATH = "data/runs"  # TensorBoard's list of runs: it answers once the server is up
START_TIMEOUT = 180.0  # seconds for TensorBoard (and on a cluster its pod) to answer
POLL_SECONDS = 0.5
OUTPUT_LINES = 15  # of TensorBoard's output, in the error when it ends before answering
STOP_SECONDS = 10.0
CHUNK = 64 * 1024


class TensorBoardError(Exception):
    """TensorBoard could not be started for the run, or ended: one line (and its last output) saying why."""


# ---- pure -----------------------------------------------------------------------------------------


def url(port: int) -> str:
    return f"http://127.0.0.1:{port}/"


def last_lines(text: str, count: int = OUTPUT_LINES) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-count:])


def local_log_dirs(volumes: Path, name: str, claims: Iterable[str]) -> list[Path]:
    """The run's log dir on each of these claims' local volumes that has one."""
    return [d for claim in claims if (d := volumes / claim / (layout.in_volume(layout.logs_dir(name)) or "")).is_dir()]


# ---- the handle -----------------------------------------------------------------------------------


class TensorBoardHandle:
    """A TensorBoard serving a run at .url (on 127.0.0.1) until stop(); also a context manager."""

    def __init__(self, run: str, url: str, stop: Callable[[], None], ended: Callable[[], str | None]):
        self.run, self.url = run, url
        self._stop, self._ended, self._stopped = stop, ended, False

    def ended(self) -> str | None:
        """Why TensorBoard is no longer serving (its process or pod has ended), or None while it serves."""
        return None if self._stopped else self._ended()

    def stop(self) -> None:
        """End TensorBoard (on a cluster: close the port-forward and delete the pod); again is harmless."""
        if not self._stopped:
            self._stopped = True
            self._stop()

    def __enter__(self) -> TensorBoardHandle:
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"TensorBoardHandle({self.run!r}, url={self.url!r}{', stopped' if self._stopped else ''})"

    def _repr_html_(self) -> str:  # a link in a notebook
        return f'<a href="{self.url}" target="_blank">TensorBoard for {self.run}: {self.url}</a>'


def wait_answering(address: str, ended: Callable[[], str | None], timeout: float) -> None:
    """Until TensorBoard at address answers READY_PATH; TensorBoardError when it ends first (ended() says how)
    or after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        why = ended()
        if why is not None:
            raise TensorBoardError(why)
        with contextlib.suppress(OSError, http.client.HTTPException), \
                urllib.request.urlopen(address + READY_PATH, timeout=5) as answer:
            if answer.status == 200:
                return
        if time.monotonic() >= deadline:
            raise TensorBoardError(f"TensorBoard did not answer at {address} within {timeout:g} s")
        time.sleep(POLL_SECONDS)


def free_port() -> int:
    from .local import ports  # dtr run's way (below the ephemeral range); not loaded by `dtr operator`

    found: dict[str, int] = {}
    ports.allocate(["tensorboard"], found)
    return found["tensorboard"]


# ---- local: a process of the trainer's Python -------------------------------------------------------


def _output(file: IO[bytes]) -> str:
    file.seek(0)
    return last_lines(file.read().decode("utf-8", "replace"))


def start_local(run: str, python: str, log_dir: Path, port: int | None, timeout: float,
                wait: bool = True) -> TensorBoardHandle:  # fmt: skip
    """TensorBoard from the trainer's Python on log_dir, on 127.0.0.1:port (a free one by default)."""
    port = port or free_port()
    output = tempfile.TemporaryFile()  # noqa: SIM115 -- TensorBoard's output, as long as it runs: stop() closes it
    argv = [python, *tr.tensorboard_command(str(log_dir), "127.0.0.1", port)[1:]]
    try:
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
    except OSError as err:
        output.close()
        raise TensorBoardError(f"cannot start TensorBoard with {python}: {err.strerror}") from None

    def ended() -> str | None:
        code = proc.poll()
        return None if code is None else f"TensorBoard exited with code {code}:\n{_output(output)}"

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        output.close()

    handle = TensorBoardHandle(run, url(port), stop, ended)
    if wait:
        _answering_or_stop(handle, ended, timeout)
    return handle


def _answering_or_stop(handle: TensorBoardHandle, ended: Callable[[], str | None], timeout: float) -> None:
    try:
        wait_answering(handle.url, ended, timeout)
    except BaseException:
        handle.stop()
        raise


# ---- a cluster: the TensorBoard pod and a port-forward ----------------------------------------------


class Forwarder:
    """A local port on 127.0.0.1 whose every connection is forwarded to the pod's port, from a thread."""

    def __init__(self, kube: Any, namespace: str, pod: str, port: int):
        self.kube, self.namespace, self.pod, self.port = kube, namespace, pod, port
        self.loop = asyncio.new_event_loop()
        self.last_error = ""  # the kubelet's or the API server's words about the last connection that failed
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Listen (OSError when the port is taken), then serve from a daemon thread."""
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._thread = threading.Thread(target=self._run, args=(server,), daemon=True)
        self._thread.start()

    def _run(self, server: asyncio.Server) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            server.close()
            self.loop.run_until_complete(server.wait_closed())
            tasks = asyncio.all_tasks(self.loop)  # the connections still open: each closes its WebSocket
            for task in tasks:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self.loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from dtr_operator.kube import ApiError
        from dtr_operator.kube_streams import PortForwardError

        try:
            async with self.kube.portforward_stream(self.namespace, self.pod, tr.TENSORBOARD_PORT) as stream:
                await _pump(reader, writer, stream)
        except (ApiError, PortForwardError, OSError) as err:
            self.last_error = str(err)
        finally:
            writer.close()

    def close(self) -> None:
        if self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(STOP_SECONDS)
        else:
            self.loop.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stream: Any) -> None:
    """Bytes both ways until either side ends (a port-forward cannot half-close a connection)."""

    async def up() -> None:
        while data := await reader.read(CHUNK):
            await stream.write(data)

    async def down() -> None:
        while (data := await stream.read()) is not None:
            writer.write(data)
            await writer.drain()

    tasks = {asyncio.ensure_future(up()), asyncio.ensure_future(down())}
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # the error of the side that failed, if any
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _run_spec(kube: Any, namespace: str, name: str) -> Any:
    """The run, its image the one its workers were given (its TFJob's, when we may read it), else its spec.image,
    else the cluster's default (dtr_client.images: never this machine's)."""
    from . import images

    run = kube.get_run(namespace, name)
    if run is None:
        raise RunNotFound(f"no {KIND} {name} in namespace {namespace}")
    try:
        tfjob = images.read_tfjob(kube, namespace, parse_run(run).tfjob_name)
        image = (images.tfjob_image(tfjob) or (run.get("spec") or {}).get("image")
                 or images.cluster_image(kube, namespace).image)  # fmt: skip
        return parse_run(run, default_image=str(image))
    except SpecError as err:
        raise TensorBoardError(f"{KIND} {name} is not valid: {err}") from None
    except images.NoImage as err:
        raise TensorBoardError(str(err)) from None


def _placed(kube: Any, namespace: str, name: str, claim: str) -> str | None:
    """The node the pod must join (a ReadWriteOnce claim in use there); TensorBoardError: no claim to read."""
    from .volume import claim_node

    pvc = kube.get_pvc(namespace, claim)
    if pvc is None:
        raise TensorBoardError(f"{KIND} {name}'s claim {claim} does not exist (the run has not started, or its "
                               "volume was deleted): there are no TensorBoard logs to read")  # fmt: skip
    try:
        return claim_node(kube, namespace, pvc)
    except tr.TransferError as err:
        raise TensorBoardError(str(err)) from None


def _pod_ended(kube: Any, namespace: str, pod: str) -> str | None:
    found = kube.get_pod(namespace, pod)
    if found is None:
        return f"the TensorBoard pod {pod} was deleted"
    state, doing = tr.pod_start(found, tr.TENSORBOARD)
    if state != tr.FAILED:
        return None
    phase = (found.get("status") or {}).get("phase")
    if phase not in ("Succeeded", "Failed"):
        return f"the TensorBoard pod {pod}: {doing}"  # it cannot start (ErrImagePull and the like): no log yet
    log = kube.pod_log(namespace, pod, tr.TENSORBOARD, tail_lines=OUTPUT_LINES) or ""
    return f"the TensorBoard pod {pod}: it ended ({phase})" + (f":\n{last_lines(log)}" if log.strip() else "")


def _wait_running(kube: Any, namespace: str, pod: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        found = kube.get_pod(namespace, pod)
        state, doing = tr.pod_start(found or {}, tr.TENSORBOARD)
        if state == tr.READY:
            return
        if found is None or state == tr.FAILED or time.monotonic() >= deadline:
            events = tr.events_summary(kube.pod_events(namespace, pod), besides=doing)
            why = _pod_ended(kube, namespace, pod) or f"it did not start in {timeout:g} s: {doing}"
            raise TensorBoardError(f"{why}" + (f"; events: {events}" if events else ""))
        time.sleep(POLL_SECONDS)


def _create(kube: Any, manifest: dict[str, Any]) -> None:
    from dtr_operator.kube import ApiError

    try:
        kube.create(manifest)
    except ApiError as err:
        raise TensorBoardError(f"cannot create the TensorBoard pod: {err.message}") from None


def start_in_cluster(kube: Any, namespace: str, name: str, port: int | None, timeout: float,
                     wait: bool = True) -> TensorBoardHandle:  # fmt: skip
    """The TensorBoard pod for the run, and a local port forwarded to it; deleted again if it does not serve."""
    from dtr_operator.kube import ApiError

    run = _run_spec(kube, namespace, name)
    if not run.has_volume:
        raise TensorBoardError(f"{name} has no volume (spec.storage.volume false): its TensorBoard logs are not kept "
                               "(docs/object-storage.md#a-run-with-no-volume)")  # fmt: skip
    node = _placed(kube, namespace, name, run.pvc_name)
    pod = tr.pod_name(tr.TENSORBOARD, name, secrets.token_hex(3))
    forwarder = Forwarder(kube, namespace, pod, port or free_port())

    def stop() -> None:
        forwarder.close()
        with contextlib.suppress(ApiError):
            kube.delete_pod(namespace, pod)

    handle = TensorBoardHandle(name, url(forwarder.port), stop, lambda: _pod_ended(kube, namespace, pod))
    try:  # also on Ctrl-C, which may land while the API server creates the pod: stop() deletes it
        _create(kube, tr.tensorboard_pod(run, pod, node))
        _wait_running(kube, namespace, pod, timeout)
        forwarder.start()
    except BaseException:
        handle.stop()
        raise
    if wait:
        _answering_or_stop(handle, lambda: _pod_ended(kube, namespace, pod), timeout)
    return handle
