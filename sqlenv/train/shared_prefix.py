"""Encode the prompt prefix that a training step's sequences share once per step, not once per sequence.

Every SFT trajectory and every GRPO rollout opens with the same system prompt and tool schemas: with
Qwen2.5 and the compact prompt, ~480 of a first prompt's ~520 tokens, about half of an SFT trajectory and
most of a GRPO rollout's log-prob pass. TRL's trainers run that prefix forward and backward again for
every sequence of every micro-batch. Here one optimizer step encodes it once, *with* gradient:

- `SharedPrefix.encode` runs the prefix through the model (the adapters active, in the caller's autocast)
  and keeps its keys and values per layer, attached to their graph;
- every sequence of the step attends to them as a cache (`SharedPrefix.cache`): a copy of float32 leaf
  tensors, so each micro-batch's backward accumulates d loss / d (prefix keys, values) in the leaves;
- after the step's last micro-batch, `SharedPrefix.finish` backpropagates the accumulated gradients
  through the prefix's graph once, into the adapters — before the trainer clips and steps.

Same loss and same gradients as encoding the prefix with every sequence: the prefix's positions carry no
label, so by the chain rule its keys and values are the only path from its tokens to the loss. Float
rounding differs (attention over a cache sums in another order; the leaves accumulate in float32): the
tests compare log-probs and gradients of both ways on the tiny model.

What it guards, and what the callers (`sqlenv.train.sft`, `sqlenv.train.grpo`) must check:
- the prefix ends before the first labelled position's predecessor (the suffix forward needs the hidden
  state that predicts its first label) — `usable_length` caps it;
- a sequence uses the prefix only if it starts with exactly these token ids;
- one process only: under DDP the last micro-batch's backward all-reduces the adapters' gradients before
  `finish` could add the prefix's share, so the trainers encode nothing shared when several processes train;
- weights must not change between `encode` and `finish` (one optimizer step); the trainers drop the prefix
  in the step's last micro-batch.
Positions: the suffix continues at the prefix's length (the model derives positions from the cache), where
TRL's padded batch puts a row's tokens after its left padding; RoPE scores depend only on relative positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Number of leading token ids that all `sequences` share (0 for none or an empty list)."""
    if not sequences:
        return 0
    first = sequences[0]
    n = min(len(s) for s in sequences)
    for i in range(n):
        token = first[i]
        if any(s[i] != token for s in sequences):
            return i
    return n


def usable_length(shared: int, first_labelled: int) -> int:
    """The prefix length a step can encode once: at most `shared` tokens, and ending before the position that
    predicts the first labelled token (`first_labelled`: the earliest labelled position over the step's
    sequences), so that every label is predicted inside a sequence's own suffix."""
    return max(0, min(shared, first_labelled - 1))


class SharedPrefix:
    """The keys and values of one prefix under the current weights; see the module docstring."""

    MIN_LENGTH = 16  # shorter shared prefixes are not worth a separate forward

    def __init__(self, ids: Sequence[int], layers: list[tuple[Any, Any]], leaves: list[tuple[Any, Any]] | None, config: Any):
        self.ids = list(ids)
        self.length = len(self.ids)
        self._layers = layers  # per layer (keys, values) as the model made them, attached to the graph when encoded with grad
        self._leaves = leaves  # float32 leaf copies that collect the suffixes' gradients; None without grad
        self._config = config

    @classmethod
    def encode(cls, model: Any, ids: Sequence[int]) -> SharedPrefix:
        """Run `ids` through `model`'s transformer (gradient as torch's grad mode says; no LM head: nothing
        is scored here) and keep their keys and values."""
        import torch

        from sqlenv.decode import backbone

        device = next(model.parameters()).device
        out = backbone(model)(input_ids=torch.tensor([list(ids)], device=device), use_cache=True)
        layers = [(layer.keys, layer.values) for layer in out.cache.layers]
        leaves = None
        if torch.is_grad_enabled():
            leaves = [(k.detach().float().requires_grad_(), v.detach().float().requires_grad_()) for k, v in layers]
        config = getattr(model, "config", None)
        return cls(ids, layers, leaves, config)

    def starts(self, ids: Sequence[int]) -> bool:
        """Whether a sequence opens with exactly this prefix (and has tokens after it)."""
        return len(ids) > self.length and list(ids[: self.length]) == self.ids

    def cache(self) -> Any:
        """A fresh transformers cache holding the prefix, for one suffix forward (a forward extends its cache)."""
        from transformers import DynamicCache

        if self._leaves is None:
            data = self._layers
        else:  # the model's dtype, differentiable back to the float32 leaves
            data = [(lk.to(k.dtype), lv.to(v.dtype)) for (lk, lv), (k, v) in zip(self._leaves, self._layers, strict=True)]
        return DynamicCache(ddp_cache_data=data, config=self._config)

    def finish(self) -> bool:
        """Backpropagate the gradients the suffixes left in the leaves through the prefix's graph (once).
        False when there is nothing to do: encoded without gradient, or no suffix used it."""
        import torch

        if self._leaves is None:
            return False
        tensors, grads = [], []
        for (k, v), (lk, lv) in zip(self._layers, self._leaves, strict=True):
            for t, leaf in ((k, lk), (v, lv)):
                if leaf.grad is not None and t.requires_grad:
                    tensors.append(t)
                    grads.append(leaf.grad.to(t.dtype))
        self._leaves = None  # once: the graph is freed by the backward
        if not tensors:
            return False
        torch.autograd.backward(tensors, grads)
        return True
