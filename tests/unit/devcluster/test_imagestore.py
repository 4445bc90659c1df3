"""The images' seed for nodes' containerd (devcluster/imagestore.py): its key, and the copy a node starts from."""

from __future__ import annotations

import json
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


class FakeMake:
    """imagestore._make as it acts on the directories (the seed moved, or a new one), and what it was asked."""

    def __init__(self, fail_from_a_seed: bool = False) -> None:
        self.calls: list[tuple[str, list[str], list[str] | None]] = []
        self.fail_from_a_seed = fail_from_a_seed

    def __call__(self, final: Path, bin_dir: Path, images, base) -> None:
        self.calls.append((final.name, list(images), None if base is None else base[1]))
        if base is not None:
            if self.fail_from_a_seed:
                shutil.rmtree(base[0])  # as _make leaves it: the moved seed removed with the partial one
                raise imagestore.SeedError("ctr images rm failed")
            base[0].rename(final)
            (final / imagestore.HELD).unlink()
        else:
            (final / "root").mkdir(parents=True)


def test_a_seed_is_made_once_per_key_and_a_new_key_is_made_from_the_last_one(tmp_path: Path, monkeypatch) -> None:
    make = FakeMake()
    monkeypatch.setattr(imagestore, "_make", make)
    said: list[str] = []

    def seeded(ids: str, version: str = "v2.4.2") -> Path:
        return imagestore.seeded(tmp_path, tmp_path / "bin", ids, ["op", "trainer"], version, said.append)

    first = seeded("sha256:a\nsha256:t\n")
    assert seeded("sha256:a\nsha256:t\n") == first and make.calls == [(first.parent.name, ["op", "trainer"], None)]
    # The operator rebuilt: the last seed becomes the new one, the operator alone removed and imported again.
    second = seeded("sha256:b\nsha256:t\n")
    assert second != first and second.is_dir() and not first.parent.exists()
    assert make.calls[1] == (second.parent.name, ["op"], ["op"])
    assert json.loads((second.parent / imagestore.HELD).read_text()) == {
        "containerd": "v2.4.2", "images": {"op": "sha256:b", "trainer": "sha256:t"}}  # fmt: skip
    # Another containerd: its store's format may differ, so nothing is taken from the last seed.
    third = seeded("sha256:b\nsha256:t\n", "v2.5.0")
    assert make.calls[2] == (third.parent.name, ["op", "trainer"], None) and not second.parent.exists()
    assert len(said) == 3 and all(line.startswith("images seeded in ") for line in said), said


def test_a_seed_that_cannot_be_made_from_the_last_one_is_made_from_nothing(tmp_path: Path, monkeypatch) -> None:
    make = FakeMake(fail_from_a_seed=True)
    monkeypatch.setattr(imagestore, "_make", make)
    said: list[str] = []
    first = imagestore.seeded(tmp_path, tmp_path / "bin", "sha256:a\nsha256:t\n", ["op", "trainer"], "v2.4.2",
                              said.append)  # fmt: skip
    second = imagestore.seeded(tmp_path, tmp_path / "bin", "sha256:a\nsha256:u\n", ["op", "trainer"], "v2.4.2",
                               said.append)  # fmt: skip
    assert [c[1:] for c in make.calls] == [(["op", "trainer"], None), (["trainer"], ["trainer"]),
                                           (["op", "trainer"], None)]  # fmt: skip
    assert second.is_dir() and not first.parent.exists()
    assert said[1] == "images not seeded from the last seed (ctr images rm failed): all imported", said


def test_a_seed_made_before_seeds_said_what_they_hold_is_told_it_and_never_a_base_before(tmp_path: Path) -> None:
    old = tmp_path / imagestore.SEEDS / "0123456789abcdef" / "root"
    old.mkdir(parents=True)
    assert imagestore.last_seed(tmp_path / imagestore.SEEDS, "other", "v2.4.2") is None
    key = imagestore.seed_key("sha256:a\nsha256:t\n", "v2.4.2")
    (tmp_path / imagestore.SEEDS / key / "root").mkdir(parents=True)
    imagestore.seeded(tmp_path, tmp_path / "bin", "sha256:a\nsha256:t\n", ["op", "trainer"], "v2.4.2", print)
    assert imagestore.last_seed(tmp_path / imagestore.SEEDS, "other", "v2.4.2") == (
        tmp_path / imagestore.SEEDS / key, {"op": "sha256:a", "trainer": "sha256:t"})  # fmt: skip


def test_the_images_to_import_are_those_whose_id_changed_or_that_the_seed_lacks() -> None:
    held = {"op": "sha256:a", "trainer": "sha256:t"}
    assert imagestore.changed_images(held, held) == []
    assert imagestore.changed_images(held, {"op": "sha256:b", "trainer": "sha256:t"}) == ["op"]
    assert imagestore.changed_images({"op": "sha256:a"}, held) == ["trainer"]
