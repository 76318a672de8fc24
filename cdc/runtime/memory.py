"""The process's allocator: few malloc arenas, and freed memory handed back to the system.

glibc's malloc gives a thread that finds the heap busy an arena of its own, up to eight per
core, and an arena keeps what its threads freed for their next allocations. A pipeline runs a
thread per task (the source, each sink, the control watcher, the heartbeat, compaction) beside
DuckDB's and Tantivy's own, and each sink's batch passes through several of them: every arena
grows to its thread's largest batch and stays there. Two arenas (``MALLOC_ARENA_MAX=2``, the
value the JVM and Redis deployments settle on) keep the allocator's speed on two cores while
freed memory is found again by the next batch whatever thread it is on; ``malloc_trim`` hands
freed pages of every arena back to the system while the pipeline is idle.

An environment that sets ``MALLOC_ARENA_MAX`` itself keeps its value; other C libraries (musl)
have neither call, and then nothing happens.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable
from typing import Any

ARENA_MAX = 2
_M_ARENA_MAX = -8  # glibc's malloc.h
TRIM_INTERVAL_S = 5.0


def _libc() -> Any | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not hasattr(libc, "mallopt") or not hasattr(libc, "malloc_trim"):
        return None  # not glibc
    return libc


_LIBC = _libc()


def limit_arenas(arenas: int = ARENA_MAX) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` for the threads created from now on (call it
    before the tasks start); False where the C library has no such setting or the
    environment's ``MALLOC_ARENA_MAX`` decides."""
    if _LIBC is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(_LIBC.mallopt(_M_ARENA_MAX, arenas))


def trim() -> bool:
    """Hand the free pages of every arena back to the system; True if some were."""
    return _LIBC is not None and bool(_LIBC.malloc_trim(0))


def trim_when_idle(
    stop: threading.Event,
    progress: Callable[[], int],
    interval_s: float = TRIM_INTERVAL_S,
    release: Callable[[], object] = trim,
) -> None:
    """Trim once each time the pipeline goes idle, until ``stop``.

    Idle: ``progress`` (a count of records appended and applied) did not move for
    ``interval_s``. After a large transaction the batches' memory is free but the arenas still
    hold it; while records flow, the next batches reuse it, and handing it back would only make
    the kernel fault the pages in again.
    """
    last, trimmed = progress(), False
    while not stop.wait(interval_s):
        now = progress()
        if now != last:
            last, trimmed = now, False
        elif not trimmed:
            release()
            trimmed = True
