"""Chat templates and the Qwen2 tokenizer: TRL's templates by name, recognising one, and the offline tokenizer.

TRL 1.16 recognises a chat template only by its exact text (tool-call parsing through `add_response_schema`,
assistant-only loss through `get_training_chat_template`), so a prepared model must carry a template TRL
ships (`check_trl_template`). `qwen2_tokenizer` builds the Qwen2.5 tokenizer from its BPE ranks and the 22
added tokens in their official order (the offline GGUF and the tiny test model both use it); Qwen3's tokenizer
is the same plus `QWEN3_ADDED_TOKENS`.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.resources
from collections.abc import Sequence
from typing import Any


class ModelPreparationError(RuntimeError):
    """A base model could not be prepared; the message says what to do about it."""


# Family -> TRL template used when a Hub/local model's own template is not one TRL knows.
_FAMILY_TEMPLATES = {"qwen2": "qwen2_5", "qwen3": "qwen3"}


def package_version(dist: str) -> str | None:
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        return importlib.metadata.version(dist)
    return None



# The 22 tokens Qwen2.5 appends after its 151,643 BPE ranks, in their official order (ids 151643..151664),
# with their `special` flag. `<tool_call>`/`</tool_call>` are *not* special: decoding with
# skip_special_tokens=True must keep them, or TRL's tool-call parser never sees them.
QWEN2_5_ADDED_TOKENS: tuple[tuple[str, bool], ...] = tuple(
    (tok, tok not in ("<tool_call>", "</tool_call>"))
    for tok in (
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
        "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
        "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
        "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    )
)  # fmt: skip
QWEN2_5_FIRST_ADDED_ID = 151643
# Qwen3 keeps all of them and appends four more, none special (ids 151665..151668, as Qwen/Qwen3-*'s
# tokenizer.json): with them `<think>`/`</think>` are single tokens, as the Qwen3 template's empty think block is.
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = tuple(
    (tok, False) for tok in ("<tool_response>", "</tool_response>", "<think>", "</think>")
)
QWEN2_5_VOCAB_SIZE = 151936  # embedding rows in every Qwen2.5 config (tokenizer has 151,665; the rest is padding)
QWEN_CONTEXT = 32768


def trl_chat_template(name: str) -> str:
    """The exact text of TRL's `chat_templates/<name>.jinja` (what TRL compares a tokenizer's template to)."""
    res = importlib.resources.files("trl").joinpath("chat_templates", f"{name}.jinja")
    if not res.is_file():
        raise ModelPreparationError(f"TRL {package_version('trl')} ships no chat template named {name!r}")
    return res.read_text(encoding="utf-8")


def trl_template_name(template: str | None) -> str | None:
    """Name of the TRL-shipped template whose text equals `template` exactly, or None."""
    if not template:
        return None
    folder = importlib.resources.files("trl").joinpath("chat_templates")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".jinja") and entry.read_text(encoding="utf-8") == template:
            return entry.name[: -len(".jinja")]
    return None


def check_trl_template(tokenizer) -> dict[str, Any]:
    """Check that TRL recognises `tokenizer`'s template for tool calling and assistant-only loss.

    Returns the facts for provenance; raises `ModelPreparationError` when TRL would reject the tokenizer.
    `add_response_schema` sets attributes on the tokenizer; they are restored afterwards (the trainers set
    them themselves).
    """
    from trl.chat_template_utils import (
        add_response_schema,
        get_training_chat_template,
        has_generation_markers,
        supports_tool_calling,
    )

    template = tokenizer.chat_template
    if not supports_tool_calling(tokenizer):
        raise ModelPreparationError("TRL's supports_tool_calling() rejects the chat template")
    saved = {k: getattr(tokenizer, k, None) for k in ("response_template", "response_schema")}
    try:
        add_response_schema(tokenizer)
    except ValueError as exc:
        raise ModelPreparationError(f"TRL cannot parse tool calls with this chat template: {exc}") from exc
    finally:
        for k, v in saved.items():
            setattr(tokenizer, k, v)
    training = get_training_chat_template(tokenizer)
    if training is None and not has_generation_markers(template):
        raise ModelPreparationError("TRL has no training variant (assistant-only loss) for this chat template")
    return {
        "name": trl_template_name(template),
        "sha256": hashlib.sha256(template.encode("utf-8")).hexdigest(),
        "training_name": trl_template_name(training) if training else trl_template_name(template),
    }


def qwen2_tokenizer(
    vocab: dict[str, int],
    merges: Sequence[tuple[str, str]],
    *,
    chat_template: str,
    model_max_length: int = QWEN_CONTEXT,
):
    """A Qwen2.5 tokenizer from byte-level BPE ranks (151,643 entries) and merges.

    Appends `QWEN2_5_ADDED_TOKENS` at ids 151643..151664 (the vocab must not already hold them at other
    ids), eos `<|im_end|>`, pad `<|endoftext|>`, no bos/unk — as Qwen2.5-Instruct's tokenizer_config. Uses
    transformers' `Qwen2Tokenizer`, i.e. the upstream pre-tokenizer regex, NFC normaliser and byte-level
    decoder.
    """
    from tokenizers import AddedToken
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    vocab = dict(vocab)
    if len(vocab) != QWEN2_5_FIRST_ADDED_ID:
        raise ModelPreparationError(
            f"Qwen2 BPE vocabulary has {len(vocab)} entries, expected {QWEN2_5_FIRST_ADDED_ID}"
        )
    # The added tokens go into the BPE vocab at their ids first: Qwen2Tokenizer.__init__ registers eos/pad
    # before we add the rest, and an unknown eos would otherwise take id 151643 out of order.
    for i, (tok, _special) in enumerate(QWEN2_5_ADDED_TOKENS):
        vocab[tok] = QWEN2_5_FIRST_ADDED_ID + i
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=[tuple(m) for m in merges],
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        errors="replace",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in QWEN2_5_ADDED_TOKENS])
    tokenizer.chat_template = chat_template
    check_qwen2_5_ids(tokenizer)
    return tokenizer


def check_qwen2_5_ids(tokenizer) -> None:
    """Raise unless the Qwen2.5 added tokens sit at their official ids with their official `special` flags."""
    decoder = tokenizer.added_tokens_decoder
    for i, (tok, special) in enumerate(QWEN2_5_ADDED_TOKENS):
        want = QWEN2_5_FIRST_ADDED_ID + i
        got = tokenizer.convert_tokens_to_ids(tok)
        if got != want or want not in decoder or decoder[want].special != special:
            raise ModelPreparationError(f"tokenizer maps {tok!r} to {got} ({decoder.get(got)!r}), expected {want}")
    if len(tokenizer) != QWEN2_5_FIRST_ADDED_ID + len(QWEN2_5_ADDED_TOKENS):
        raise ModelPreparationError(f"Qwen2.5 tokenizer has {len(tokenizer)} tokens, expected 151665")


def gguf_qwen2_tokenizer(reader, chat_template: str):
    """Rebuild the upstream Qwen2.5 tokenizer from a GGUF's `tokenizer.ggml.*` fields.

    Not transformers' GGUF tokenizer conversion: that one keeps the 271 `[PAD151665]`... placeholder
    entries as vocabulary (len 151,936 instead of 151,665) and drops the NFC normaliser that the upstream
    tokenizer.json has. Here NORMAL tokens (type 1) are the BPE ranks, the merges are the GGUF's own list.
    """
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    vocab = {tok: i for i, (tok, kind) in enumerate(zip(tokens, types)) if kind == 1}
    added = [tok for tok, kind in zip(tokens, types) if kind in (3, 4)]  # CONTROL, USER_DEFINED
    if added != [t for t, _ in QWEN2_5_ADDED_TOKENS]:
        raise ModelPreparationError(f"GGUF's added tokens are not Qwen2.5's: {added[:5]}... ({len(added)})")
    return qwen2_tokenizer(vocab, merges, chat_template=chat_template)


def settle_chat_template(tokenizer, preferred: str | None, family: str | None) -> dict[str, Any]:
    """Make the tokenizer carry a TRL-known template; return what was done, for provenance.

    `preferred` (a TRL template name) wins when given; otherwise a template TRL already knows is kept and an
    unknown one is replaced by the family's TRL template.
    """
    original = tokenizer.chat_template
    if isinstance(original, dict):  # templates shipped as named variants: TRL reads the default one
        original = original.get("default")
    known = trl_template_name(original)
    target = preferred or (None if known else _FAMILY_TEMPLATES.get(family or ""))
    if known and (preferred is None or known == preferred):
        tokenizer.chat_template = original  # a dict of named variants collapses to the default TRL reads
        source = "model"
    elif target:
        tokenizer.chat_template = trl_chat_template(target)
        source = "trl"
    else:
        raise ModelPreparationError(
            f"the model's chat template is not one TRL {package_version('trl')} recognises and no TRL template is known "
            f"for model family {family!r}; pass chat_template=<name of a trl/chat_templates/*.jinja>"
        )
    return {
        "source": source,
        "replaced": source == "trl",
        "original_name": known,
        "original_sha256": hashlib.sha256(original.encode("utf-8")).hexdigest() if original else None,
    }
