"""Prompt-lookup drafting: guess a row's next tokens from its own context, check them all in one forward, keep
what token-by-token decoding would have produced: for greedy decoding (evaluation) the argmax tokens, for
sampling (GRPO's rollouts) tokens drawn by speculative sampling, each distributed as a token-by-token draw.

Why: on a CPU a decode step of a 0.5B model at <= 50 rows is paid mostly in reading the weights, whatever the
rows hold (measured on the 2-core Intel Xeon, bf16, 700 cached tokens: 150 ms of matrix products a step for
1 or for 2 tokens a row at 50 rows), so a step that checks a few guessed tokens per row costs little more
than one that decodes one. An agent's turns copy much of their context: the tool-call JSON of earlier
turns, table and column names from tool results, a base model's repeated calls. Replaying the reference
run's transcripts (make_run_38; the most recent earlier occurrence of the last 3, 2 or 1 tokens, the tokens
that followed it as the guess) gave 2.3 tokens a step with 4 guessed for grpo_phase1_n50 and 3.2 for base_n50.

Exactness: greedy (`accept_greedy`): a row keeps a guessed token only where it equals the argmax of the logits
at its position, given the tokens before it, so in exact arithmetic the completion is the one token-by-token
greedy decoding gives (speculative decoding with a draft that needs no model; Leviathan et al. 2023, "prompt
lookup decoding", Saxena 2023; transformers' `prompt_lookup_num_tokens`). In bf16 the logits of a position
computed in a several-token step can differ in the last bits from a one-token step's, so a near-tie can go the
other way, as between two processes of the one-token loop (`sqlenv.eval.rollout.play_model`). Sampling
(`accept_sampled`): the same distribution as token-by-token sampling, other draws from the same seed.

Measured on make_run_38's models (2-core Intel Xeon, bf16, fresh processes alternated; the machine's speed
drifted by up to a quarter between runs minutes apart): grpo_phase1 on n50, greedy, 106-121 s without and
86-96 s with 8 guesses (432 against 180 decode forwards); the SFT model sampling 16 episodes at 8 rows, as GRPO's
rollouts (temperature 0.9), 49 against 37 ms a token (644 against 163 forwards).

Attention for a several-token step: transformers' SDPA path repeats every key/value head for the query heads
sharing it (`repeat_kv`) unless the query is one token; on the CPU that copy and the 7x larger attention it
feeds were 75 % of a 50-row, 2-token step (600 of 800 ms). `packed_sdpa` folds the query heads of a key/value
head into the query length instead ([rows, heads, t, d] -> [rows, kv_heads, groups * t, d], the mask repeated
to match), transformers' own trick for one-token queries (`pack_gqa`), extended to several tokens; it is
registered under `PACKED_SDPA` through transformers' public `AttentionInterface` and used only while
`packed_attention(model)` is active (the decode loop of evaluation and of GRPO's rollouts, `sqlenv.decode`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

PACKED_SDPA = "sqlenv_packed_sdpa"
NGRAM_SIZES = (3, 2, 1)  # longest match first


class NgramDrafter:
    """Each row's guess of its next tokens: what followed the most recent earlier occurrence of its last
    3 (else 2, else 1) tokens. One index per episode, extended as its tokens grow (no rescans)."""

    def __init__(self) -> None:
        self._tokens: dict[int, list[int]] = {}
        self._index: dict[int, dict[tuple[int, ...], int]] = {}  # key -> n-gram -> start of what followed it

    def forget(self, key: int) -> None:
        self._tokens.pop(key, None)
        self._index.pop(key, None)

    def extend(self, key: int, tokens: Sequence[int]) -> None:
        """The episode's tokens are now `tokens` (its earlier ones + more; anything else starts it afresh)."""
        seen = self._tokens.get(key)
        if seen is None or len(tokens) < len(seen) or list(tokens[: len(seen)]) != seen:
            self._tokens[key], self._index[key] = [], {}
            seen = self._tokens[key]
        self._add(key, tokens[len(seen) :])

    def append(self, key: int, tokens: Sequence[int]) -> None:
        self._add(key, tokens)

    def _add(self, key: int, new: Sequence[int]) -> None:
        seq, index = self._tokens.setdefault(key, []), self._index.setdefault(key, {})
        for token in new:
            seq.append(token)
            # Index the n-grams ending one before the last token: their continuation exists, and the last
            # n-gram (the one a draft looks up) never finds itself.
            end = len(seq) - 1
            for n in NGRAM_SIZES:
                if end >= n:
                    index[tuple(seq[end - n : end])] = end

    def draft(self, key: int, k: int) -> list[int]:
        """Up to `k` guessed next tokens of the episode (none when its last tokens never occurred before)."""
        seq, index = self._tokens.get(key), self._index.get(key)
        if not seq or k <= 0:
            return []
        for n in NGRAM_SIZES:
            if len(seq) > n:
                start = index.get(tuple(seq[-n:]))
                if start is not None:
                    return seq[start : start + k]
        return []


def packed_sdpa(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> tuple[Any, None]:
    """transformers' `sdpa_attention_forward`, except that a several-token query with a boolean mask shared by
    all heads ([rows, 1, t, kv]) attends with each key/value head once, its query heads packed into the query
    length, instead of the key/values repeated per query head. Anything else goes to transformers' own."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    t = query.shape[2]
    if (groups == 1 or t == 1 or attention_mask is None or attention_mask.dtype != torch.bool
            or attention_mask.dim() != 4 or attention_mask.shape[1] != 1 or kwargs.get("position_bias") is not None
            or kwargs.get("softcap") is not None or kwargs.get("dropout", 0.0)):  # fmt: skip
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    rows, heads, _, dim = query.shape
    # Query head h = kv_head * groups + g: [rows, kv_heads, groups * t, dim], row g * t + i being head g's token i.
    packed = query.reshape(rows, heads // groups, groups * t, dim)
    mask = attention_mask.repeat(1, 1, groups, 1)  # row g * t + i -> token i's mask
    out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=mask, scale=kwargs.get("scaling"))
    return out.reshape(rows, heads, t, dim).transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    # The public registry (`register` is a dict update: registering again is harmless).
    AttentionInterface.register(PACKED_SDPA, packed_sdpa)
    AttentionMaskInterface.register(PACKED_SDPA, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])  # 2D masks as for sdpa


@contextlib.contextmanager
def packed_attention(model: Any) -> Iterator[bool]:
    """While active, a model that attends with transformers' "sdpa" uses `packed_sdpa` (yields whether it
    does); its own implementation is restored on exit. Other implementations are left alone."""
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if before != "sdpa" or not hasattr(model, "set_attn_implementation"):
        yield False
        return
    _register()
    model.set_attn_implementation(PACKED_SDPA)
    try:
        yield True
    finally:
        model.set_attn_implementation(before)


def accept_greedy(logits: Any, guesses: Sequence[Sequence[int]]) -> list[list[int]]:
    """Per row, the tokens greedy decoding keeps from a step that fed its last token and then `guesses[row]`:
    the argmax after each fed token, up to and including the first that differs from the next guess.
    `logits`: [rows, 1 + longest guess, vocab], position j the prediction after the row's j-th fed token."""
    picked = logits.max(dim=-1).indices.tolist()
    kept = []
    for row, guess in zip(picked, guesses):
        n = 1
        while n <= len(guess) and guess[n - 1] == row[n - 1]:
            n += 1
        kept.append(row[:n])
    return kept


def accept_sampled(probs: Any, guesses: Sequence[Sequence[int]]) -> list[list[int]]:
    """Speculative sampling with a draft that is sure of its guesses (Leviathan et al. 2023, Chen et al. 2023,
    the draft distribution a point mass): guess j is kept with probability p_j(guess j); at the first one
    rejected the row's token is drawn from p_j without that guess, and if all are kept, from the next
    position's p. Each kept token is then distributed exactly as a token-by-token draw from the same p.
    `probs`: [rows, 1 + longest guess, vocab], the sampling distributions (after temperature/top-k/top-p) at
    each fed token; draws from torch's global RNG."""
    import torch

    final, kept = [], []
    for row, guess in enumerate(guesses):
        n = 0
        while n < len(guess) and torch.rand(()) < probs[row, n, guess[n]]:
            n += 1
        dist = probs[row, n]
        if n < len(guess):
            dist = dist.clone()
            dist[guess[n]] = 0
            if not dist.sum() > 0:  # p_n held only the guess (probability 1, rejected by rounding): keep it
                dist = probs[row, n]
        final.append(dist)
        kept.append(list(guess[:n]))
    drawn = torch.multinomial(torch.stack(final), num_samples=1).squeeze(1).tolist()
    return [k + [t] for k, t in zip(kept, drawn)]
