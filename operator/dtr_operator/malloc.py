"""glibc's allocator, told to keep less for a long-lived operator whose memory comes in bursts
(docs/performance.md#operator-memory). A no-op where the C library is not glibc.

- At most MAX_ARENAS malloc arenas: by default glibc gives each thread of kopf's pool its own, up to 8 per core, and
  memory freed in one is not reused by the others.
- malloc_trim, called every TRIM_SECONDS: memory freed after a burst (the bodies of large runs are strings and
  buffers above Python's small-object allocator, so malloc's) goes back to the system instead of staying in the
  arenas' free lists (40 to 100 MB after a burst of 1000 runs of the largest spec, measured with mallinfo2).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)
MAX_ARENAS = 2
TRIM_SECONDS = 10.0


@cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt, libc.malloc_trim  # noqa: B018  (glibc has both; musl has neither)
    except (OSError, AttributeError, TypeError):
        return None
    return libc


def limit_arenas(arenas: int = MAX_ARENAS) -> bool:
    """Before the thread pool starts: threads made afterwards share `arenas` arenas. False where not glibc."""
    libc = _glibc()
    return libc is not None and libc.mallopt(M_ARENA_MAX, arenas) == 1


def trim() -> bool:
    """Free memory at the top of and inside every arena back to the system; whether any was."""
    libc = _glibc()
    return libc is not None and libc.malloc_trim(0) == 1
