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

Activation checkpointing (`replayable_under_checkpointing`): the backward replays each decoder layer's forward,
and transformers drops a layer's cache under checkpointing unless the layer says the cache only reads —
a cache that grows would be extended twice. The caches here never grow (`PrefixCache`): the encoding
forward keeps the latest keys and values it is handed, a suffix's forward gets the prefix's with its own
appended without storing them, so a replay sees what the first forward saw.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any


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
        config = getattr(model, "config", None)
        capture = prefix_cache_class()(config=config)  # `use_cache` is off under checkpointing: a cache of our own
        backbone(model)(input_ids=torch.tensor([list(ids)], device=device), cache=capture, use_cache=True)
        layers = [(layer.keys, layer.values) for layer in capture.layers]
        leaves = None
        if torch.is_grad_enabled():
            leaves = [(k.detach().float().requires_grad_(), v.detach().float().requires_grad_()) for k, v in layers]
        return cls(ids, layers, leaves, config)

    def starts(self, ids: Sequence[int]) -> bool:
        """Whether a sequence opens with exactly this prefix (and has tokens after it)."""
        return len(ids) > self.length and list(ids[: self.length]) == self.ids

    def cache(self) -> Any:
        """A fresh cache holding the prefix, for one suffix forward (`PrefixCache`: it never grows)."""
        if self._leaves is None:
            data = self._layers
        else:  # the model's dtype, differentiable back to the float32 leaves
            data = [(lk.to(k.dtype), lv.to(v.dtype)) for (lk, lv), (k, v) in zip(self._leaves, self._layers, strict=True)]
        return prefix_cache_class()(ddp_cache_data=data, config=self._config, holds_prefix=True)

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


@functools.cache
def prefix_cache_class() -> type:
    """`PrefixCache`: a transformers `DynamicCache` whose forward may be replayed (activation checkpointing).

    - Empty (`SharedPrefix.encode`): each layer keeps the keys and values of its latest forward — a replay
      puts back the same ones — and attends to them alone, as a fresh `DynamicCache` would.
    - Holding a prefix (`holds_prefix=True`, `SharedPrefix.cache`): each layer attends to the prefix's keys and
      values with the new tokens' appended, the same concatenation `DynamicCache` makes, but keeps the prefix
      alone, so a replayed layer sees the same prefix, not one extended by its first forward.
    Full-attention layers only (sliding-window layers keep a window, not a concatenation): refused otherwise.
    """
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    class PrefixCache(DynamicCache):
        def __init__(self, *args: Any, holds_prefix: bool = False, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.holds_prefix = holds_prefix
            kinds = {type(layer).__name__ for layer in self.layers if type(layer) is not DynamicLayer}
            if kinds:
                raise ValueError(f"the shared prefix supports full-attention cache layers only, not {sorted(kinds)}")

        def update(self, key_states: Any, value_states: Any, layer_idx: int, *args: Any, **kwargs: Any):
            while len(self.layers) <= layer_idx:  # built without a config: one layer per index, as DynamicCache does
                self.layers.append(DynamicLayer())
            layer = self.layers[layer_idx]
            if self.holds_prefix:
                return torch.cat([layer.keys, key_states], dim=-2), torch.cat([layer.values, value_states], dim=-2)
            if not layer.is_initialized:
                layer.lazy_initialization(key_states, value_states)
            layer.keys, layer.values = key_states, value_states
            return key_states, value_states

    return PrefixCache


def replayable_under_checkpointing(model: Any) -> None:
    """Let `model`'s checkpointed layers keep the cache they are passed (transformers' `_can_checkpoint_with_cache`,
    meant for layers that only read it): the caches the trainers pass under gradient are `PrefixCache`s, which a
    replay reads unchanged. Without it transformers would drop the prefix's cache from every checkpointed layer
    and the suffix would attend to nothing. Elsewhere under checkpointing the model builds no cache (`use_cache`
    is forced off). The SFT and GRPO gradient tests fail if transformers renames or drops the attribute."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    for module in model.modules():
        if isinstance(module, GradientCheckpointingLayer):
            module._can_checkpoint_with_cache = True
