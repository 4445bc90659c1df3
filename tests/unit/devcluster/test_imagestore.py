"""The images' seed for nodes' containerd (devcluster/imagestore.py): its key, and the copy a node starts from."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from devcluster import imagestore


def test_the_key_changes_with_either_image_and_with_containerd_and_with_nothing_else() -> None:
    key = imagestore.seed_key("sha256:a\nsha256:b\n", "v2.4.2")
    assert key == imagestore.seed_key("sha256:a\nsha256:b\n", "v2.4.2")
    assert len({key, imagestore.seed_key("sha256:a\nsha256:c\n", "v2.4.2"),
                imagestore.seed_key("sha256:a\nsha256:b\n", "v2.5.0")}) == 3  # fmt: skip


def seed_tree(root: Path) -> None:
    blob = root / "io.containerd.content.v1.content" / "blobs" / "sha256" / "ab"
    layer = root / "io.containerd.snapshotter.v1.overlayfs" / "snapshots" / "1" / "fs" / "usr" / "lib"
    for d in (blob.parent, layer):
        d.mkdir(parents=True)
    blob.write_bytes(b"layer")
    (layer / "libtf.so").write_bytes(b"elf")
    (layer / "link").symlink_to("libtf.so")
    (layer.parent / "lib64").symlink_to("lib")  # a link to a directory stays a link (os.walk lists it as a dir)
    home = layer.parent / "home"
    home.mkdir()
    os.chown(home, 1000, 1000)  # the image's user's own directory keeps its owner
    home.chmod(0o1777)
    (root / "io.containerd.metadata.v1.bolt").mkdir()
    (root / "io.containerd.metadata.v1.bolt" / "meta.db").write_bytes(b"bolt")
    (root / "io.containerd.snapshotter.v1.overlayfs" / "metadata.db").write_bytes(b"bolt")
    (root / "io.containerd.grpc.v1.introspection").mkdir()
    (root / "io.containerd.grpc.v1.introspection" / "uuid").write_text("seed's own")


def test_a_planted_root_links_the_layers_copies_the_databases_and_leaves_out_the_uuid(tmp_path: Path) -> None:
    seed, node = tmp_path / "seed", tmp_path / "node" / "root"
    seed_tree(seed)
    node.parent.mkdir()
    imagestore.plant(seed, node)
    blob = Path("io.containerd.content.v1.content/blobs/sha256/ab")
    lib = Path("io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/usr/lib")
    for linked in (blob, lib / "libtf.so"):
        assert os.stat(node / linked).st_ino == os.stat(seed / linked).st_ino, linked
    assert os.readlink(node / lib / "link") == "libtf.so"
    assert os.readlink(node / lib.parent / "lib64") == "lib"
    home = os.stat(node / lib.parent / "home")
    assert (home.st_uid, home.st_gid, home.st_mode & 0o7777) == (1000, 1000, 0o1777)
    for db in ("io.containerd.metadata.v1.bolt/meta.db", "io.containerd.snapshotter.v1.overlayfs/metadata.db"):
        assert (node / db).read_bytes() == b"bolt"
        assert os.stat(node / db).st_ino != os.stat(seed / db).st_ino, f"{db}: containerd writes it in place"
    assert not (node / "io.containerd.grpc.v1.introspection").exists()
    # The node's containerd writing its database, and the node's root removed, leave the seed as it was.
    (node / "io.containerd.metadata.v1.bolt" / "meta.db").write_bytes(b"changed")
    shutil.rmtree(node)
    assert (seed / "io.containerd.metadata.v1.bolt" / "meta.db").read_bytes() == b"bolt"
    assert (seed / blob).read_bytes() == b"layer"


def test_a_seed_is_made_once_per_key_and_a_new_key_removes_the_old_seeds(tmp_path: Path, monkeypatch) -> None:
    made: list[str] = []

    def make(final: Path, bin_dir: Path, images) -> None:
        made.append(final.name)
        (final / "root").mkdir(parents=True)

    monkeypatch.setattr(imagestore, "_make", make)
    said: list[str] = []
    first = imagestore.seeded(tmp_path, tmp_path / "bin", "sha256:a\n", ["op", "trainer"], "v2.4.2", said.append)
    assert imagestore.seeded(tmp_path, tmp_path / "bin", "sha256:a\n", ["op", "trainer"], "v2.4.2", said.append) \
        == first and len(made) == 1  # fmt: skip
    second = imagestore.seeded(tmp_path, tmp_path / "bin", "sha256:b\n", ["op", "trainer"], "v2.4.2", said.append)
    assert second != first and second.is_dir() and not first.parent.exists() and len(made) == 2
    assert len(said) == 2 and all(line.startswith("images seeded in ") for line in said), said
