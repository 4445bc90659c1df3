"""The operator's and trainer's images unpacked once per pair of image IDs, into a containerd root every node
starts from: a *seed*, paid once across runs and nodes.

`docker save | ctr import` of both images (~1.9 GB: every layer written to the content store, then unpacked into
overlayfs snapshots) took 48-54 s per node start and 42-74 s for three nodes at once, in every CI run, warm or
cold. Here it runs once for a pair of image IDs (and containerd's version), into a containerd of its own that is
then stopped: ~/.cache/dtr/containerd-seed/<key>/root. A node whose images are built starts its containerd on a
copy of that root: files hard-linked (content blobs and committed snapshots are never written in place; a
container writes to an upper directory of its own), containerd's two bolt databases copied, its instance UUID
left for it to make. The copy takes seconds and no disk; removing a node's root (`down --purge`) unlinks its
links, never the seed's files.

A new pair of IDs makes a new seed from the last one when it was written by the same containerd: that seed's
directory becomes the new one's, and only the images whose ID changed are removed and imported again (each run of
a changed operator: ~400 MB, not 1.9 GB; the layers the images share stay). A node planted from the old seed keeps
its own links and databases: nothing in the seed is written in place but its databases, which nodes copy. Without
a seed to start from, or when that fails, both images are imported into an empty root.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from devcluster import controlplane as cp

SEEDS = "containerd-seed"  # under the build cache
# A unix socket's path must fit 108 bytes: a short fixed home for the seed's own containerd (one at a time: the lock).
RUN_DIR = Path("/run/dtr-seed")
# containerd's metadata and the overlayfs snapshotter's, below its root: bolt databases written in place
COPIED = ("io.containerd.metadata.v1.bolt/meta.db", "io.containerd.snapshotter.v1.overlayfs/metadata.db")
DROPPED = ("io.containerd.grpc.v1.introspection",)  # its instance UUID: each containerd makes its own
HELD = "images.json"  # beside a seed's root: the containerd version that wrote it and each image's ID
START_SECONDS = 60.0
IMPORT_SECONDS = 900.0


class SeedError(Exception):
    """The seed could not be made: one line, with containerd's or ctr's last words."""


def seed_key(image_ids: str, containerd_version: str) -> str:
    """The seed's name: both images' IDs and the containerd that wrote the store (its on-disk format)."""
    return hashlib.sha256(f"{containerd_version}\n{image_ids}".encode()).hexdigest()[:16]


def seed_config(root: Path, run_dir: Path) -> str:
    """A containerd that only stores and unpacks images: no CRI (no pods, no network, no port)."""
    return f"""version = 3
root = '{root}'
state = '{run_dir}/state'
disabled_plugins = ['io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images',
                    'io.containerd.podsandbox.controller.v1.podsandbox', 'io.containerd.nri.v1.nri']

[grpc]
  address = '{run_dir}/containerd.sock'
"""


def plant(seed_root: Path, root: Path) -> None:
    """A copy of the seed's containerd root at `root` (which must not exist): `cp -a --link` (every file hard-linked;
    directories, symbolic links, owners, modes and the overlay's extended attributes as they are), then the databases
    containerd writes in place copied over their links, and its instance UUID left out."""
    linked = subprocess.run(["cp", "-a", "--link", str(seed_root), str(root)], capture_output=True, text=True,
                            check=False)  # fmt: skip
    if linked.returncode != 0:  # the cache on another file system: no links across it
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run(["cp", "-a", str(seed_root), str(root)], check=True)
    for name in COPIED:
        (root / name).unlink()
        shutil.copy2(seed_root / name, root / name)
    for name in DROPPED:
        shutil.rmtree(root / name, ignore_errors=True)


def seeded(cache: Path, bin_dir: Path, image_ids: str, images: Sequence[str], containerd_version: str,
           log: Callable[[str], None]) -> Path:  # fmt: skip
    """The seed's containerd root for these images, made first if there is none (under a lock: nodes that start
    at once make it once). image_ids: their IDs, one a line, in the order of `images`."""
    seeds = cache / SEEDS
    seeds.mkdir(parents=True, exist_ok=True)
    key = seed_key(image_ids, containerd_version)
    ids = dict(zip(images, image_ids.split(), strict=True))
    with cp.file_lock(seeds / ".lock"):
        final = seeds / key
        if not (final / "root").is_dir():
            t0 = time.monotonic()
            changed = _make_from_last(final, bin_dir, ids, last_seed(seeds, key, containerd_version), log)
            log(f"images seeded in {time.monotonic() - t0:.0f} s ({final}; imported: {', '.join(changed) or 'none'})")
            for old in seeds.iterdir():
                if old.is_dir() and old.name != key:
                    shutil.rmtree(old, ignore_errors=True)
        if not (final / HELD).exists():  # also a seed made before seeds said what they hold: its key is of these
            (final / HELD).write_text(json.dumps({"containerd": containerd_version, "images": ids}))
    return final / "root"


def _make_from_last(final: Path, bin_dir: Path, wanted: dict[str, str], base: tuple[Path, dict[str, str]] | None,
                    log: Callable[[str], None]) -> list[str]:  # fmt: skip
    """The seed at `final` made from `base` (the last seed and its images' IDs), else from nothing; the images
    imported."""
    if base is not None:
        changed = changed_images(base[1], wanted)
        try:
            _make(final, bin_dir, changed, (base[0], [i for i in changed if i in base[1]]))
            return changed
        except SeedError as err:
            log(f"images not seeded from the last seed ({err}): all imported")
    _make(final, bin_dir, list(wanted), None)
    return list(wanted)


def last_seed(seeds: Path, key: str, containerd_version: str) -> tuple[Path, dict[str, str]] | None:
    """A whole seed other than `key`'s that this containerd wrote, and the IDs of its images."""
    for seed in sorted(seeds.iterdir()):
        try:
            held = json.loads((seed / HELD).read_text())
        except (OSError, ValueError):
            continue
        if seed.name != key and (seed / "root").is_dir() and held.get("containerd") == containerd_version:
            return seed, dict(held.get("images") or {})
    return None


def changed_images(held: dict[str, str], wanted: dict[str, str]) -> list[str]:
    """The images to import into a seed that holds `held` (image -> ID) for it to hold `wanted`."""
    return [image for image, image_id in wanted.items() if held.get(image) != image_id]


def _make(final: Path, bin_dir: Path, images: Sequence[str], base: tuple[Path, list[str]] | None) -> None:
    """`images` imported and unpacked by a containerd of its own into a directory beside `final`: an empty one, or
    the seed base[0] moved there, its images base[1] removed first. Renamed into place once that containerd has
    stopped (a half-made seed is never used)."""
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    if base is not None:
        os.rename(base[0], partial)
        (partial / HELD).unlink()  # says what it held; rewritten once it is whole again (seeded)
    else:
        partial.mkdir()
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    RUN_DIR.mkdir(parents=True)
    config = partial / "config.toml"
    config.write_text(seed_config(partial / "root", RUN_DIR))
    ctr = [str(bin_dir / "ctr"), "--address", str(RUN_DIR / "containerd.sock"), "-n", "k8s.io"]
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    with open(partial / "containerd.log", "wb") as out:
        containerd = subprocess.Popen([str(bin_dir / "containerd"), f"--config={config}"], stdout=out,
                                      stderr=subprocess.STDOUT, env=env, start_new_session=True)  # fmt: skip
    try:
        _wait_serving(ctr, containerd, partial / "containerd.log")
        if base is not None and base[1]:
            _ctr(ctr, "images", "rm", "--sync", *base[1])  # their layers no other image has go with them
        if images:
            _import(ctr, images)
        listed = subprocess.run([*ctr, "images", "ls", "-q"], capture_output=True, text=True, check=False).stdout
        if missing := [i for i in images if i not in listed.split()]:
            raise SeedError(f"ctr import left out {', '.join(missing)}")
    except SeedError:
        _stop(containerd)
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        _stop(containerd)
        shutil.rmtree(RUN_DIR, ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)  # one left without its root by hand
    os.rename(partial, final)


def _ctr(ctr: list[str], *args: str) -> None:
    done = subprocess.run([*ctr, *args], capture_output=True, text=True, timeout=IMPORT_SECONDS, check=False)
    if done.returncode != 0:
        raise SeedError(f"ctr {' '.join(args[:2])} failed: {done.stderr.strip()[-400:]}")


def _wait_serving(ctr: list[str], containerd: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while subprocess.run([*ctr, "version"], capture_output=True, check=False).returncode != 0:
        if containerd.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise SeedError(f"the seed's containerd did not serve: {' | '.join(tail)}")
        time.sleep(0.2)


def _import(ctr: list[str], images: Sequence[str]) -> None:
    """docker save | ctr import, unpacked: what deploy/install.sh does for a node (DTR_IMPORT=ctr)."""
    save = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert save.stdout is not None
    load = subprocess.run([*ctr, "images", "import", "--no-unpack=false", "-"], stdin=save.stdout,
                          capture_output=True, text=True, timeout=IMPORT_SECONDS, check=False)  # fmt: skip
    save.stdout.close()
    saved = save.wait(timeout=60)
    if saved != 0 or load.returncode != 0:
        said = (save.stderr.read().decode(errors="replace") if save.stderr else "") + load.stderr
        raise SeedError(f"docker save | ctr import failed ({saved}, {load.returncode}): {said.strip()[-400:]}")


def _stop(containerd: subprocess.Popen[bytes]) -> None:
    if containerd.poll() is None:
        containerd.send_signal(signal.SIGTERM)
        try:
            containerd.wait(timeout=30)
        except subprocess.TimeoutExpired:
            containerd.kill()
            containerd.wait()
