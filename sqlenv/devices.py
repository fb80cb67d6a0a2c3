"""The device policy: which of the project's mechanisms runs on a CPU, on one GPU, on several GPUs and with vLLM.

Most of the speed machinery was built for, and measured on, 2-core CPUs (docs/performance.md). On a GPU
some of it is wasted or harmful: a decoder that syncs with the host every step, drafting tuned for two
cores, log-prob passes run one rollout at a time where TRL runs one batched pass, glibc heap trims, a patch
of TRL's fused LM head. This module is the one place that says what runs where; `POLICY` is the table
(docs/gpu.md shows it, a test renders it from here), `grpo_policy` resolves a GRPO phase's choices and
`sft_policy` SFT's, from the device, the number of processes and (GRPO) `grpo.use_vllm`. A test per row.

Params that choose a mechanism (`grpo.rollout_decoder`, `grpo.shared_prefix`, `grpo.draft_tokens`) take
`auto`, the device's default from the table, or an explicit value, which is honoured where it can run and
refused with a ValueError where it cannot or where it is a CPU mechanism on a GPU:
- `rollout_decoder: sqlenv` runs on a GPU too (it is evaluation's loop); it cannot decode through vLLM;
- `shared_prefix: true` needs one CPU process: under DDP the gradients are all-reduced before the prefix's
  share is added, and on a GPU it would replace TRL's batched passes by one pass per rollout;
- `draft_tokens: <n>` drafts n tokens in the sqlenv loop, on a GPU too (evaluation drafts there); n > 0 is
  refused where TRL's loop or vLLM generates, since nothing would draft.
Mechanisms without a param (the LM-head patch, heap trims, the loss-only autocast) follow the device alone.

Devices: `cpu`; `cuda` (one process); `cuda-ddp` (several processes; several CPU processes are `cpu-ddp`);
`vllm` (generation by vLLM, colocated or a server: a GPU). SFT has no vLLM column: it generates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

DEVICES = ("cpu", "cpu-ddp", "cuda", "cuda-ddp", "vllm")
# Prompt-lookup tokens per decode step of the sqlenv loop on a CPU (`grpo.draft_tokens: auto`): sampled rollouts
# drafted with 8 made 1.45-1.60x the tokens a second on the 2-core Xeon (docs/performance.md).
DRAFT_TOKENS = 8

# mechanism -> (trainers, what it is, {device: what runs}). Rendered in docs/gpu.md; `grpo_policy` and
# `sft_policy` implement the rows (an SFT cell under `vllm` is what a GRPO run with vLLM does).
POLICY: dict[str, tuple[str, str, dict[str, str]]] = {
    "GRPO episodes": (
        "GRPO", "who plays a rollout's turns and tools (`grpo.rollout_decoder`)",
        {"cpu": "sqlenv's episode loop (TRL `rollout_func`)", "cpu-ddp": "sqlenv's episode loop (TRL `rollout_func`)",
         "cuda": "TRL's own tool loop (`environment_factory`)", "cuda-ddp": "TRL's own tool loop (`environment_factory`)",
         "vllm": "TRL's own tool loop, vLLM generation"},
    ),
    "turn decoder": (
        "GRPO", "how a turn is decoded in the sqlenv loop",
        {"cpu": "cached HF decoder (`sqlenv.decode`)", "cpu-ddp": "cached HF decoder (`sqlenv.decode`)",
         "cuda": "TRL's transformers generation", "cuda-ddp": "TRL's transformers generation", "vllm": "vLLM"},
    ),
    "drafting": (
        "GRPO", "prompt-lookup tokens checked per decode step of the sqlenv loop (`grpo.draft_tokens`)",
        {"cpu": f"on ({DRAFT_TOKENS} tokens)", "cpu-ddp": f"on ({DRAFT_TOKENS} tokens)",
         "cuda": "off (TRL generates; the sqlenv loop too, unless a count is set)",
         "cuda-ddp": "off (TRL generates; the sqlenv loop too, unless a count is set)",
         "vllm": "off (vLLM generates; a count is refused)"},
    ),
    "GRPO log-prob passes": (
        "GRPO", "reference, old-policy and loss passes (`grpo.shared_prefix`)",
        {"cpu": "per rollout, unpadded, after the shared prefix", "cpu-ddp": "TRL's batched passes (`true` refused)",
         "cuda": "TRL's batched passes (`true` refused)", "cuda-ddp": "TRL's batched passes (`true` refused)",
         "vllm": "TRL's batched passes (`true` refused)"},
    ),
    "LM head on labelled positions": (
        "SFT, GRPO", "TRL's fused head scores only labelled positions (`trl_patches.compact_lm_head`)",
        {"cpu": "patched", "cpu-ddp": "patched", "cuda": "off: TRL's own (Triton: labelled positions)",
         "cuda-ddp": "off: TRL's own (Triton: labelled positions)", "vllm": "off: TRL's own (Triton: labelled positions)"},
    ),
    "bf16": (
        "GRPO", "how bf16 weights compute",
        {"cpu": "loss pass under autocast, LoRA input casts skipped", "cpu-ddp": "loss pass under autocast, LoRA input casts skipped",
         "cuda": "Trainer's bf16 mixed precision", "cuda-ddp": "Trainer's bf16 mixed precision", "vllm": "Trainer's bf16 mixed precision"},
    ),
    "heap trim": (
        "SFT, GRPO", "glibc `malloc_trim` after each optimizer step",
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
    draft_tokens: int  # prompt-lookup tokens per decode step of the sqlenv loop (0: off; always 0 with TRL's loop)
    compact_lm_head: bool  # the `_use_triton` patch (it acts on CPU devices only)
    loss_autocast: bool  # bf16 on a CPU: autocast around the loss pass, peft's input casts skipped
    mixed_precision_bf16: bool  # bf16 on a GPU: the Trainer's bf16
    heap_trim: bool


def grpo_policy(*, cuda: bool, processes: int, use_vllm: str, dtype: str, rollout_decoder: str = "auto",
                shared_prefix: str | bool = "auto", draft_tokens: str | int = "auto") -> GRPOPolicy:  # fmt: skip
    """The GRPO rows of `POLICY` for this device; `rollout_decoder` / `shared_prefix` / `draft_tokens` other than
    `auto` override the default where they can run (ValueError where they cannot, or where a CPU mechanism is
    asked for on a GPU: the module docstring)."""
    if rollout_decoder not in ROLLOUT_DECODERS:
        raise ValueError(f"grpo.rollout_decoder must be one of {ROLLOUT_DECODERS}, got {rollout_decoder!r}")
    if shared_prefix not in ("auto", True, False) or isinstance(shared_prefix, int) and not isinstance(shared_prefix, bool):
        raise ValueError(f"grpo.shared_prefix must be auto, true or false, got {shared_prefix!r}")
    if draft_tokens != "auto" and (type(draft_tokens) is not int or draft_tokens < 0):
        raise ValueError(f"grpo.draft_tokens must be auto or a whole number >= 0, got {draft_tokens!r}")
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
    # A CPU mechanism: one pass per rollout in place of TRL's batched pass, measured on CPUs only.
    if shared_prefix is True and cuda:
        raise ValueError("grpo.shared_prefix: true is a CPU mechanism (one log-prob pass per rollout in place of "
                         f"TRL's batched passes); on {kind} use auto or false")  # fmt: skip
    if draft_tokens == "auto":
        draft_tokens = DRAFT_TOKENS if rollout_decoder == "sqlenv" and not cuda else 0
    elif draft_tokens and rollout_decoder != "sqlenv":
        raise ValueError(f"grpo.draft_tokens: {draft_tokens} drafts in sqlenv's episode loop, but on {kind} the rollouts "
                         "are TRL's loop (grpo.rollout_decoder resolves to trl): use draft_tokens auto or 0, or "
                         "rollout_decoder sqlenv")  # fmt: skip
    prefix = kind == "cpu" if shared_prefix == "auto" else bool(shared_prefix)
    bf16 = dtype == "bfloat16"
    return GRPOPolicy(
        device=kind,
        rollout_decoder=rollout_decoder,
        shared_prefix=prefix,
        draft_tokens=draft_tokens,
        compact_lm_head=not cuda,
        loss_autocast=bf16 and not cuda,
        mixed_precision_bf16=bf16 and cuda,
        heap_trim=not cuda,
    )


@dataclass(frozen=True)
class SFTPolicy:
    """What an SFT run runs, resolved for its device (the `SFT` rows of `POLICY`)."""

    device: str  # cpu | cpu-ddp | cuda | cuda-ddp
    compact_lm_head: bool  # the `_use_triton` patch around training (it acts on CPU devices only)
    heap_trim: bool  # `malloc_trim` after each optimizer step


def sft_policy(*, cuda: bool, processes: int) -> SFTPolicy:
    """The SFT rows of `POLICY` for this device: its CPU mechanisms on a CPU only."""
    return SFTPolicy(device=device_kind(cuda, processes), compact_lm_head=not cuda, heap_trim=not cuda)


def policy_table() -> str:
    """`POLICY` as a markdown table (docs/gpu.md holds it; a test keeps the two equal)."""
    lines = ["| mechanism | trainers | what | " + " | ".join(DEVICES) + " |", "|---" * (len(DEVICES) + 3) + "|"]
    for name, (trainers, what, cells) in POLICY.items():
        lines.append(f"| {name} | {trainers} | {what} | " + " | ".join(cells[d] for d in DEVICES) + " |")
    return "\n".join(lines)
