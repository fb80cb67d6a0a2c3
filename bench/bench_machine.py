"""What every benchmark's JSON records about where it ran: the commit, the CPU, its threads and its load.

The CPU's model name alone does not say how fast a matmul is (two "AMD EPYC" family 25 model 17 machines
of this project's kind differ 170x in bf16 against fp32): `cpu` holds `pipeline.machine.cpu_isa`, the
family, model and matmul flags, as the stages record them, so a figure can be told apart by the hardware
that made it.

Light on purpose (no torch, no transformers): `bench_env` times microseconds and starts in a second.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a plain script from anywhere, package installed or not
    sys.path.insert(0, str(REPO))

from pipeline import machine  # noqa: E402

def git_commit() -> tuple[str, bool]:
    # pipeline.tracking.git_commit says the same, but importing it imports mlflow (seconds on this CPU).
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
        return sha, bool(status.strip())
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def record() -> dict[str, Any]:
    """The fields a benchmark's JSON opens with. Call it after importing torch, if the benchmark uses it:
    `machine.facts()` then records torch's threads too."""
    sha, dirty = git_commit()
    facts = machine.facts()
    return {
        "git_commit": sha,
        "git_dirty": dirty,
        "cpu_model": facts["system/cpu_model"],
        "cpu": machine.cpu_isa(machine.cpuinfo()),
        "nproc": os.cpu_count(),
        "machine": facts,
        "python": platform.python_version(),
        "loadavg_before": os.getloadavg(),
    }
