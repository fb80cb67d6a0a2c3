"""Whether a training stage recomputes activations in the backward (activation checkpointing): measured trades.

`sft.activation_checkpointing` and `grpo.activation_checkpointing` take `auto` (default), `true` or `false`.
`auto` turns it on where the stage computes in float32 — on a CPU without fast bf16 (`model.dtype: auto`
chose float32, `sqlenv.dtype`), or when float32 is asked for — and leaves it off in bf16:

- float32 holds every saved activation at twice bf16's size, and the weights too. On a 2-core AMD EPYC
  with AVX2 only (no AVX-512, so `auto` chose float32) the default run's SFT peaked at 9.37 GiB and GRPO
  phase 1 at 8.47 GiB without it, 6.32 and 6.04 GiB with it; the models came out bit-identical, and a
  same-process A/B of SFT steps (shared prefix on) took ~4 % longer a step (experiments/fp32_checkpointing_31).
- In bf16 the reference runs stay under 7.2 GB without it, and recomputing cost ~40 % a step (AMD EPYC
  with AVX-512 BF16, SFT on the 6 longest episodes): no memory problem to buy off.

With the shared prefix (`sqlenv.train.shared_prefix`) the suffixes attend to a cache under checkpointing:
`shared_prefix.replayable_under_checkpointing` says so to transformers; a test compares the gradients.
"""

from __future__ import annotations


def activation_checkpointing(setting: str | bool, dtype: str) -> bool:
    """The trainer's `activation_checkpointing` for a params `setting` when the stage computes in `dtype`."""
    if setting != "auto" and not isinstance(setting, bool):  # 1 and "true" are neither
        raise ValueError(f"activation_checkpointing must be auto, true or false, got {setting!r}")
    if setting == "auto":
        return dtype == "float32"
    return bool(setting)
