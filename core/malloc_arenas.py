"""Fewer glibc malloc arenas in the processes that run for days (`citewise serve`, `worker`),
and the freed memory of an ingest run handed back when it ends (``release_free_memory``).

glibc gives each new thread that allocates an arena of its own, up to eight per core, and
memory freed in one arena is reused only by the threads that share it. A server runs some
forty threads (uvicorn's, the request thread pool, torch's, an ingest run's), and in the soak
of Dec 7 (forced ingests inside the server beside 16 clients) 1.9 GB of its 2.6 GB resident
memory was such arenas, each ~64 MiB and nearly all resident, and it grew by ~10 MiB a minute.
Capping them is the usual cure for Python servers (the Python and glibc documentation call the
knob ``MALLOC_ARENA_MAX``): freed memory is found again by the next thread that needs it, so
the footprint follows what is in use rather than the history of which thread freed what.

``MALLOC_ARENA_MAX``, when the operator sets it, is glibc's own and wins (glibc read it at
start): nothing is changed then. Elsewhere than glibc (musl, macOS) there is nothing to do.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_ARENA_MAX = -8  # <malloc.h>
# Two: the main arena and one more. Python's interpreter lock keeps most threads from
# allocating at once anyway, so they rarely wait on each other for an arena.
DEFAULT_ARENAS = 2


def limit_malloc_arenas(arenas: int = DEFAULT_ARENAS) -> int | None:
    """Let glibc make at most ``arenas`` arenas from now on (call it before starting threads);
    the cap set, or None where nothing was changed (not glibc, or ``MALLOC_ARENA_MAX`` set)."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return None
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # musl and others: another allocator
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return arenas if mallopt(M_ARENA_MAX, arenas) == 1 else None


def release_free_memory() -> bool | None:
    """Hand the pages that malloc holds free back to the system (glibc's ``malloc_trim``);
    whether any were. Called when an ingest run ends: a run's peak (its batches of chunks
    and vectors, the engine's compaction) is freed when it ends, but glibc keeps freed pages
    that lie below memory still in use: in a soak the server's heap stepped up ~65 MiB at a
    run's end and stayed (bench/results/soak-heap-split.md); with the trim it fell to 1,119
    MiB from 1,624 (soak-trim.md). It holds malloc's lock while it works: the caller logs how
    long. Elsewhere than glibc (musl, macOS) there is no such call: None, nothing tried."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    return bool(trim(0))
