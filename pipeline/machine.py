"""What a stage's timings stand on: the CPU, its load and thread settings, and the stage's peak memory.

Timings on a 2-core machine mean little without these. torch on two cores slows down many times over
when anything else runs, and CPU models of one machine kind differ (bf16 is fast on some, slow on others).
`stage_run` first sets torch's threads from the physical cores (`set_threads`: two torch threads on one
core, or more threads than cores, are what makes torch collapse) and bounds oneDNN's primitive cache
(`bound_onednn_cache`; `set_runtime` does both), then logs `facts()` as tags. It logs
`load()` at the start and at the end, and `peak_rss_mb()` (and on a GPU the peak CUDA memory) at the end,
as metrics (`system/...`), so a slow run shows whether it was contended. `summary()` is the same record
for a stage's metrics.json (what the report's per-stage table and a reviewer read without MLflow).

The CPU's model name alone does not say how fast a matmul is. Two machines of this project's kind both
report "AMD EPYC", family 25, model 17 (2 vCPUs under KVM), yet a bf16 matmul at the model's shapes ran
2.5x *faster* than fp32 on one, whose hypervisor passes AVX-512 BF16 through, and 66-69x *slower* on the
other, which sees AVX2 only. `cpu_isa` (family, model and the matmul flags) goes beside the name.

What it does not do: watch memory over time: the peak is the kernel's high-water mark of this process
and of its waited-for children.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
from pathlib import Path
from typing import Any


def cpuinfo() -> list[tuple[str, str]]:
    """(key, value) lines of /proc/cpuinfo, keys lower-cased; empty where there is none (not Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    return [(k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in text.splitlines())]


def cpu_model(cpuinfo: list[tuple[str, str]]) -> str:
    """The CPU's model name as /proc/cpuinfo gives it, else what platform knows."""
    return next((v for k, v in cpuinfo if k == "model name"), None) or platform.processor() or platform.machine()


# The flags that decide which matmul kernels a CPU can run: AVX2/FMA (fp32), AVX-512, bf16 in AVX-512
# and in AMX tiles, fp16 in AVX-512.
MATMUL_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def cpu_isa(cpuinfo: list[tuple[str, str]]) -> dict[str, Any]:
    """Vendor, family, model and the `MATMUL_FLAGS` present, from the first processor listed in `cpuinfo`
    (a VM's vCPUs are alike); empty where there is none (not Linux)."""
    fields: dict[str, str] = {}
    for key, value in cpuinfo:
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


def physical_cores(cpuinfo: list[tuple[str, str]]) -> int | None:
    """Distinct (physical id, core id) pairs in /proc/cpuinfo; None where it does not list them."""
    cores, phys = set(), "0"
    for key, value in cpuinfo:
        if key == "physical id":
            phys = value
        elif key == "core id":
            cores.add((phys, value))
    return len(cores) or None


ONEDNN_CACHE_VARS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY")  # the name, then its old one
RUNTIME_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", *ONEDNN_CACHE_VARS)


def threads() -> dict[str, str]:
    """Thread and oneDNN settings as tags: the variables of `RUNTIME_VARS` that are set, and torch's thread count
    once torch is imported."""
    out = {f"system/{var}": os.environ[var] for var in RUNTIME_VARS if var in os.environ}
    torch = sys.modules.get("torch")  # never imported just to ask
    if torch is not None:
        out["system/torch_threads"] = str(torch.get_num_threads())
    return out


def thread_count(lines: list[tuple[str, str]] | None = None) -> int:
    """Threads per process: the physical cores (else the usable CPUs) shared among the data-parallel
    processes on this machine (LOCAL_WORLD_SIZE, set by `accelerate launch`), at least 1."""
    cores = physical_cores(cpuinfo() if lines is None else lines)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = min(cores or usable, usable)
    return max(1, cores // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


def set_threads() -> int:
    """Set OMP_NUM_THREADS (for torch not yet imported, and for child processes) and, if torch is imported,
    its intra-op threads, to `thread_count()`; an OMP_NUM_THREADS the user set wins. Returns the count."""
    if "OMP_NUM_THREADS" in os.environ and os.environ.get("SQLENV_THREADS_SET") != os.environ["OMP_NUM_THREADS"]:
        n = int(os.environ["OMP_NUM_THREADS"])
    else:
        n = thread_count()
        os.environ["OMP_NUM_THREADS"] = os.environ["SQLENV_THREADS_SET"] = str(n)
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


# oneDNN primitives (compiled kernels) kept for reuse: its own default is 1,024; see `bound_onednn_cache`.
ONEDNN_CACHE_CAPACITY = 64


def bound_onednn_cache(capacity: int = ONEDNN_CACHE_CAPACITY) -> int:
    """Set oneDNN's primitive cache to `capacity` entries (ONEDNN_PRIMITIVE_CACHE_CAPACITY) unless the user set it
    (`ONEDNN_CACHE_VARS`: that variable or its old name DNNL_...); returns the capacity in force.

    On a CPU torch runs bf16 matmuls through oneDNN, which compiles a kernel (a primitive) for every new shape
    and keeps up to 1,024 of them with their buffers. Every SFT sequence has its own length, so each micro-batch
    brings new shapes and the cache only grows. In one pair of full default SFT runs (48 steps, 2-core Intel
    Xeon, AMX-BF16, same session) a step's peak resident memory climbed from 4.5 GiB at the first step to 7.55
    GiB with the default cache, against 6.53 GiB with 64 entries, and training took 511 against 470 s (the
    same loss, 0.3492); `bench/bench_onednn_cache.py` repeats the comparison. 64 entries hold a step's shapes.

    oneDNN reads the variable once, when it creates its first primitive: call this before anything computes
    (`pipeline.stage.run_stage` does); later it changes nothing in this process, only in its children.
    """
    for var in ONEDNN_CACHE_VARS:
        if var in os.environ:
            return int(os.environ[var])
    os.environ[ONEDNN_CACHE_VARS[0]] = str(capacity)
    return capacity


def set_runtime() -> None:
    """`set_threads()` and `bound_onednn_cache()`: what a stage sets before it computes anything."""
    set_threads()
    bound_onednn_cache()


def facts() -> dict[str, str]:
    """Tags for a stage run: CPU model and ISA (`cpu_isa`, as "AuthenticAMD 25/17: avx2 fma"), logical CPUs,
    physical cores, CPUs this process may use, threads."""
    info = cpuinfo()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    isa = cpu_isa(info)
    return {
        "system/cpu_model": cpu_model(info),
        "system/cpu_isa": f"{isa['vendor']} {isa['family']}/{isa['model']}: {' '.join(isa['matmul_flags'])}" if isa else "",
        "system/logical_cpus": str(os.cpu_count()),
        "system/physical_cores": str(physical_cores(info)),
        "system/usable_cpus": str(usable),
        **threads(),
    }


def load(when: str) -> dict[str, float]:
    """The 1- and 5-minute load averages, as `system/load1_<when>` and `system/load5_<when>`."""
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return {}
    return {f"system/load1_{when}": one, f"system/load5_{when}": five}


def peak_rss_mb() -> dict[str, Any]:
    """The peak resident memory of this process and of the largest waited-for child, in MiB (the keys say
    `_mb`: the name is older than this note, and renaming them would break comparisons with earlier runs)."""
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20  # ru_maxrss: KiB on Linux, bytes on macOS
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale
    out = {"system/peak_rss_mb": round(own, 1), "system/peak_rss_children_mb": round(children, 1)}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        out["system/peak_cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


_started: dict[str, float] = {}


def mark_start() -> dict[str, float]:
    """`load("start")`, remembered for `summary()`."""
    _started.clear()
    _started.update(load("start"))
    return dict(_started)


def summary() -> dict[str, Any]:
    """What a stage's metrics.json records of its machine: CPU, cores, threads, load at the start (from
    `mark_start`) and now, and the peak memory so far (`system/` dropped from the names)."""
    tags = facts()
    keys = ("system/cpu_model", "system/cpu_isa", "system/physical_cores")
    record: dict[str, Any] = {k.removeprefix("system/"): tags[k] for k in keys}
    record.update({k.removeprefix("system/"): v for k, v in threads().items()})
    record.update({k.removeprefix("system/"): v for k, v in {**_started, **load("end"), **peak_rss_mb()}.items()})
    return record
