"""malloc.py: glibc's allocator told to keep less (this machine and the operator image are glibc)."""

from __future__ import annotations

from dtr_operator import malloc


def test_the_arenas_are_limited_and_free_memory_is_trimmed_on_glibc():
    assert malloc.limit_arenas(malloc.MAX_ARENAS)
    assert malloc._glibc() is not None, "trim() reaches malloc_trim (whether it frees anything depends on the heap)"
    malloc.trim()


def test_without_glibc_nothing_is_called(monkeypatch):
    monkeypatch.setattr(malloc, "_glibc", lambda: None)
    assert not malloc.limit_arenas() and not malloc.trim()
