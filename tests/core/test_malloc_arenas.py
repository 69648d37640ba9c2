"""The arena cap is real: threads allocating at once in a fresh interpreter get an arena each
without it and share the main one and one more with it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

# Sixteen threads start allocating together and keep what they allocated; then the process
# counts glibc's arenas other than the main one: their heaps are anonymous read-write mappings
# aligned to 64 MiB (HEAP_MAX_SIZE on 64-bit glibc).
SCRIPT = """
import sys, threading
from citewise.malloc_arenas import limit_malloc_arenas
cap = limit_malloc_arenas(2) if sys.argv[1] == "cap" else None
start, kept = threading.Barrier(16), []
def work():
    start.wait()
    kept.append([bytearray(64 * 1024) for _ in range(8)])
threads = [threading.Thread(target=work) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
arenas = 0
for line in open("/proc/self/maps"):
    fields = line.split()
    low = int(fields[0].split("-")[0], 16)
    if len(fields) == 5 and fields[1] == "rw-p" and low % (64 << 20) == 0:
        arenas += 1
print(cap, arenas)
"""


def _run(mode: str) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the arenas are glibc's")
def test_threads_share_two_arenas_with_the_cap_and_not_without():
    cap, capped = _run("cap")
    _, free = _run("free")
    assert cap == "2"
    assert capped <= 1, f"{capped} arenas besides the main one with the cap of 2"
    assert free > capped + 2, f"without the cap {free} arenas, with it {capped}"


def test_an_operators_malloc_arena_max_wins(monkeypatch):
    from citewise.malloc_arenas import limit_malloc_arenas

    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas(2) is None


# Many small blocks from malloc's heap, freed: their pages stay resident (glibc gives back only
# what lies at the heap's top, above a threshold) until they are handed back.
TRIM_SCRIPT = """
import ctypes
from citewise.malloc_arenas import release_free_memory
def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) // 1024
blocks = [ctypes.create_string_buffer(4096) for _ in range(60000)]
for b in blocks: ctypes.memset(b, 1, 4096)
last = blocks[-1]
del blocks
before = anon()
released = release_free_memory()
print(before, anon(), released)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                    reason="malloc_trim is glibc's: another C library or allocator keeps its own")
def test_freed_memory_is_handed_back():
    out = subprocess.run([sys.executable, "-c", TRIM_SCRIPT], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    before, after, released = int(out[0]), int(out[1]), out[2]
    assert released == "True"
    # ~234 MiB were freed; most of it leaves the process.
    assert before - after > 150, f"RssAnon {before} MiB before the trim, {after} after"
