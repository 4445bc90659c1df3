"""deploy/images/slim_trainer.py, what the trainer image leaves out: a stripped file replaces the original only when
everything the dynamic loader reads is unchanged; the tests and build inputs it removes are those of the scientific
packages and nothing beside them; the distributions it removes are in the trainer's locks, and Dockerfile.trainer
runs both of its steps. The image itself: tests/images/test_images.py."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from support.repo import REPO, slim_trainer

slim = slim_trainer()


def _segments(path: Path) -> list[tuple[int, int]]:
    """(file offset, file size) of each PT_LOAD segment."""
    data = path.read_bytes()
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    rows = [struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize) for i in range(phnum)]
    return [(offset, filesz) for kind, _, offset, _, _, filesz in rows if kind == 1]


@pytest.fixture
def elf(tmp_path: Path) -> Path:
    """A copy of this interpreter's executable: a 64-bit ELF file whose section header table follows its segments."""
    path = tmp_path / "lib.so"
    shutil.copyfile(os.path.realpath(sys.executable), path)
    path.chmod(0o755)
    assert path.read_bytes()[:5] == b"\x7fELF\x02"
    return path


def _patch(path: Path, offset: int, value: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[offset:offset + len(value)] = value
    path.write_bytes(bytes(data))


def test_the_digest_ignores_the_section_table_and_sees_every_loaded_byte(elf: Path, tmp_path: Path) -> None:
    before = slim.loaded_digest(elf)
    other = tmp_path / "other.so"
    shutil.copyfile(elf, other)
    _patch(other, 0x28, struct.pack("<Q", 12345))  # e_shoff
    _patch(other, 0x3C, struct.pack("<HH", 3, 2))  # e_shnum, e_shstrndx
    assert slim.loaded_digest(other) == before
    offset, size = max(_segments(elf), key=lambda s: s[1])
    _patch(other, offset + size // 2, bytes([other.read_bytes()[offset + size // 2] ^ 0xFF]))
    assert slim.loaded_digest(other) != before


def _fake_strip(monkeypatch: pytest.MonkeyPatch, change) -> None:
    """`strip -o OUT IN` that writes change(bytes of IN) to OUT, or fails when change is None."""

    def run(cmd: list[str], check: bool) -> subprocess.CompletedProcess:
        assert cmd[:3] == ["strip", "--strip-unneeded", "-o"], cmd
        if change is None:
            return subprocess.CompletedProcess(cmd, 1)
        Path(cmd[3]).write_bytes(change(Path(cmd[4]).read_bytes()))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(slim.subprocess, "run", run)


def test_a_strip_that_only_drops_what_follows_the_segments_replaces_the_file(
    elf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    end = max(offset + size for offset, size in _segments(elf))
    original = elf.read_bytes()
    assert len(original) > end  # the section header table and the non-loaded sections lie beyond
    _fake_strip(monkeypatch, lambda data: data[:end])
    assert slim.strip(elf) == len(original) - end
    assert elf.read_bytes() == original[:end]
    assert elf.stat().st_mode & 0o777 == 0o755  # the original's mode, not the temporary file's
    assert sorted(p.name for p in elf.parent.iterdir()) == ["lib.so"]


@pytest.mark.parametrize("how", ["moves a loaded byte", "fails"])
def test_the_original_stays_when_strip_changes_what_the_loader_reads_or_fails(
    elf: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # what strip does to a library auditwheel's patchelf rewrote: a PT_LOAD segment that holds patchelf's
    # tables ends up shorter (sklearn/tree/_tree.so: 0x1258 bytes -> 0x78)
    offset, size = _segments(elf)[-1]

    def shorten(data: bytes) -> bytes:
        return data[:offset + size - 1] + bytes([data[offset + size - 1] ^ 0xFF]) + data[offset + size:]

    _fake_strip(monkeypatch, shorten if how == "moves a loaded byte" else None)
    original = elf.read_bytes()
    assert slim.strip(elf) == -1
    assert elf.read_bytes() == original
    assert sorted(p.name for p in elf.parent.iterdir()) == ["lib.so"]


def test_tests_and_build_inputs_of_the_scientific_packages_only(tmp_path: Path) -> None:
    files = [
        "numpy/core/tests/test_a.py", "numpy/core/tests/data/x.npy", "numpy/testing/utils.py",
        "scipy/linalg/tests/t.py", "scipy/linalg/_decomp.pyx", "scipy/linalg/cython_blas.pxd",
        "sklearn/tree/_tree.pxd", "sklearn/datasets/data/digits.csv.gz", "numpy/core/include/numpy/a.h",
        "numpy/core/lib/libnpymath.a", "h5py/tests/test_file.py", "h5py/_conv.pxd",
        "tensorflow/core/x.h", "cffi/parse_c_type.h", "keras/tests/model.py",
    ]  # fmt: skip
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert sorted(str(p.relative_to(tmp_path)) for p in slim.tests(tmp_path)) == [
        "h5py/tests", "numpy/core/tests", "scipy/linalg/tests",
    ]  # fmt: skip
    assert sorted(str(p.relative_to(tmp_path)) for p in slim.build_inputs(tmp_path)) == [
        "numpy/core/include/numpy/a.h", "numpy/core/lib/libnpymath.a",
        "scipy/linalg/_decomp.pyx", "scipy/linalg/cython_blas.pxd", "sklearn/tree/_tree.pxd",
    ]  # fmt: skip


def test_the_removed_distributions_are_in_every_trainer_lock_and_the_dockerfile_runs_both_steps() -> None:
    for lock in (REPO / "trainer" / "locks").glob("linux-*.lock"):
        pinned = {line.split("==")[0] for line in lock.read_text().splitlines() if "==" in line}
        assert set(slim.UNUSED_DISTRIBUTIONS) <= pinned, lock.name
    dockerfile = (REPO / "Dockerfile.trainer").read_text()
    install = dockerfile.index('--require-hashes --no-deps -r "trainer/locks/linux-$(uname -m).lock"')
    files = dockerfile.index("/opt/dtr/bin/python deploy/images/slim_trainer.py files")
    check = dockerfile.index("/opt/dtr/bin/pip check")
    distributions = dockerfile.index("/opt/dtr/bin/python deploy/images/slim_trainer.py distributions")
    assert install < files < check < distributions
    assert "!deploy/images/slim_trainer.py" in (REPO / ".dockerignore").read_text().splitlines()
