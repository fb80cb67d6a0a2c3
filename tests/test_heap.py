"""sqlenv.train.heap: freed heap memory goes back to the OS (both trainers call it every step: test_sft and
test_grpo check that their trainers carry the callback)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sqlenv.train import heap

# In a child process: the mallopt settings would otherwise stay with the test process.
PROBE = textwrap.dedent(
    """
    import ctypes, sys
    from sqlenv.train import heap
    def rss_mb():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallopt(-3, 64 * 2**20)  # M_MMAP_THRESHOLD: 1 MB chunks from the heap, as a training step's come
    libc.mallopt(-1, 2**30)  # M_TRIM_THRESHOLD: free() itself never shrinks the heap's top
    chunks = [libc.malloc(2**20) for _ in range(150)]
    for c in chunks:
        ctypes.memset(c, 1, 2**20)  # resident
    keep = libc.malloc(2**20)  # above the chunks (no free 1 MB hole below): pins the heap's top
    for c in chunks:
        libc.free(c)
    before, resident = rss_mb(), heap.resident_bytes()
    mode = sys.argv[1]
    if mode == "trim":
        trimmed = heap.trim()
    elif mode.startswith("trimmer="):
        trimmer = heap.Trimmer(int(mode.split("=")[1]))
        trimmed = trimmer()
        assert trimmer.stats()["calls"] == 1 and trimmer.stats()["trims"] == int(trimmed), trimmer.stats()
    else:
        trimmed = False
    print(before - rss_mb(), trimmed, resident)
    """
)


def _released(mode: str) -> tuple[float, str, int]:
    """(MB the probe's RSS fell by, what the call returned, heap.resident_bytes() before it)."""
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout
    mb, trimmed, resident = out.split()
    return float(mb), trimmed, int(resident)


@pytest.mark.skipif(heap._malloc_trim() is None or not sys.platform.startswith("linux"), reason="glibc, /proc")
def test_trim_returns_free_heap_pages_below_a_live_chunk():
    mb, trimmed, _ = _released("trim")
    assert mb > 100 and trimmed == "True"
    assert _released("none")[0] < 10  # without trim() glibc keeps them resident: the test can fail


@pytest.mark.skipif(heap._malloc_trim() is None or not sys.platform.startswith("linux"), reason="glibc, /proc")
def test_the_trimmer_trims_only_above_its_resident_size():
    """The evaluation stage's after_batch: 150 MB freed below a live chunk stay resident while the process
    holds less than 1 GiB (the next batch reuses them without page faults) and go back above 100 MB."""
    mb, trimmed, resident = _released(f"trimmer={2**30}")
    assert 150 * 2**20 <= resident < 2**30  # the freed chunks are still resident
    assert mb < 10 and trimmed == "False"
    mb, trimmed, _ = _released(f"trimmer={100 * 2**20}")
    assert mb > 100 and trimmed == "True"


def test_a_trimmer_threshold_is_never_negative():
    with pytest.raises(ValueError, match="above_bytes"):
        heap.Trimmer(-1)
