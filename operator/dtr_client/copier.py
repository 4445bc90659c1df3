"""The copy program of `dtr data put` and `dtr model get`, the same code at both ends of the copy.

dtr runs it locally, and sends this file's text to the transfer pod, which runs it with the image's
Python (the trainer image's 3.9) through `python -c BOOTSTRAP` (transfer.py): so it is standard library
only, Python 3.9, and knows nothing of the volume's layout (dtr passes absolute paths).

A tree goes from a sender to a receiver as frames: one kind byte, a 4-byte big-endian length, a payload.

    T {"files": n, "bytes": b}      a tree follows (the receiver's progress total)
    D name                          a directory: a relative '/'-separated name
    F name                          a regular file's start; its bytes follow as C frames
    C bytes                         at most CHUNK of them
    E sha256                        the file's end: the SHA-256 of its bytes as the sender read them
    Z {"files": n, "bytes": b}      the tree's end, counted as sent
    R {"files": {name: sha256}, "bytes": b}   the receiver's account of what it wrote (put's answer)
    L {"exists": bool, "names": [...]}        a directory's subdirectories (dtr model get's versions)

The receiver computes each file's SHA-256 from the bytes it writes and compares it with the E frame: a
mismatch is an error naming both. A file is written under a temporary name beside its place and renamed
only when complete and checked, so a reader never sees half a file; names are checked (relative, no
`..`), and no directory on the way may be a symlink, so nothing is written outside the receiver's root.
Only regular files and directories are copied: a symlink or a special file in a sent tree is an error.

In the pod: `copier.py list|send|receive ROOT TARGET [HEARTBEAT]`, TARGET an absolute path at or
under ROOT (the volume's mount), the frames on stdout (for receive: read from stdin after the program's
own text). A failure is one `error: ...` line on stderr and exit status 3.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

CHUNK = 256 * 1024
MAX_PAYLOAD = 4 * 1024 * 1024  # a sane frame is at most a chunk or a JSON account; more is a broken stream
HEAD = 5
FAILED = 3  # the program's exit status for an error it names
PARTIAL = ".dtr-partial-"
HEARTBEAT_EVERY = 10.0  # seconds between touches of the heartbeat file the pod's idle process watches

TREE, DIR, FILE, CHUNK_OF, END, DONE, ACCOUNT, LISTING = (k.encode() for k in "TDFCEZRL")

Entry = tuple[bytes, str, str]  # (DIR or FILE, relative name, local path)
OnBytes = Callable[[int], None]


class CopyError(Exception):
    """What went wrong, in one line for the user."""


# ---- frames ------------------------------------------------------------------------------------


def frame(kind: bytes, payload: bytes) -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


def json_frame(kind: bytes, value: Any) -> bytes:
    return frame(kind, json.dumps(value, sort_keys=True).encode())


class Frames:
    """Bytes in as they come, whole frames out."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        self.buffer += data
        out = []
        while len(self.buffer) >= HEAD:
            size = int.from_bytes(self.buffer[1:HEAD], "big")
            if size > MAX_PAYLOAD:
                raise CopyError(f"not a copy stream (a frame of {size} bytes)")
            if len(self.buffer) < HEAD + size:
                break
            out.append((bytes(self.buffer[:1]), bytes(self.buffer[HEAD:HEAD + size])))
            del self.buffer[:HEAD + size]
        return out


# ---- names -------------------------------------------------------------------------------------


def name_parts(name: str) -> list[str]:
    """A relative '/'-separated name's parts; CopyError for anything that could leave its root."""
    parts = name.split("/")
    if not name or "\0" in name or any(p in ("", ".", "..") for p in parts):
        raise CopyError(f"refusing the name {name!r}: not a plain relative path")
    return parts


def inside(root: str, target: str) -> str:
    """TARGET's path relative to ROOT ('' for ROOT itself), both absolute; CopyError if it is not under it,
    as written or once the symlinks on the way are followed."""
    root, target = os.path.normpath(root), os.path.normpath(target)
    for top, path in ((root, target), (os.path.realpath(root), os.path.realpath(target))):
        if not os.path.isabs(path) or os.path.commonpath([top, path]) != top:
            raise CopyError(f"{target} is not under {root}")
    return os.path.relpath(target, root) if target != root else ""


def make_dirs(root: str, relative: str) -> str:
    """ROOT/RELATIVE made as directories one part at a time; an existing part must be a real directory."""
    path = root
    for part in name_parts(relative) if relative else []:
        path = os.path.join(path, part)
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            if os.path.islink(path) or not os.path.isdir(path):
                raise CopyError(f"{path} exists and is not a directory") from None
    return path


# ---- sending -----------------------------------------------------------------------------------


def _kind(path: str) -> bytes:
    mode = os.lstat(path).st_mode
    if stat.S_ISDIR(mode):
        return DIR
    if stat.S_ISREG(mode):
        return FILE
    raise CopyError(f"{path} is not a regular file or a directory (symlinks and special files are not copied)")


def walk(path: str, top: str) -> list[Entry]:
    """What sending PATH sends: PATH itself named TOP, or with top '' a directory's contents, in a stable
    order (directories before what they hold)."""
    try:
        kind = _kind(path)
    except FileNotFoundError:
        raise CopyError(f"{path}: no such file or directory") from None
    if kind == FILE:
        if not top:
            raise CopyError(f"{path} is a file, not a directory")
        return [(FILE, top, path)]
    entries: list[Entry] = [(DIR, top, path)] if top else []
    for dirpath, dirnames, filenames in os.walk(path, onerror=_walk_error):
        dirnames.sort()
        prefix = os.path.relpath(dirpath, path).replace(os.sep, "/")
        for name in sorted(dirnames) + sorted(filenames):
            local = os.path.join(dirpath, name)
            relative = "/".join(p for p in (top, "" if prefix == "." else prefix, name) if p)
            entries.append((_kind(local), relative, local))
    return entries


def _walk_error(err: OSError) -> None:
    raise CopyError(f"cannot read {err.filename}: {err.strerror}")


def totals(entries: Iterable[Entry]) -> dict:
    files = [path for kind, _, path in entries if kind == FILE]
    return {"files": len(files), "bytes": sum(os.path.getsize(p) for p in files)}


def tree_frames(entries: list[Entry], on_bytes: OnBytes | None = None, digests: dict | None = None
                ) -> Iterator[bytes]:  # fmt: skip
    """The frames of a tree, read as they go; each file's digest computed from the bytes read (and kept in
    `digests`, name -> SHA-256, when given)."""
    yield json_frame(TREE, totals(entries))
    sent = {"files": 0, "bytes": 0}
    for kind, name, path in entries:
        yield frame(kind, name.encode())
        if kind == FILE:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda f=f: f.read(CHUNK), b""):
                    digest.update(chunk)
                    sent["bytes"] += len(chunk)
                    if on_bytes:
                        on_bytes(len(chunk))
                    yield frame(CHUNK_OF, chunk)
            sent["files"] += 1
            if digests is not None:
                digests[name] = digest.hexdigest()
            yield frame(END, digest.hexdigest().encode())
    yield json_frame(DONE, sent)


# ---- receiving ---------------------------------------------------------------------------------


class TreeWriter:
    """Writes the frames of one tree under ROOT (an existing directory); `done` once the tree has ended and
    every file was checked. `account` is what it wrote: {"files": {name: sha256}, "bytes": n}."""

    def __init__(self, root: str, on_bytes: OnBytes | None = None, on_total: OnBytes | None = None,
                 sides: tuple[str, str] = ("sent", "written")):  # fmt: skip
        self.root, self.sides = root, sides
        self.on_bytes, self.on_total = on_bytes, on_total
        self.account: dict = {"files": {}, "bytes": 0}
        self.done = False
        self._file: tuple[str, str, int, Any] | None = None  # name, temporary path, fd, digest
        self._handlers = {TREE: self._tree, DIR: self._dir, FILE: self._start, CHUNK_OF: self._chunk,
                          END: self._end, DONE: self._done}  # fmt: skip

    def handle(self, kind: bytes, payload: bytes) -> None:
        handler = self._handlers.get(kind)
        if handler is None or self.done:
            raise CopyError(f"unexpected frame {kind!r} in a tree")
        handler(payload)

    def _tree(self, payload: bytes) -> None:
        if self.on_total:
            self.on_total(int(json.loads(payload)["bytes"]))

    def _dir(self, payload: bytes) -> None:
        make_dirs(self.root, payload.decode())

    def _start(self, payload: bytes) -> None:
        name = payload.decode()
        parts = name_parts(name)
        parent = make_dirs(self.root, "/".join(parts[:-1])) if len(parts) > 1 else self.root
        temporary = os.path.join(parent, f".{parts[-1]}{PARTIAL}{os.urandom(4).hex()}")  # pids repeat in pods
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        self._file = (name, temporary, os.open(temporary, flags, 0o644), hashlib.sha256())

    def _chunk(self, payload: bytes) -> None:
        if self._file is None:
            raise CopyError("file bytes outside a file")
        _, _, fd, digest = self._file
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        digest.update(payload)
        self.account["bytes"] += len(payload)
        if self.on_bytes:
            self.on_bytes(len(payload))

    def _end(self, payload: bytes) -> None:
        if self._file is None:
            raise CopyError("a file's end outside a file")
        name, temporary, fd, digest = self._file
        sent, written = payload.decode(), digest.hexdigest()
        if sent != written:
            raise CopyError(f"SHA-256 mismatch for {name}: {self.sides[0]} {sent}, {self.sides[1]} {written}")
        os.fsync(fd)
        os.close(fd)
        self._file = None
        final = os.path.join(os.path.dirname(temporary), name.rsplit("/", 1)[-1])
        try:
            os.replace(temporary, final)
        except OSError as err:
            os.unlink(temporary)
            raise CopyError(f"cannot write {final}: {err.strerror}") from None
        self.account["files"][name] = written

    def _done(self, payload: bytes) -> None:
        sent = json.loads(payload)
        got = {"files": len(self.account["files"]), "bytes": self.account["bytes"]}
        if sent != got or self._file is not None:
            raise CopyError(f"the tree ended incomplete: sent {sent}, received {got}")
        self.done = True

    def abort(self) -> None:
        """Remove the file being written, if any (complete files stay)."""
        if self._file is not None:
            _, temporary, fd, _ = self._file
            self._file = None
            os.close(fd)
            os.unlink(temporary)


# ---- the program in the pod ----------------------------------------------------------------------


class Heartbeat:
    """Touches a file now and then, so that the pod's idle process knows a copy is still going."""

    def __init__(self, path: str | None):
        self.path, self.last = path, 0.0

    def __call__(self, _: int = 0) -> None:
        now = time.monotonic()
        if self.path and now - self.last >= HEARTBEAT_EVERY:
            self.last = now
            with open(self.path, "a"):
                os.utime(self.path)


def listing(path: str) -> dict:
    if not os.path.isdir(path):
        return {"exists": False, "names": []}
    return {"exists": True, "names": sorted(e.name for e in os.scandir(path) if e.is_dir(follow_symlinks=False))}


def receive(stdin: Any, root: str, heartbeat: Heartbeat) -> dict:
    writer, frames = TreeWriter(root, on_bytes=heartbeat, sides=("local", "in the pod")), Frames()
    try:
        while not writer.done:
            data = stdin.read1(CHUNK)
            if not data:
                raise CopyError("the stream ended before the tree was complete")
            for kind, payload in frames.feed(data):
                writer.handle(kind, payload)
    finally:
        writer.abort()
    return writer.account


def run(op: str, root: str, target: str, heartbeat: Heartbeat, stdin: Any, stdout: Any) -> None:
    relative = inside(root, target)
    heartbeat()
    if op == "list":
        stdout.write(json_frame(LISTING, listing(target)))
    elif op == "send":
        for data in tree_frames(walk(target, ""), heartbeat):
            stdout.write(data)
    elif op == "receive":
        stdout.write(json_frame(ACCOUNT, receive(stdin, make_dirs(root, relative), heartbeat)))
    else:
        raise CopyError(f"unknown operation {op!r}")
    stdout.flush()


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print("usage: copier.py list|send|receive ROOT TARGET [HEARTBEAT]", file=sys.stderr)
        return 2
    try:
        run(argv[0], argv[1], argv[2], Heartbeat(argv[3] if len(argv) > 3 else None), sys.stdin.buffer,
            sys.stdout.buffer)  # fmt: skip
    except CopyError as err:
        print(f"error: {err}", file=sys.stderr)
        return FAILED
    except OSError as err:
        print(f"error: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
        return FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
