#!/usr/bin/env python3
"""Write a single-layer linux/amd64 OCI image as an image-layout tar, for `ctr -n k8s.io images import`.

No Docker, no registry, standard library only. The layer is a gzip tar made from host files (each with an
image path and mode), directories and symlinks; parent directories are added as 0755. Every owner is
root (0:0) and every mtime is the same fixed time, entries are sorted, gzip carries no name or time:
the same inputs give the same bytes, so the same digests.

The index.json entry carries the normalized reference (`busybox:dtr` -> `docker.io/library/busybox:dtr`)
both as `io.containerd.image.name`, which containerd names the imported image after, and as
`org.opencontainers.image.ref.name`; the CRI plugin finds an image by that normalized name.

    ociimage.py --ref busybox:dtr --out busybox.tar \\
        --file /bin/busybox /bin/busybox 0755 --symlink /bin/sh busybox --cmd '["sh"]'
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import struct
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
ANNOTATION_REF = "org.opencontainers.image.ref.name"
ANNOTATION_CONTAINERD = "io.containerd.image.name"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CAPABILITIES = {"chown": 0, "dac_override": 1, "kill": 5, "setgid": 6, "setuid": 7, "net_bind_service": 10,
                "net_admin": 12, "net_raw": 13, "sys_chroot": 18, "sys_admin": 21}


@dataclass(frozen=True)
class File:
    """A host file copied to `dest` in the image with `mode`; `caps` become a file capability (+ep)."""

    src: Path
    dest: str
    mode: int = 0o755
    caps: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dir:
    dest: str
    mode: int = 0o755


@dataclass(frozen=True)
class Symlink:
    dest: str
    target: str


@dataclass(frozen=True)
class Config:
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    user: str = ""
    env: list[str] = field(default_factory=lambda: [f"PATH={DEFAULT_PATH}"])
    workdir: str = "/"
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    ref: str
    manifest_digest: str
    config_digest: str
    layer_digest: str
    diff_id: str
    size: int


def normalize_ref(ref: str) -> str:
    """The fully qualified reference, as containerd's CRI plugin spells it (docker.io/library/..., :latest)."""
    if not ref or ref != ref.strip() or any(c.isspace() for c in ref):
        raise ValueError(f"bad image reference: {ref!r}")
    name, _, digest = ref.partition("@")
    first, sep, _ = name.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        name = "docker.io/" + name
    if name.startswith("docker.io/") and name.count("/") == 1:
        name = "docker.io/library/" + name.removeprefix("docker.io/")
    domain, path = name.split("/", 1)
    if not digest and ":" not in path:
        path += ":latest"
    if not path or path.partition(":")[0] != path.partition(":")[0].lower():
        raise ValueError(f"bad repository in {ref!r} (lower case, after the registry host)")
    name = f"{domain}/{path}"
    return f"{name}@{digest}" if digest else name


def file_capability(names: Iterable[str]) -> bytes:
    """security.capability xattr value (vfs_cap_data revision 2) granting the capabilities permitted+effective."""
    bits = 0
    for n in names:
        key = n.lower().removeprefix("cap_")
        if key not in CAPABILITIES:
            raise ValueError(f"unknown capability {n!r} (known: {sorted(CAPABILITIES)})")
        bits |= 1 << CAPABILITIES[key]
    vfs_cap_revision_2, vfs_cap_flags_effective = 0x02000000, 0x000001
    return struct.pack("<5I", vfs_cap_revision_2 | vfs_cap_flags_effective, bits & 0xFFFFFFFF, 0, bits >> 32, 0)


def _image_path(p: str) -> str:
    pp = PurePosixPath("/" + p.lstrip("/"))
    if ".." in pp.parts or str(pp) == "/":
        raise ValueError(f"bad image path: {p!r}")
    return str(pp).lstrip("/")


class _Hashing:
    """A write-only file object that hashes and counts what passes through to `out` (if any)."""

    def __init__(self, out: BinaryIO | None = None) -> None:
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def write(self, b: bytes) -> int:
        self.sha.update(b)
        self.size += len(b)
        if self.out is not None:
            self.out.write(b)
        return len(b)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        if self.out is not None:
            self.out.flush()

    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


def _entries(files: Sequence[File], dirs: Sequence[Dir], symlinks: Sequence[Symlink]) -> dict[str, object]:
    entries: dict[str, object] = {}
    for e in [*files, *dirs, *symlinks]:
        path = _image_path(e.dest)
        if path in entries:
            raise ValueError(f"{e.dest!r} given twice")
        entries[path] = e
    for path in list(entries):
        parent = PurePosixPath(path).parent
        while str(parent) != ".":
            p = str(parent)
            if p not in entries:
                entries[p] = Dir(p)
            elif not isinstance(entries[p], Dir):
                raise ValueError(f"{p!r} is a parent directory of {path!r} but not a directory")
            parent = parent.parent
    return entries


def write_layer(out: BinaryIO, files: Sequence[File], dirs: Sequence[Dir] = (), symlinks: Sequence[Symlink] = (),
                mtime: int = 0, compresslevel: int = 6) -> tuple[str, str, int]:
    """Write the gzip layer to `out`; return (digest of the gzip blob, diff_id of the tar, blob size)."""
    blob = _Hashing(out)
    with gzip.GzipFile(filename="", mode="wb", fileobj=blob, mtime=mtime, compresslevel=compresslevel) as gz:
        raw = _Hashing(gz)
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path, e in sorted(_entries(files, dirs, symlinks).items()):
                info = tarfile.TarInfo(path)
                info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
                if isinstance(e, File):
                    st = os.stat(e.src)
                    info.type, info.size, info.mode = tarfile.REGTYPE, st.st_size, e.mode
                    if e.caps:
                        value = file_capability(e.caps).decode("utf-8", "surrogateescape")
                        info.pax_headers = {"SCHILY.xattr.security.capability": value}
                    with open(e.src, "rb") as f:
                        tar.addfile(info, f)
                elif isinstance(e, Symlink):
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, e.target, 0o777
                    tar.addfile(info)
                else:
                    assert isinstance(e, Dir)
                    info.type, info.mode = tarfile.DIRTYPE, e.mode
                    tar.addfile(info)
    return blob.digest(), raw.digest(), blob.size


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _descriptor(media_type: str, data_digest: str, size: int, **extra: object) -> dict[str, object]:
    return {"mediaType": media_type, "digest": data_digest, "size": size, **extra}


def build_image(out: Path | str, ref: str, files: Sequence[File], dirs: Sequence[Dir] = (),
                symlinks: Sequence[Symlink] = (), config: Config | None = None, mtime: int = 0,
                compresslevel: int = 6) -> Result:
    """Write the OCI image-layout tar `out` (atomically: a temp file renamed into place)."""
    config = config or Config()
    name = normalize_ref(ref)
    out = Path(out)
    created = datetime.datetime.fromtimestamp(mtime, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    tmp_layer = out.with_name(out.name + ".layer.tmp")
    tmp_out = out.with_name(out.name + ".tmp")
    try:
        with open(tmp_layer, "wb") as f:
            layer_digest, diff_id, layer_size = write_layer(f, files, dirs, symlinks, mtime, compresslevel)
        image_config: dict[str, object] = {
            "created": created,
            "architecture": "amd64",
            "os": "linux",
            "config": {k: v for k, v in {
                "Entrypoint": config.entrypoint, "Cmd": config.cmd, "User": config.user or None,
                "Env": config.env, "WorkingDir": config.workdir, "Labels": config.labels or None,
            }.items() if v is not None},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": created, "created_by": "devcluster/ociimage.py"}],
        }
        config_bytes = _json(image_config)
        config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
        manifest = {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": _descriptor(MEDIA_CONFIG, config_digest, len(config_bytes)),
            "layers": [_descriptor(MEDIA_LAYER, layer_digest, layer_size)],
        }
        manifest_bytes = _json(manifest)
        manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
        index = {
            "schemaVersion": 2,
            "mediaType": MEDIA_INDEX,
            "manifests": [_descriptor(MEDIA_MANIFEST, manifest_digest, len(manifest_bytes),
                                      platform={"architecture": "amd64", "os": "linux"},
                                      annotations={ANNOTATION_CONTAINERD: name, ANNOTATION_REF: name})],
        }
        with tarfile.open(tmp_out, "w", format=tarfile.PAX_FORMAT) as tar:
            def add(path: str, data: bytes | None = None, src: Path | None = None) -> None:
                info = tarfile.TarInfo(path)
                info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
                if data is None and src is None:
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                    return
                info.mode = 0o644
                if src is not None:
                    info.size = src.stat().st_size
                    with open(src, "rb") as f:
                        tar.addfile(info, f)
                else:
                    assert data is not None
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))

            add("blobs")
            add("blobs/sha256")
            add(f"blobs/sha256/{config_digest.split(':')[1]}", config_bytes)
            add(f"blobs/sha256/{layer_digest.split(':')[1]}", src=tmp_layer)
            add(f"blobs/sha256/{manifest_digest.split(':')[1]}", manifest_bytes)
            add("index.json", _json(index))
            add("oci-layout", _json({"imageLayoutVersion": "1.0.0"}))
        os.replace(tmp_out, out)
    finally:
        tmp_layer.unlink(missing_ok=True)
        tmp_out.unlink(missing_ok=True)
    return Result(name, manifest_digest, config_digest, layer_digest, diff_id, out.stat().st_size)


def _mode(s: str) -> int:
    return int(s, 8)


def _json_list(s: str) -> list[str]:
    v = json.loads(s)
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise argparse.ArgumentTypeError(f"expected a JSON list of strings: {s}")
    return v


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", required=True,
                    help="image reference (written fully qualified: busybox:x -> docker.io/library/busybox:x)")
    ap.add_argument("--out", required=True, type=Path, help="the OCI image-layout tar to write")
    ap.add_argument("--file", nargs=3, action="append", default=[], metavar=("SRC", "DEST", "MODE"),
                    help="host file SRC as DEST in the image, octal MODE (repeatable)")
    ap.add_argument("--caps", action="append", default=[], metavar="DEST=CAP[,CAP]",
                    help="file capabilities (+ep) for a --file DEST, e.g. /coredns=net_bind_service")
    ap.add_argument("--dir", nargs=2, action="append", default=[], metavar=("DEST", "MODE"))
    ap.add_argument("--symlink", nargs=2, action="append", default=[], metavar=("DEST", "TARGET"))
    ap.add_argument("--entrypoint", type=_json_list, help='JSON list, e.g. \'["/pause"]\'')
    ap.add_argument("--cmd", type=_json_list, help="JSON list")
    ap.add_argument("--user", default="", help="e.g. 65532:65532 (default: root)")
    ap.add_argument("--env", action="append", default=None, metavar="K=V",
                    help=f"repeatable; default PATH={DEFAULT_PATH}")
    ap.add_argument("--workdir", default="/")
    ap.add_argument("--label", action="append", default=[], metavar="K=V")
    ap.add_argument("--mtime", type=int, default=int(os.environ.get("SOURCE_DATE_EPOCH", "0")),
                    help="every timestamp (default: $SOURCE_DATE_EPOCH, else 0)")
    a = ap.parse_args(argv)
    caps: dict[str, tuple[str, ...]] = {}
    for c in a.caps:
        dest, _, names = c.partition("=")
        caps[_image_path(dest)] = tuple(n for n in names.split(",") if n)
    files = [File(Path(s), d, _mode(m), caps.pop(_image_path(d), ())) for s, d, m in a.file]
    if caps:
        ap.error(f"--caps for paths that are no --file: {sorted(caps)}")
    dirs = [Dir(d, _mode(m)) for d, m in a.dir]
    links = [Symlink(d, t) for d, t in a.symlink]
    env = a.env if a.env is not None else [f"PATH={DEFAULT_PATH}"]
    labels = dict(kv.split("=", 1) for kv in a.label)
    cfg = Config(entrypoint=a.entrypoint, cmd=a.cmd, user=a.user, env=env, workdir=a.workdir, labels=labels)
    r = build_image(a.out, a.ref, files, dirs, links, cfg, a.mtime)
    print(f"{r.ref} {r.manifest_digest} {a.out} {r.size}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
