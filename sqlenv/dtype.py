"""Which dtype a model computes in on this machine: measured, not assumed (`model.dtype: auto`).

CPUs of one machine kind differ: on an AMD EPYC a bf16 matmul at Qwen2.5-0.5B's shapes runs ~4x faster
than fp32, on an Intel Xeon with avx512_bf16 (torch 2.13, 2 threads) at ~0.55x its speed. A fixed
`bfloat16` made the default run ~3x slower there. `choose_dtype("auto", model_dir)` times the model's
own MLP projection (`[rows, hidden] @ [hidden, intermediate]`, then back) in both dtypes, interleaved,
best of several repeats, and takes the faster; both timings are returned so a stage can record them.
On a GPU it takes bfloat16 where the device supports it (no timing: every GPU recipe trains in bf16).
An explicit `bfloat16` / `float32` is used as given (timings None).

The measurement costs well under a second where both dtypes are fast; where the CPU has no bf16
instructions (an AMD EPYC with AVX2 only: bf16 1.3 s against fp32 0.02 s a pair) it stops after the
first timed round that settles it, ~4 s. Its result is kept in this process and exported in
`SQLENV_DTYPE_CHOICE`, so the data-parallel processes a stage launches (`pipeline.launch`) inherit the
parent's choice instead of measuring, and possibly disagreeing, each on its own.

Saved models keep the dtype of preparation (bf16 for `auto`, `prepare_dtype`): the choice is about
compute, and a bf16 folder loads in fp32 without loss.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

DTYPES = ("auto", "bfloat16", "float32")
ENV_VAR = "SQLENV_DTYPE_CHOICE"
ROWS = 128  # tokens per timed matmul: a short prefill / a micro-batch's slice, as the stages run them
CLEAR = 2.0  # after a timed round, a dtype this many times slower than the other has lost: no more rounds


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype a stage computes in, what was asked for, why, and the timings behind it (ms per matmul pair)."""

    dtype: str
    requested: str
    reason: str
    bf16_ms: float | None = None
    fp32_ms: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def prepare_dtype(requested: str) -> str:
    """The dtype a model folder is saved in: bfloat16 for `auto`, else the one asked for."""
    _check(requested)
    return "bfloat16" if requested == "auto" else requested


def model_shapes(model_dir: str | os.PathLike[str] | None) -> tuple[int, int]:
    """(hidden_size, intermediate_size) from a model folder's config.json; Qwen2.5-0.5B's without one."""
    config = Path(model_dir) / "config.json" if model_dir is not None else None
    if config is not None and config.is_file():
        data = json.loads(config.read_text(encoding="utf-8"))
        data = data.get("text_config", data)
        return int(data["hidden_size"]), int(data.get("intermediate_size") or 4 * data["hidden_size"])
    return 896, 4864


def time_matmuls(hidden: int, intermediate: int, repeats: int = 5, rows: int = ROWS) -> dict[str, float]:
    """Best-of-`repeats` milliseconds of one up- and one down-projection per dtype, interleaved; it stops
    after a round in which one dtype's best is `CLEAR` times the other's (a CPU without bf16 instructions
    takes ~1.3 s per bf16 pair at Qwen2.5-0.5B's shapes: five rounds would cost ~9 s a stage)."""
    import torch

    best = {"bfloat16": float("inf"), "float32": float("inf")}
    operands = {}
    for name in best:
        dt = getattr(torch, name)
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(rows, hidden, generator=gen).to(dt)
        up, down = torch.randn(hidden, intermediate, generator=gen).to(dt), torch.randn(intermediate, hidden, generator=gen).to(dt)
        (x @ up) @ down  # warm-up (kernel selection, page faults)
        operands[name] = (x, up, down)
    for _ in range(repeats):
        for name, (x, up, down) in operands.items():
            t0 = time.perf_counter()
            (x @ up) @ down
            best[name] = min(best[name], (time.perf_counter() - t0) * 1e3)
        if max(best.values()) >= CLEAR * min(best.values()):
            break
    return best


def choose_dtype(requested: str, model_dir: str | os.PathLike[str] | None = None) -> DtypeChoice:
    """Resolve `model.dtype` for computing on this machine (see the module docstring)."""
    _check(requested)
    if requested != "auto":
        return DtypeChoice(requested, requested, "as configured")
    inherited = os.environ.get(ENV_VAR)
    if inherited:
        return DtypeChoice(**json.loads(inherited))
    import torch

    if torch.cuda.is_available():
        bf16 = torch.cuda.is_bf16_supported()
        choice = DtypeChoice("bfloat16" if bf16 else "float32", "auto", f"cuda: bf16 {'supported' if bf16 else 'unsupported'}")
    else:
        ms = time_matmuls(*model_shapes(model_dir))
        faster = min(ms, key=ms.get)
        choice = DtypeChoice(faster, "auto", "faster matmul at the model's shapes on this CPU",
                             round(ms["bfloat16"], 3), round(ms["float32"], 3))  # fmt: skip
    os.environ[ENV_VAR] = json.dumps(choice.as_dict())
    return choice


def _check(requested: str) -> None:
    if requested not in DTYPES:
        raise ValueError(f"model.dtype must be one of {DTYPES}, got {requested!r}")
