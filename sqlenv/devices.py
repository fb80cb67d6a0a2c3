"""The device policy: which of the project's mechanisms runs on a CPU, on one GPU, on several GPUs and with vLLM.

Most of the speed machinery was built for, and measured on, 2-core CPUs (docs/performance.md). On a GPU
some of it is wasted or harmful: a decoder that syncs with the host every step and steers SDPA with 4-D
masks, drafting tuned for two cores, log-prob passes run one rollout at a time where TRL runs one batched
pass, glibc heap trims. This module is the one place that says what runs where; `POLICY` is the table
(docs/gpu.md shows it, a test renders it from here), `grpo_policy` resolves a GRPO phase's choices from
the device, the number of processes, `grpo.use_vllm` and the params that override a default
(`grpo.rollout_decoder`, `grpo.shared_prefix`: `auto` takes the device's default). A test per row.

Devices: `cpu`; `cuda` (one process); `cuda-ddp` (several processes; several CPU processes are `cpu-ddp`);
`vllm` (generation by vLLM, colocated or a server: a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

DEVICES = ("cpu", "cpu-ddp", "cuda", "cuda-ddp", "vllm")

# mechanism -> (what it is, {device: what runs}). Rendered in docs/gpu.md; `grpo_policy` implements the GRPO rows.
POLICY: dict[str, tuple[str, dict[str, str]]] = {
    "GRPO episodes": (
        "who plays a rollout's turns and tools (`grpo.rollout_decoder`)",
        {"cpu": "sqlenv's episode loop (TRL `rollout_func`)", "cpu-ddp": "sqlenv's episode loop (TRL `rollout_func`)",
         "cuda": "TRL's own tool loop (`environment_factory`)", "cuda-ddp": "TRL's own tool loop (`environment_factory`)",
         "vllm": "TRL's own tool loop, vLLM generation"},
    ),
    "turn decoder": (
        "how a turn is decoded in the sqlenv loop",
        {"cpu": "cached HF decoder (`sqlenv.decode`)", "cpu-ddp": "cached HF decoder (`sqlenv.decode`)",
         "cuda": "TRL's transformers generation", "cuda-ddp": "TRL's transformers generation", "vllm": "vLLM"},
    ),
    "drafting": (
        "prompt-lookup tokens checked per decode step (`grpo.draft_tokens`)",
        {"cpu": "on", "cpu-ddp": "on", "cuda": "off (TRL generates)", "cuda-ddp": "off (TRL generates)", "vllm": "off (vLLM generates)"},
    ),
    "GRPO log-prob passes": (
        "reference, old-policy and loss passes (`grpo.shared_prefix`)",
        {"cpu": "per rollout, unpadded, after the shared prefix", "cpu-ddp": "TRL's batched passes",
         "cuda": "TRL's batched passes", "cuda-ddp": "TRL's batched passes", "vllm": "TRL's batched passes"},
    ),
    "LM head on labelled positions": (
        "TRL's fused head scores only labelled positions (`trl_patches.compact_lm_head`)",
        {"cpu": "patched", "cpu-ddp": "patched", "cuda": "TRL's own (Triton: labelled positions)",
         "cuda-ddp": "TRL's own (Triton: labelled positions)", "vllm": "TRL's own (Triton: labelled positions)"},
    ),
    "bf16": (
        "how bf16 weights compute",
        {"cpu": "loss pass under autocast, LoRA input casts skipped", "cpu-ddp": "loss pass under autocast, LoRA input casts skipped",
         "cuda": "Trainer's bf16 mixed precision", "cuda-ddp": "Trainer's bf16 mixed precision", "vllm": "Trainer's bf16 mixed precision"},
    ),
    "heap trim": (
        "glibc `malloc_trim` after each optimizer step",
        {"cpu": "on", "cpu-ddp": "on", "cuda": "off", "cuda-ddp": "off", "vllm": "off"},
    ),
}  # fmt: skip

ROLLOUT_DECODERS = ("auto", "sqlenv", "trl")


def device_kind(cuda: bool, processes: int, use_vllm: str = "none") -> str:
    """The column of `POLICY` a run falls in."""
    if use_vllm != "none":
        return "vllm"
    base = "cuda" if cuda else "cpu"
    return f"{base}-ddp" if processes > 1 else base


@dataclass(frozen=True)
class GRPOPolicy:
    """What a GRPO phase runs, resolved for its device (see `POLICY`)."""

    device: str  # a column of POLICY
    rollout_decoder: str  # sqlenv (our loop through rollout_func) | trl (TRL's environment_factory loop)
    shared_prefix: bool  # our per-rollout log-prob passes after the step's shared prefix; else TRL's batched passes
    compact_lm_head: bool  # the `_use_triton` patch (it acts on CPU devices only)
    loss_autocast: bool  # bf16 on a CPU: autocast around the loss pass, peft's input casts skipped
    mixed_precision_bf16: bool  # bf16 on a GPU: the Trainer's bf16
    heap_trim: bool


def grpo_policy(*, cuda: bool, processes: int, use_vllm: str, dtype: str, rollout_decoder: str = "auto",
                shared_prefix: str | bool = "auto") -> GRPOPolicy:  # fmt: skip
    """The GRPO rows of `POLICY` for this device; `rollout_decoder` / `shared_prefix` other than `auto` override
    the default where they can run (ValueError where they cannot)."""
    if rollout_decoder not in ROLLOUT_DECODERS:
        raise ValueError(f"grpo.rollout_decoder must be one of {ROLLOUT_DECODERS}, got {rollout_decoder!r}")
    if shared_prefix not in ("auto", True, False):
        raise ValueError(f"grpo.shared_prefix must be auto, true or false, got {shared_prefix!r}")
    kind = device_kind(cuda, processes, use_vllm)
    if rollout_decoder == "auto":
        rollout_decoder = "sqlenv" if kind in ("cpu", "cpu-ddp") else "trl"
    elif rollout_decoder == "sqlenv" and use_vllm != "none":
        raise ValueError("grpo.rollout_decoder: sqlenv decodes with the training model; with grpo.use_vllm "
                         f"{use_vllm} use rollout_decoder auto or trl (TRL's loop, vLLM generation)")  # fmt: skip
    # The shared prefix's gradient joins the adapters after the last micro-batch's backward, which under DDP
    # has already all-reduced the gradients (`sqlenv.train.shared_prefix`): one process only.
    if shared_prefix is True and processes > 1:
        raise ValueError("grpo.shared_prefix: true needs one process (DDP all-reduces before the prefix's share "
                         "is added); use auto or false")  # fmt: skip
    prefix = kind == "cpu" if shared_prefix == "auto" else bool(shared_prefix)
    bf16 = dtype == "bfloat16"
    return GRPOPolicy(
        device=kind,
        rollout_decoder=rollout_decoder,
        shared_prefix=prefix,
        compact_lm_head=not cuda,
        loss_autocast=bf16 and not cuda,
        mixed_precision_bf16=bf16 and cuda,
        heap_trim=not cuda,
    )


def policy_table() -> str:
    """`POLICY` as a markdown table (docs/gpu.md holds it; a test keeps the two equal)."""
    lines = ["| mechanism | what | " + " | ".join(DEVICES) + " |", "|---" * (len(DEVICES) + 2) + "|"]
    for name, (what, cells) in POLICY.items():
        lines.append(f"| {name} | {what} | " + " | ".join(cells[d] for d in DEVICES) + " |")
    return "\n".join(lines)
