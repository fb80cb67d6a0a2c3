"""SFT's trainable token rows without whole-vocabulary copies: peft's embedding and tied LM head, and TRL's fused head.

SFT trains the `<tool_call>` rows (and the other rows the base left untrained) with peft's
`trainable_token_indices` (`sqlenv.train.sft`): ~13 rows of Qwen2.5's tied 151,936 x 896 matrix. peft 0.21 builds
the merged matrix (the base with those rows swapped in, `index_copy`) on every forward of the input embedding and of
the tied head, and autograd carries dense matrix-sized gradients back to the 13 rows: the embedding's scatter,
`index_copy`'s backward, and TRL's fused LM head, which accumulates a float32 gradient of the whole head matrix. A
profile of 3 default SFT steps on the 2-core Intel Xeon (bf16) spent 13 % of their time in 33 copies and 15
fills of such matrices (272 MB in bf16, 545 MB in float32: 3.5 of 26.3 s), besides the head's weight-gradient products.

Inside `sparse_trainable_rows(model)` (SFT's `trainer.train()`; peft's and TRL's own code again on exit):
- input embedding: the tokens are looked up in the frozen base matrix, and the trained rows are swapped in at the
  positions holding one of their tokens: the same values, the gradient to those rows only;
- tied head: its `weight` (what TRL's fused head reads) is a merged copy made once, the trained rows written into it
  in place on every read, without gradient, so the fused head computes no weight gradient. TRL's
  `_ChunkedLogProbFunction` is wrapped: when it scores with that weight, each log-prob gets a term that is zero in
  value and carries the log-prob's gradient with respect to the trained rows,
      d log p(t_n) / d T_j = s h_n (1[t_n = row j] - p_nj),   s = logit_scale / temperature,
  as c_n - c_n.detach() with c_n = s sum_j (1[t_n = row j] - p_nj) (h_n . T_j), h_n and p_nj held constant. p_nj
  comes from the rows' logits computed as TRL computes its tiles (in the compute dtype) and TRL's normaliser
  (target logit minus log-prob). The gradient with respect to the hidden states is TRL's own (same weight values).

Same loss and the same LoRA gradients (bit-identical in a bf16 check on the real model); the trained rows' gradient
differs by float rounding only (TRL rounds each logit gradient to the compute dtype; here it stays float32); tests
compare both ways on the tiny model. What SFT's loss reads is the log-probs: the entropy TRL also returns (a logged
metric) carries no gradient to the rows here, which a test would show if TRL's SFT loss ever used it.

Library internals relied on, checked on entry (a clear error, and the tests fail, if they change): peft's
`TrainableTokensLayer` (`token_indices`, `trainable_tokens_delta`, `base_layer`, `forward_adapters`,
`get_merged_weights`, `merged`, `disable_adapters`, `active_adapters`) and `TrainableTokensWrapper._getattr_wrapped`
(the tied head's `weight` read), and `trl.trainer.utils._ChunkedLogProbFunction`
with its `forward` arguments (`_LOGPROB_ARGUMENTS`). Not for several active token adapters or a merged one, nor an
embedding other than `torch.nn.Embedding` itself (peft's own path then), nor a head with a bias or a logit softcap
(refused).
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Iterator
from typing import Any

# The arguments of TRL 1.16's `ChunkedLogProbFunction.forward` after ctx, in order: what `_LogProbsWithRows` reads.
_LOGPROB_ARGUMENTS = (
    "hidden", "weight", "bias", "targets", "temperature", "chunk_size", "final_logit_softcapping", "logit_scale", "outputs",
)  # fmt: skip
_PEFT_ATTRIBUTES = ("token_indices", "trainable_tokens_delta", "base_layer", "merged", "disable_adapters", "active_adapters")
_ROWS = "_sqlenv_trainable_rows"  # the attribute that marks the head's merged weight for `_LogProbsWithRows`


def token_layers(model: Any) -> list[Any]:
    """peft's `TrainableTokensLayer`s in `model` (the embedding's and a tied head's), in module order."""
    try:
        from peft.tuners.trainable_tokens.layer import TrainableTokensLayer
    except ImportError:
        return []
    return [m for m in model.modules() if isinstance(m, TrainableTokensLayer)]


@contextlib.contextmanager
def sparse_trainable_rows(model: Any) -> Iterator[int]:
    """Within it, `model`'s trainable token rows train without whole-matrix copies (module docstring).
    Yields how many token layers it took over (0: none in `model`, nothing changed).

    Two places are taken over, nothing else: the forward of an embedding's token layer, and what reading the tied
    head's `weight` returns (peft's wrapper answers that read with `get_merged_weights`; TRL's fused head is the
    reader). Every other use of the merged matrix — an embedding this path does not cover, the head's own forward —
    stays peft's, with its gradient."""
    layers = token_layers(model)
    if not layers:
        yield 0
        return
    import torch
    import trl.trainer.utils as trl_utils

    original = getattr(trl_utils, "_ChunkedLogProbFunction", None)
    _check_trl(original)
    for layer in layers:
        missing = [name for name in _PEFT_ATTRIBUTES if not hasattr(layer, name)]
        missing += [name for name in ("forward_adapters", "get_merged_weights") if not callable(getattr(type(layer), name, None))]
        if missing:
            raise RuntimeError(f"peft's TrainableTokensLayer lacks {missing}: re-check sqlenv.train.trainable_rows")
    embeddings = [layer for layer in layers if isinstance(layer.base_layer, torch.nn.Embedding)]
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    head_layer = getattr(head, "token_adapter", None) if head is not None else None
    if head_layer is not None and not (head_layer in layers and isinstance(head_layer.base_layer, torch.nn.Linear)):
        head_layer = None
    if head_layer is not None and not callable(getattr(type(head), "_getattr_wrapped", None)):
        raise RuntimeError("peft's TrainableTokensWrapper lacks _getattr_wrapped: re-check sqlenv.train.trainable_rows")
    for layer in embeddings:
        layer.forward_adapters = types.MethodType(_forward_adapters, layer)
    if head_layer is not None:
        head._getattr_wrapped = types.MethodType(_head_attribute, head)
    trl_utils._ChunkedLogProbFunction = _LogProbsWithRows(original)
    try:
        yield len(embeddings) + (head_layer is not None)
    finally:
        trl_utils._ChunkedLogProbFunction = original
        if head_layer is not None:
            head.__dict__.pop("_getattr_wrapped", None)
        for layer in layers:
            for name in ("forward_adapters", "_sqlenv_rows_state"):
                layer.__dict__.pop(name, None)


def _check_trl(function: Any) -> None:
    forward = getattr(function, "forward", None)
    names = tuple(inspect.signature(forward).parameters)[1:] if forward is not None else ()
    if names[: len(_LOGPROB_ARGUMENTS)] != _LOGPROB_ARGUMENTS:
        raise RuntimeError(
            "trl.trainer.utils._ChunkedLogProbFunction is missing or takes other arguments "
            f"({names}): re-check sqlenv.train.trainable_rows for this TRL version"
        )


def _sparse(layer: Any, active: Any) -> bool:
    """Whether this call can take the sparse path: one active adapter, not merged, adapters on."""
    return not layer.disable_adapters and not layer.merged and len(active) == 1


def _state(layer: Any) -> dict[str, Any]:
    """The layer's trained rows: their indices, a vocabulary -> row-number lookup (-1 elsewhere), and the head's
    merged copy once made."""
    import torch

    weight = layer.base_layer.weight
    state = layer.__dict__.get("_sqlenv_rows_state")
    if state is None or state["index"].device != weight.device:
        (name,) = layer.active_adapters
        index = torch.tensor(layer.token_indices[name], device=weight.device)
        lookup = torch.full((weight.shape[0],), -1, dtype=torch.long, device=weight.device)
        lookup[index] = torch.arange(len(index), device=weight.device)
        state = layer.__dict__["_sqlenv_rows_state"] = {"index": index, "lookup": lookup, "merged": None}
    return state


def _forward_adapters(layer: Any, x: Any, active_adapters: Any, *args: Any, **kwargs: Any) -> Any:
    """peft's forward for an embedding: the base lookup with the trained rows swapped in where their tokens are."""
    import torch
    import torch.nn.functional as F

    base = layer.base_layer
    # Exactly torch's embedding, whose forward is the lookup below: a subclass may scale or change its output (Gemma3's
    # multiplies by `embed_scale`), and takes peft's own path, which knows such layers.
    plain = type(base) is torch.nn.Embedding and base.max_norm is None and not base.sparse and not base.scale_grad_by_freq
    if not (plain and _sparse(layer, active_adapters)):
        return type(layer).forward_adapters(layer, x, active_adapters, *args, **kwargs)
    state = _state(layer)
    out = F.embedding(x, base.weight, padding_idx=base.padding_idx)
    row = state["lookup"][x]
    hit = row >= 0
    delta = layer.trainable_tokens_delta[active_adapters[0]]
    return out.index_put((hit,), F.embedding(row[hit], delta).to(out.dtype))


def _head_attribute(head: Any, name: str, modules: Any) -> Any:
    """The tied head wrapper's attribute read (peft's `_getattr_wrapped`): `weight` is `_merged_weights`' copy."""
    layer = modules["token_adapter"]
    if name == "weight" and _sparse(layer, layer.active_adapters):
        return _merged_weights(layer, layer.active_adapters)
    return type(head)._getattr_wrapped(head, name, modules)


def _merged_weights(layer: Any, active_adapters: Any) -> Any:
    """The merged matrix without gradient: a copy made once, the trained rows written in place on every read, marked
    for `_LogProbsWithRows` (which adds their gradient to the log-probs)."""
    import torch

    state = _state(layer)
    if state["merged"] is None:
        state["merged"] = layer.base_layer.weight.detach().clone()
    merged = state["merged"]
    delta = layer.trainable_tokens_delta[active_adapters[0]]
    with torch.no_grad():
        rows = delta.to(merged.dtype)
        # Written only when the rows changed (an optimizer step): an in-place write bumps the copy's version, and a
        # read between a forward and its backward (`lm_head.weight.dtype`, say) must not invalidate the saved weight.
        if not torch.equal(merged.index_select(0, state["index"]), rows):
            merged.index_copy_(0, state["index"], rows)
    weight = merged.detach()  # a new tensor on the same memory, so the mark belongs to this read only
    setattr(weight, _ROWS, (delta, state["index"], state["lookup"]))
    return weight


class _LogProbsWithRows:
    """TRL's `_ChunkedLogProbFunction`, whose log-probs also carry the trained rows' gradient when the weight is
    `_merged_weights`' (see the module docstring)."""

    def __init__(self, function: Any):
        self.function = function
        self.signature = inspect.signature(function.forward)

    def apply(self, *args: Any, **kwargs: Any) -> Any:
        out = self.function.apply(*args, **kwargs)
        bound = self.signature.bind(None, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        rows = getattr(a["weight"], _ROWS, None)
        if rows is None:
            return out
        if a["bias"] is not None or a["final_logit_softcapping"] is not None:
            raise ValueError("trainable token rows on a head with a bias or a logit softcap are not supported")
        delta, index, lookup = rows
        import torch

        if not (torch.is_grad_enabled() and delta.requires_grad):
            return out
        scale = a["logit_scale"] / a["temperature"]
        term = _row_term(a["hidden"], a["weight"], a["targets"], out[0], delta, index, lookup, scale)
        return (out[0] + term, *out[1:])


def _row_term(hidden: Any, weight: Any, targets: Any, logprobs: Any, delta: Any, index: Any, lookup: Any, scale: float) -> Any:
    """Zero in value; its gradient with respect to `delta` (the trained rows) is that of `logprobs`."""
    import torch

    device = hidden.device.type
    compute = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
    with torch.no_grad(), torch.autocast(device, enabled=False):
        h = hidden.detach().to(compute)
        row_logits = (h @ weight.index_select(0, index).to(compute).t()).float()  # [N, rows], as TRL's tiles
        target_w = weight.index_select(0, targets).to(compute)
        target_logits = torch.bmm(h.unsqueeze(1), target_w.unsqueeze(2)).float().view(-1)
        log_z = scale * target_logits - logprobs.detach().float()
        coeff = -torch.exp(scale * row_logits - log_z.unsqueeze(1))  # -p
        row = lookup[targets]
        hit = (row >= 0).nonzero().view(-1)
        coeff[hit, row[hit]] += 1.0
        coeff *= scale
        h = h.float()
    with torch.autocast(device, enabled=False):
        c = (coeff * (h @ delta.float().t())).sum(-1)
    return (c - c.detach()).to(logprobs.dtype)
