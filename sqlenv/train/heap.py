"""Hand the memory freed after each optimizer step back to the operating system (glibc).

A training step on the CPU allocates gigabytes of activations and frees them at its end. glibc keeps
freed chunks of its heap resident for reuse, and sequences of different lengths leave the heap more
fragmented step after step. Measured (2-core AMD EPYC, bf16): the default SFT run (48 steps) peaked at
9.8 GB, while a fresh process training on its 6 longest episodes peaks at 7.3 GB and holds 5-6 GB
between steps. `malloc_trim(0)` returns the free pages (inside the heap too, not only at its top) after
every step: between steps the process then holds ~2 GB, and a step's peak is that plus its own working
set: the default SFT run then peaked at 8.5 GB. The call takes ~0.3 s; with the page faults that follow
it, an SFT step took ~5 % longer in a same-session A/B (18.99 against 18.05 s over 6 steps). It changes
no number, only where freed memory lives (the SFT loss is 0.3493 either way).

Elsewhere than glibc (macOS, musl) `trim()` does nothing and returns False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def _malloc_trim() -> Any | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc: no malloc_trim
        return None


def trim() -> bool:
    """Return free heap memory to the OS; False where the C library has no `malloc_trim`."""
    function = _malloc_trim()
    if function is None:
        return False
    function(0)
    return True


def trim_callback() -> Any:
    """A TrainerCallback that calls `trim()` at the end of each optimizer step (SFT and GRPO trainers)."""
    from transformers import TrainerCallback

    class TrimHeap(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            trim()

    return TrimHeap()
