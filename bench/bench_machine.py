"""What every benchmark's JSON records about where it ran: the commit, the CPU, its threads and its load.

The CPU's model name alone does not say how fast a matmul is. Two machines of this project's kind both
report "AMD EPYC", family 25, model 17 (2 vCPUs under KVM), yet a bf16 matmul at the model's shapes ran
2.5x *faster* than fp32 on one, whose hypervisor passes AVX-512 BF16 through, and 66-69x *slower* on the
other, which sees AVX2 only (torch then computes bf16 without hardware support). `cpu_isa` records the
family, model and the matmul flags next to the name, so a figure can be told apart by the hardware that
made it.

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

# The flags that decide which matmul kernels a CPU can run: AVX2/FMA (fp32), AVX-512, bf16 in AVX-512
# and in AMX tiles, fp16 in AVX-512.
MATMUL_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def cpu_isa(cpuinfo: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Vendor, family, model and the `MATMUL_FLAGS` present, from the first processor listed in `cpuinfo`
    (/proc/cpuinfo's (key, value) lines, as `pipeline.machine` reads them for `cpu_model`; a VM's vCPUs are
    alike); empty where there is none (not Linux)."""
    fields: dict[str, str] = {}
    for key, value in machine._cpuinfo() if cpuinfo is None else cpuinfo:
        if key:  # a blank line between processors reads as ("", "")
            fields.setdefault(key, value)  # the first processor's value of each key
    if not fields:
        return {}
    flags = set(fields.get("flags", "").split())
    return {
        "vendor": fields.get("vendor_id"),
        "family": fields.get("cpu family"),
        "model": fields.get("model"),
        "matmul_flags": [flag for flag in MATMUL_FLAGS if flag in flags],
    }


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
        "cpu": cpu_isa(),
        "nproc": os.cpu_count(),
        "machine": facts,
        "python": platform.python_version(),
        "loadavg_before": os.getloadavg(),
    }
