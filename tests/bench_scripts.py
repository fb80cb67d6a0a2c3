"""Load a benchmark script of bench/ as a module, as `python bench/<name>.py` would run it.

bench/ is not a package: a script there imports its neighbours by name (bench_sft and bench_rollout take
helpers from bench_grpo), so bench/ goes on sys.path first, as it is when the script runs.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
