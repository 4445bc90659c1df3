"""Files into a run's volume and an exported model out of it, through a transfer pod: what `dtr data put` and
`dtr model get` do, and the client's fetch_model() and history() on a cluster.

The shell: the API calls (kube.py) and the copy, in order; what they decide is in transfer.py, the copy
program both ends run in copier.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from dtr_operator.api import KIND
from dtr_operator.spec import SpecError, parse_run

from . import bucket, copier
from . import transfer as tr

PROGRAM = Path(copier.__file__).read_bytes()
DELETE_WAIT = 30.0  # seconds to wait for the pod to be gone (its volume released) before saying so
WIND_DOWN = 2.0  # seconds for the program to end once its input has ended early
Image = str | Callable[[], str]  # a transfer pod's image, or what chooses it when the pod is made
OnFrame = Callable[[bytes, bytes], None]


# ---- progress on stderr -------------------------------------------------------------------------------


class Reporter:
    """Progress lines on stderr: one line redrawn on a terminal, a line every few seconds otherwise."""

    def __init__(self, label: str, quiet: bool, out: TextIO = sys.stderr):
        self.out, self.quiet, self.tty = out, quiet, out.isatty()
        self.progress = tr.Progress(label, every=0.5 if self.tty else 5.0)

    def total(self, n: int) -> None:
        self.progress.total = n

    def __call__(self, n: int) -> None:
        line = self.progress.add(n, time.monotonic())
        if line and not self.quiet:
            self.out.write(f"\r{line}\033[K" if self.tty else f"{line}\n")
            self.out.flush()

    def finish(self) -> None:
        if self.progress.showed and not self.quiet:
            line = self.progress.line(self.progress.last or time.monotonic())  # the rate of the copy itself
            self.out.write(f"\r{line}\033[K\n" if self.tty else f"{line}\n")


# ---- the copy over exec ----------------------------------------------------------------------------


async def _send(stream: Any, frames: Iterable[bytes]) -> None:
    """The program's text, then the frames; a local read error is a CopyError, a connection error as is."""
    await stream.write(PROGRAM)
    iterator = iter(frames)
    while True:
        try:
            data = next(iterator, None)
        except OSError as err:
            raise copier.CopyError(f"cannot read {err.filename}: {err.strerror}") from None
        if data is None:
            return
        await stream.write(data)


async def _read(stream: Any, on_frame: OnFrame) -> tuple[bytes | None, str]:
    """Until the session ends: stdout's frames to on_frame; (the exec status, stderr)."""
    from dtr_operator.kube_streams import EXEC_STATUS, STDERR, STDOUT

    frames, stderr, status = copier.Frames(), bytearray(), None
    while (got := await stream.read()) is not None:
        channel, data = got
        if channel == STDOUT:
            for kind, payload in frames.feed(data):
                on_frame(kind, payload)
        elif channel == STDERR:
            stderr += data
        elif channel == EXEC_STATUS:
            status = data
    return status, stderr.decode("utf-8", "replace")


async def _both(stream: Any, frames: Iterable[bytes], on_frame: OnFrame) -> tuple[bytes | None, str]:
    """Send and read at once until the session ends, or stop at a local error (which wins)."""
    reader, sender = asyncio.ensure_future(_read(stream, on_frame)), asyncio.ensure_future(_send(stream, frames))
    pending = {reader, sender}
    try:
        while reader in pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if sender in done and isinstance(sender.exception(), copier.CopyError):
                raise sender.exception()  # type: ignore[misc]
        return reader.result()
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if reader in pending:  # stopped early (an error, Ctrl-C): the program must not be killed mid-file
            await _wind_down(stream)


async def _wind_down(stream: Any) -> None:
    """End the program's input and give it a moment to end: a receiving program then removes its partial
    file. Where the server cannot end stdin alone (before Kubernetes 1.29), closing the connection does."""
    with contextlib.suppress(Exception):
        if await stream.close_stdin():
            await asyncio.wait_for(_drain(stream), WIND_DOWN)


async def _drain(stream: Any) -> None:
    while await stream.read() is not None:
        pass


async def _exec(kube: Any, namespace: str, pod: str, op: str, target: str, on_frame: OnFrame,
                frames: Iterable[bytes] = ()) -> None:  # fmt: skip
    """Run the copy program's OP on TARGET in the pod; TransferError naming what went wrong."""
    async with kube.exec_stream(namespace, pod, tr.CONTAINER, tr.command(PROGRAM, op, target)) as stream:
        status, stderr = await _both(stream, frames, on_frame)
    code, message = tr.exit_status(status) if status is not None else (-1, "the session ended without a status")
    if code != 0:
        raise tr.TransferError(tr.program_error(code, message, stderr))


def _frames_of(kind: bytes, into: dict[str, Any]) -> OnFrame:
    """An on_frame that keeps the JSON payload of one kind of frame (a listing, an account)."""

    def keep(got: bytes, payload: bytes) -> None:
        if got != kind:
            raise copier.CopyError(f"unexpected frame {got!r} from the pod")
        into.update(json.loads(payload))

    return keep


# ---- the pod -----------------------------------------------------------------------------------------


def _wait_started(kube: Any, namespace: str, name: str, timeout: float, node: str | None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pod = kube.get_pod(namespace, name)
        if pod is None:
            raise tr.TransferError(f"the transfer pod {name} was deleted before the copy")
        state, doing = tr.pod_start(pod)
        if state == tr.READY:
            return
        if state == tr.FAILED or time.monotonic() >= deadline:
            events = tr.events_summary(kube.pod_events(namespace, name), besides=doing)
            if state == tr.FAILED:
                raise tr.TransferError(f"the transfer pod {name} cannot start: {doing}" + (f"; events: {events}"
                                                                                         if events else ""))
            raise tr.TransferError(tr.start_timeout(name, timeout, doing, events, node))
        time.sleep(0.5)


def _remove(kube: Any, namespace: str, name: str) -> None:
    """Delete the pod (Ctrl-C cannot interrupt the request) and wait a little for it to be gone."""
    from dtr_operator.kube import ApiError

    previous = _set_sigint(signal.SIG_IGN)
    try:
        kube.delete_pod(namespace, name)
        deadline = time.monotonic() + DELETE_WAIT
        _set_sigint(previous)
        while kube.get_pod(namespace, name) is not None:
            if time.monotonic() >= deadline:
                print(f"dtr: the transfer pod {name} is still terminating", file=sys.stderr)
                return
            time.sleep(0.5)
    except ApiError as err:
        print(f"dtr: could not delete the transfer pod {name} ({err}); it ends by itself after "
              f"{tr.IDLE_SECONDS} s without a copy", file=sys.stderr)  # fmt: skip
    finally:
        _set_sigint(previous)


def _set_sigint(handler: Any) -> Any:
    """signal.signal(SIGINT, handler), the previous handler; nothing in another thread than the main one, which
    has none to set (dtr_client's fetch_model copies in a thread: a notebook's kernel runs an event loop)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, handler)


@contextlib.contextmanager
def transfer_pod(kube: Any, namespace: str, pvc: dict[str, Any], image: Image, read_only: bool, what: str,
                 timeout: float) -> Iterator[str]:  # fmt: skip
    """A running transfer pod for the claim, deleted afterwards whatever happens (also on Ctrl-C). IMAGE: its image,
    or what chooses it when the pod is made (dtr_client.images.chooser: the cluster's, never this machine's)."""
    from dtr_operator.kube import ApiError

    claim = pvc["metadata"]["name"]
    chosen = image if isinstance(image, str) else image()
    node = claim_node(kube, namespace, pvc)
    name = tr.pod_name("get" if read_only else "put", claim, secrets.token_hex(3))
    created = True  # until the API server says it did not create it (Ctrl-C may land in the request)
    try:
        try:
            kube.create(tr.pod_manifest(namespace, name, claim, chosen, read_only, what, node))
        except ApiError as err:
            created = err.status == 0
            raise tr.TransferError(f"cannot create the transfer pod: {err.message}") from None
        _wait_started(kube, namespace, name, timeout, node)
        yield name
    finally:
        if created:
            _remove(kube, namespace, name)


def claim_node(kube: Any, namespace: str, pvc: dict[str, Any]) -> str | None:
    """The node a pod mounting the claim must run on (tr.placement); also the TensorBoard pod's."""
    return tr.placement(pvc, tr.claim_users(_pods(kube, namespace), pvc["metadata"]["name"]))


def _pods(kube: Any, namespace: str) -> list[dict[str, Any]]:
    """The namespace's pods, to find the claim's users; none when we may not list them (placement is a help)."""
    from dtr_operator.kube import ApiError

    try:
        return kube.list_pods(namespace)
    except ApiError as err:
        if err.status in (401, 403):
            return []
        raise


# ---- dtr data put -----------------------------------------------------------------------------------


def _run(kube: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The run, or None when there is none or we may not read runs (a claim is enough for data put)."""
    from dtr_operator.kube import ApiError

    try:
        return kube.get_run(namespace, name)
    except ApiError as err:
        if err.status in (401, 403):
            return None
        raise


def claim_of(kube: Any, namespace: str, target: str, kind: str | None = None) -> dict[str, Any]:
    """The PVC that TARGET names: as tr.CLAIM the claim of that name, as tr.RUN the run's (the claim it names, or
    the one the operator creates for it); as a bare name (None), whichever of the two exists, refused when both do
    and they are not one claim: a teammate's run named like a claim would otherwise receive the data put there
    (security review R6)."""
    if kind == tr.CLAIM:
        return _claim(kube, namespace, target)
    if kind == tr.RUN:
        run = kube.get_run(namespace, target)  # a run asked for by name: not being allowed to read it is an error
        if run is None:
            raise tr.TransferError(f"no {KIND} {target} in namespace {namespace}")
        return _runs_claim(kube, namespace, target, run)
    return _either(kube, namespace, target)


def _either(kube: Any, namespace: str, target: str) -> dict[str, Any]:
    """A bare name: the run's claim or the claim of that name, whichever exists; AmbiguousTarget when both do."""
    run, pvc = _run(kube, namespace, target), kube.get_pvc(namespace, target)
    if run is None:
        if pvc is None:
            raise tr.TransferError(f"no {KIND} and no PersistentVolumeClaim named {target} in namespace {namespace}")
        return pvc
    claim = _claim_name(target, run)
    if pvc is not None and claim != target:
        raise tr.AmbiguousTarget(f"{target} is both a {KIND} (its claim: {claim}) and a PersistentVolumeClaim in "
                                 f"namespace {namespace}: say which, --run {target} or --claim {target}")  # fmt: skip
    return _runs_claim(kube, namespace, target, run)


def _claim(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    pvc = kube.get_pvc(namespace, name)
    if pvc is None:
        raise tr.TransferError(f"no PersistentVolumeClaim {name} in namespace {namespace}")
    return pvc


def _claim_name(target: str, run: dict[str, Any]) -> str:
    try:
        spec = parse_run(run)
    except SpecError as err:
        raise tr.TransferError(f"{KIND} {target} is not valid: {err}") from None
    if not spec.has_volume:
        raise tr.TransferError(f"{KIND} {target} has no volume (spec.storage.volume false): its data, backups and "
                               "model live in its bucket (docs/object-storage.md#a-run-with-no-volume)")  # fmt: skip
    return spec.pvc_name


def _runs_claim(kube: Any, namespace: str, target: str, run: dict[str, Any]) -> dict[str, Any]:
    claim = _claim_name(target, run)
    pvc = kube.get_pvc(namespace, claim)
    if pvc is None:
        raise tr.TransferError(f"{KIND} {target}'s claim {claim} does not exist (yet): the operator creates it "
                               "when the run starts; to put data before a run, create a claim and name it in "
                               "spec.storage.claimName")  # fmt: skip
    return pvc


def local_tree(local: str) -> list[copier.Entry]:
    """What putting LOCAL sends: it under its own name."""
    return copier.walk(local, os.path.basename(os.path.abspath(local)))


def put(kube: Any, namespace: str, target: str, entries: list[copier.Entry], dest: str, image: Image,
        timeout: float, reporter: Reporter, kind: str | None = None) -> str:  # fmt: skip
    """Copy the local tree into DEST (volume-relative) on TARGET's claim (kind: claim_of's); the one-line summary."""
    top = entries[0][1].split("/")[0]
    totals = copier.totals(entries)
    reporter.total(totals["bytes"])
    pvc = claim_of(kube, namespace, target, kind)
    claim, where = pvc["metadata"]["name"], f"{dest}/{top}" if dest else top
    sent: dict[str, str] = {}
    account: dict[str, Any] = {}
    with transfer_pod(kube, namespace, pvc, image, False, f"put {where}", timeout) as pod:
        frames = copier.tree_frames(entries, reporter, sent)
        asyncio.run(_exec(kube, namespace, pod, "receive", tr.in_pod(dest), _frames_of(copier.ACCOUNT, account),
                          frames))  # fmt: skip
    reporter.finish()
    mismatch = tr.account_mismatch(sent, account)
    if mismatch:
        raise tr.TransferError(mismatch)
    return (f"put {totals['files']} file(s), {tr.human_bytes(totals['bytes'])}, into {where} on claim {claim} "
            "(SHA-256 checked)")  # fmt: skip


# ---- dtr model get ------------------------------------------------------------------------------------


def check_dest(dest: Path) -> None:
    """TransferError when DEST cannot take a model: not an empty directory, or under a file."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise tr.TransferError(f"{dest} exists and is not an empty directory")
    if dest.parent.exists() and not dest.parent.is_dir():
        raise tr.TransferError(f"{dest.parent} is not a directory")


def _into(dest: Path, fill: Callable[[str], None]) -> None:
    """DEST made complete or not at all: filled in a temporary directory beside it (its parents made as
    needed), renamed at the end."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=f".{dest.name}.dtr-partial-", dir=dest.parent)
    try:
        fill(temporary)
        os.chmod(temporary, 0o755)
        if dest.exists():
            dest.rmdir()
        os.rename(temporary, dest)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def get(kube: Any, namespace: str, run_name: str, dest: Path, version: int | None, image: Image, timeout: float,
        reporter: Reporter, environ: Mapping[str, str] | None = None) -> str:  # fmt: skip
    """Copy a version of the run's model into DEST; the one-line summary. A model published in a bucket comes
    from there (dtr_client.bucket, the store's settings from environ), with no pod."""
    check_dest(dest)
    run = kube.get_run(namespace, run_name)
    if run is None:
        raise tr.TransferError(f"no {KIND} {run_name} in namespace {namespace}")
    in_bucket = bucket.bucket_source(run, version)
    if in_bucket is not None:
        return f"{run_name}: " + bucket.get(*in_bucket, dest, os.environ if environ is None else environ)
    try:
        source = tr.model_source(run, version)
    except SpecError as err:
        raise tr.TransferError(f"{KIND} {run_name} is not valid: {err}") from None
    pvc = kube.get_pvc(namespace, source.claim)
    if pvc is None:
        raise tr.TransferError(f"{run_name}'s claim {source.claim} does not exist (any more)")
    where = f"{source.base} on claim {source.claim}"
    with transfer_pod(kube, namespace, pvc, image, True, f"get {source.base}", timeout) as pod:
        found: dict[str, Any] = {}
        asyncio.run(_exec(kube, namespace, pod, "list", tr.in_pod(source.base), _frames_of(copier.LISTING, found)))
        chosen = tr.choose_version(found.get("names") or [], source.version, where)
        path = tr.version_path(source, chosen)

        def fill(directory: str) -> None:
            writer = copier.TreeWriter(directory, reporter, reporter.total, sides=("in the pod", "local"))
            try:
                asyncio.run(_exec(kube, namespace, pod, "send", tr.in_pod(path), writer.handle))
            finally:
                writer.abort()
            if not writer.done:
                raise tr.TransferError(f"the copy of {path} ended before it was complete")
            found["account"] = writer.account

        _into(dest, fill)
    reporter.finish()
    account = found["account"]
    return (f"got version {chosen} of {run_name}'s model ({len(account['files'])} file(s), "
            f"{tr.human_bytes(account['bytes'])}) from {path} on claim {source.claim} into {dest} (SHA-256 checked)")
