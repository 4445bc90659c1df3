"""What the trainer image leaves out of its virtualenv (docs/images.md#the-trainer-images-size).

    python deploy/images/slim_trainer.py files [SITE_PACKAGES]           parts of packages, after the lock's install
    python deploy/images/slim_trainer.py distributions [SITE_PACKAGES]   whole packages, after `pip check`

Dockerfile.trainer's build stage runs both with the virtualenv's Python (3.9; SITE_PACKAGES defaults to its
own), so the final stage never copies these bytes; each prints the bytes every part freed. Nothing here is
imported or loaded by the trainer, `dtr tensorboard`'s server, or TensorFlow when it imports:

files
  tensorflow/include   TensorFlow's C++ headers, for compiling custom ops (tf.sysconfig.get_include())
  tfcompile            XLA's ahead-of-time compiler and its runtime sources: only `saved_model_cli aot_compile_cpu`
                       loads them (and says "you must build TensorFlow with XLA AOT" without them)
  tests                the test suites of numpy, scipy, scikit-learn and h5py (`numpy.test()`, ...)
  build inputs         Cython sources and declarations, C and Fortran sources, C headers and static libraries of
                       numpy, scipy and scikit-learn: what compiling against them reads
  tensorflow-io ops    tensorflow-io's op libraries (its datasets, audio, image, Kafka, ffmpeg...): loaded only when
                       one of its ops runs, and the trainer runs none; what it is installed for, its file systems
                       (s3://), is libtensorflow_io_plugins.so, which `import tensorflow` loads and which stays
  symbol tables        `strip --strip-unneeded` on every ELF file: the static symbol table and the debug sections
                       go, the dynamic symbols the loader resolves stay. A stripped file replaces the original only
                       if everything the loader reads is the same byte for byte (the ELF header but its section-
                       table fields, the program headers, the file bytes of every segment); else it stays as it was

distributions (pip uninstall; `pip check` has passed before, with them)
  libclang                      Python bindings to libclang: a dependency of tensorflow's own build scripts;
                                no installed module imports `clang`
  tensorflow-io-gcs-filesystem  TensorFlow imports it only with TF_USE_MODULAR_FILESYSTEM=1; gs:// paths are
                                TensorFlow's built-in file system otherwise
  tensorboard-plugin-wit        TensorBoard's What-If Tool, found only through pkg_resources entry points, which
                                the image has none of (dtr_trainer.board)
"""

from __future__ import annotations

import collections
import hashlib
import importlib.metadata
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

SCIENTIFIC = ("numpy", "scipy", "sklearn")
BUILD_INPUTS = (".pyx", ".pxd", ".pxi", ".c", ".cc", ".cpp", ".h", ".f", ".f90", ".a")
TFCOMPILE = ("tensorflow/python/_pywrap_tfcompile.so", "tensorflow/xla_aot_runtime_src")
TFIO_OPS = tuple(f"tensorflow_io/python/ops/libtensorflow_io{name}.so"
                 for name in ("", "_golang", "_ffmpeg_2.8", "_ffmpeg_3.4", "_ffmpeg_4.2"))  # fmt: skip
UNUSED_DISTRIBUTIONS = ("libclang", "tensorflow-io-gcs-filesystem", "tensorboard-plugin-wit")
ELF_MAGIC = b"\x7fELF"
# ELF64 header fields that only describe the section header table (e_shoff; e_shentsize, e_shnum, e_shstrndx):
# strip rewrites them and the loader reads none of them.
SECTION_TABLE_FIELDS = ((0x28, 0x30), (0x3A, 0x40))


def size(path: Path) -> int:
    if path.is_symlink() or not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def remove(paths: list[Path]) -> int:
    """Remove files and directories; the bytes they held."""
    freed = 0
    for path in paths:
        freed += size(path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    return freed


def tests(site: Path) -> list[Path]:
    dirs = [d for pkg in (*SCIENTIFIC, "h5py") for d in (site / pkg).rglob("tests") if d.is_dir()]
    return [d for d in dirs if not any(parent in dirs for parent in d.parents)]


def build_inputs(site: Path) -> list[Path]:
    return [p for pkg in SCIENTIFIC for p in (site / pkg).rglob("*") if p.is_file() and p.suffix in BUILD_INPUTS]


def distribution_files(site: Path, name: str) -> list[Path]:
    """The files a distribution installed (its RECORD), [] when it is not installed."""
    try:
        dist = next(importlib.metadata.distributions(name=name, path=[str(site)]))
    except StopIteration:
        return []
    return [Path(dist.locate_file(f)) for f in dist.files or []]


def elf_files(site: Path, skip: set[Path]) -> Iterator[Path]:
    for root, _, names in os.walk(site):
        for name in names:
            path = Path(root, name)
            if path in skip or path.is_symlink() or not path.is_file():
                continue
            with path.open("rb") as f:
                if f.read(4) == ELF_MAGIC:
                    yield path


def masked(start: bytes) -> bytes:
    """The first bytes of an ELF file, its section-table fields zeroed."""
    out = bytearray(start)
    for begin, end in SECTION_TABLE_FIELDS:
        out[begin:end] = bytes(len(out[begin:end]))
    return bytes(out)


def loaded_digest(path: Path) -> str:
    """A digest of what the dynamic loader reads: the ELF header (but its section-table fields), the program
    headers, and the file bytes of every segment they describe."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        header = f.read(64)
        if header[4] != 2:  # ELFCLASS64 only: a 32-bit file would not load in this image anyway
            raise ValueError(f"{path}: not a 64-bit ELF file")
        digest.update(masked(header))
        phoff, = struct.unpack_from("<Q", header, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        digest.update(table)
        for i in range(phnum):
            _, _, offset, _, _, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
            f.seek(offset)
            left = filesz
            while left:
                at = f.tell()
                chunk = f.read(min(left, 1 << 24))
                if not chunk:
                    raise ValueError(f"{path}: a segment runs past the end of the file")
                digest.update(masked(chunk) if at == 0 else chunk)
                left -= len(chunk)
    return digest.hexdigest()


def strip(path: Path) -> int:
    """Strip PATH if what the loader reads stays the same: the bytes freed, or -1 when the original stays."""
    stripped = path.with_name(path.name + ".stripped")
    done = subprocess.run(["strip", "--strip-unneeded", "-o", str(stripped), str(path)], check=False)
    if done.returncode != 0 or loaded_digest(stripped) != loaded_digest(path):
        stripped.unlink(missing_ok=True)
        return -1
    freed = path.stat().st_size - stripped.stat().st_size
    shutil.copymode(path, stripped)
    os.replace(stripped, path)
    return freed


def strip_all(site: Path, skip: set[Path]) -> tuple[int, int, list[Path]]:
    """(bytes freed, files stripped, files kept as they were)."""
    freed, count, kept = 0, 0, []
    for path in list(elf_files(site, skip)):
        result = strip(path)
        if result < 0:
            kept.append(path)
        else:
            freed, count = freed + result, count + 1
    return freed, count, kept


def report(part: str, freed: int, detail: str = "") -> int:
    print(f"slim_trainer: {part:<30} {freed / 1e6:7.1f} MB{detail}", flush=True)
    return freed


def files(site: Path) -> int:
    total = report("tensorflow/include", remove([site / "tensorflow" / "include"]))
    total += report("tfcompile", remove([site / p for p in TFCOMPILE]))
    found = tests(site)
    total += report("tests", remove(found), f" ({len(found)} directories)")
    found = build_inputs(site)
    total += report("build inputs", remove(found), f" ({len(found)} files)")
    total += report("tensorflow-io ops", remove([site / p for p in TFIO_OPS]))
    # not the distributions that leave whole later: their bytes count there
    unused = {p for name in UNUSED_DISTRIBUTIONS for p in distribution_files(site, name)}
    freed, count, kept = strip_all(site, unused)
    by_package = collections.Counter(p.relative_to(site).parts[0] for p in kept)
    left = ", ".join(f"{pkg} {n}" for pkg, n in sorted(by_package.items()))
    total += report("symbol tables", freed, f" ({count} ELF files; as they were: {len(kept)} ({left or '-'}))")
    return total


def distributions(site: Path) -> int:
    total = 0
    for name in UNUSED_DISTRIBUTIONS:
        found = distribution_files(site, name)
        if not found:
            report(name, 0, " (not installed)")
            continue
        freed = sum(p.stat().st_size for p in found if p.is_file())
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet", name], check=True)
        total += report(name, freed)
    return total


def main(argv: list[str]) -> int:
    modes = {"files": files, "distributions": distributions}
    site = Path(argv[1] if len(argv) == 2 else sysconfig.get_paths()["purelib"])
    if len(argv) not in (1, 2) or argv[0] not in modes or not (site / "tensorflow").is_dir():
        print("usage: python slim_trainer.py files|distributions [SITE_PACKAGES (the one that holds tensorflow/)]",
              file=sys.stderr)
        return 2
    report(f"{argv[0]}: total", modes[argv[0]](site))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
