"""The common frame of a stage entry point: clear errors and a non-zero exit.

A stage fails on bad input (a mistyped params key, a missing folder, a malformed file)
with one readable line naming the culprit instead of a traceback, and exit status 1; its
outputs are written atomically elsewhere, so a failed stage leaves nothing half-written.
Unexpected exceptions (bugs) keep their traceback.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from pipeline.machine import set_runtime
from pipeline.params import ParamsError

# Errors that mean "the input is wrong", as opposed to "the code is wrong".
INPUT_ERRORS: tuple[type[BaseException], ...] = (ParamsError, FileNotFoundError, NotADirectoryError, ValueError)


def run_stage(name: str, main: Callable[[], None]) -> None:
    logging.basicConfig(level=logging.INFO, format=f"[{name}] %(message)s")
    set_runtime()  # threads and oneDNN's cache, before anything computes (a dtype measurement, a model load)
    try:
        main()
    except INPUT_ERRORS as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        sys.exit(1)
