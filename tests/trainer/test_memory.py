"""--retain-memory: glibc keeps a freed multi-MB block for reuse instead of unmapping or trimming it.

Each case runs in a fresh interpreter (mallopt settings are process-wide and one-way) and reads
glibc's own accounting (mallinfo2): hblkhd = bytes in mmapped blocks, arena = bytes of heap.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = r"""
import ctypes, json, sys
from dtr_trainer import memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
applied = memory.retain_freed_memory() if sys.argv[1] == "retain" else None
size = 8 << 20  # like one step's activation tensor
mapped_before = libc.mallinfo2().hblkhd  # the interpreter's own blocks
block = libc.malloc(size)
ctypes.memset(block, 1, size)  # touch the pages
mapped = libc.mallinfo2().hblkhd - mapped_before
libc.free(block)
arena_after_free = libc.mallinfo2().arena
print(json.dumps({"applied": applied, "mapped": mapped, "arena_after_free": arena_after_free}))
"""


def probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_retain_serves_large_blocks_from_the_heap_and_keeps_them():
    default, retained = probe("default"), probe("retain")
    assert retained["applied"] is True
    # glibc's default: the 8 MB block is an mmap of its own, unmapped again by free.
    assert default["mapped"] >= 8 << 20
    # Retained: it comes from the heap, and the freed 8 MB stay there for the next step.
    assert retained["mapped"] == 0
    assert retained["arena_after_free"] >= 8 << 20
