"""Which of several data-parallel training processes this one is.

`accelerate launch` (and torchrun under it) starts each process with RANK, LOCAL_RANK and WORLD_SIZE
in its environment; a plain `python -m stages.sft` has none of them and is the one, main process. The
variables are read directly (not through `accelerate.PartialState`), so they answer before the
process group exists: the batch plan needs the world size before the trainer is built.

The rule the stages follow: every process trains (the collectives need them all); only the main
process writes outputs, checkpoint markers and MLflow records.
"""

from __future__ import annotations

import os


def world_size() -> int:
    """Number of training processes (1 outside a launched run)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    return rank() == 0


def launched() -> bool:
    """True inside a process started by `accelerate launch`/torchrun (even with one process)."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def wait_for_everyone() -> None:
    """A barrier across the training processes (nothing to wait for in a single process)."""
    if world_size() > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()
