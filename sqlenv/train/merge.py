"""Merge-and-save: the one way a trained policy becomes a plain model folder (SFT and both GRPO phases).

`save_trained(trainer_or_model, out_dir, start_dir=..., dtype=..., provenance=...)`:
- merges LoRA with `safe_merge` (refuses non-finite merged weights) and casts to the training dtype;
- checks the input and output embeddings are still one tensor when the config ties them (a merge that
  split them would leave the saved model with an output head nobody trained);
- optionally checks the tool-tag rows differ from their values before training (`tag_rows_before`): if
  they do not, the model still cannot emit a tool call (see `sqlenv.train.sft`), so saving fails;
- writes the weights and config, copies the starting folder's tokenizer and chat-template files byte for
  byte (a trainer's tokenizer carries TRL's response-parsing attributes), leaves no adapter files, and
  writes `provenance.json`: the caller's record plus the new folder's fingerprint.

What it does not do: write atomically (the stages wrap `out_dir` in `pipeline.io.atomic_dir`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlenv.provenance import PROVENANCE_FILE, model_fingerprint, readable_files

TOOL_TAGS = ("<tool_call>", "</tool_call>")
TOKENIZER_FILES = ("tokenizer", "special_tokens_map", "added_tokens", "vocab", "merges", "chat_template")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def tag_rows(model: Any, tokenizer: Any, tags: Sequence[str] = TOOL_TAGS) -> Any:
    """A detached float copy of the tool-tag rows of the input embedding (to see what training changed)."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in tags]
    return model.get_input_embeddings().weight.detach()[ids].float().clone()


def merged(model_or_trainer: Any) -> Any:
    """The trained model as a plain transformers model: unwrapped from its trainer, LoRA merged."""
    from peft import PeftModel

    model = model_or_trainer
    if hasattr(model, "accelerator"):  # a Trainer
        model = model.accelerator.unwrap_model(model.model)
    if isinstance(model, PeftModel):
        # safe_merge: merge into a copy of each weight and refuse NaNs instead of corrupting the model.
        model = model.merge_and_unload(safe_merge=True)
    return model


def save_trained(
    model_or_trainer: Any,
    out_dir: str | os.PathLike[str],
    *,
    start_dir: str | os.PathLike[str],
    dtype: str,
    provenance: dict[str, Any],
    tag_rows_before: Any | None = None,
    tokenizer: Any | None = None,
) -> dict[str, Any]:
    """Merge, check, and save into `out_dir` (see the module docstring); returns the provenance written.

    `tag_rows_before` (with the `tokenizer` to find the tags) switches the tool-tag check on; the record
    then says which rows changed (`tag_rows_changed`).
    """
    import torch

    model = merged(model_or_trainer).to(getattr(torch, dtype))
    if getattr(model.config, "tie_word_embeddings", False):
        out_w, in_w = model.get_output_embeddings().weight, model.get_input_embeddings().weight
        if out_w.data_ptr() != in_w.data_ptr() and not torch.equal(out_w, in_w):
            raise RuntimeError("merged model: tied input and output embeddings diverged")
    record = dict(provenance)
    if tag_rows_before is not None:
        delta = (tag_rows(model, tokenizer) - tag_rows_before).abs().amax(dim=1)
        changed = [bool(d > 0) for d in delta]
        if not all(changed):
            raise RuntimeError(f"tool-tag embedding rows unchanged by training: {dict(zip(TOOL_TAGS, changed))}")
        record["tag_rows_changed"] = changed
    start, out = Path(start_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for f in start.iterdir():
        if f.is_file() and f.name.startswith(TOKENIZER_FILES):
            shutil.copy2(f, out / f.name)
    for name in ADAPTER_FILES:
        (out / name).unlink(missing_ok=True)
    record.update(
        dtype=str(model.dtype).replace("torch.", ""),
        parameters=sum(p.numel() for p in model.parameters()),
        tie_word_embeddings=bool(getattr(model.config, "tie_word_embeddings", False)),
        fingerprint=model_fingerprint(out),
    )
    (out / PROVENANCE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    readable_files(out)
    return record
