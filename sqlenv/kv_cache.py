"""Key/value caches that decode steps write in place: transformers' `Cache` over reserved buffers.

The cached decoder (`sqlenv.decode.ModelGenerator`) builds one per batch call with room for the tokens the call
decodes, so each decode step writes its keys/values into the buffers instead of copying the whole cache
(transformers' `DynamicLayer` concatenates on every update).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

GROWTH_MIN = 64  # tokens a full layer grows by at least (a quarter of its size otherwise)


def reserved_cache(config: Any, capacity: int, buffers: Sequence[tuple[Any, Any]] = (), length: int = 0) -> Any:
    """A transformers `Cache` whose layers keep their keys/values in buffers with room for `capacity`
    tokens, so that `update` writes in place. `buffers`: per layer (keys, values), each
    [rows, kv_heads, capacity, head_dim], whose first `length` positions hold the cache so far; they are
    adopted, not copied. Without them every layer reserves its buffers on its first update.

    transformers' `DynamicLayer` concatenates on every update: each decode step copies the whole cache of
    every layer. Measured on the 2-core CPU (0.5B model, bf16, 50 rows over 900 cached tokens) that copy was
    ~10-20 % of a decode step. A layer that runs out of room grows by a quarter of its size (at least
    `GROWTH_MIN` tokens), so a wrong `capacity` costs a copy, never a wrong result.
    """
    from transformers.cache_utils import Cache

    layer_class = _reserved_layer_class()
    if buffers:
        return Cache(layers=[layer_class(capacity, k, v, length) for k, v in buffers])
    return Cache(layers=[layer_class(capacity) for _ in range(config.num_hidden_layers)])


@functools.cache
def _reserved_layer_class() -> type:
    """`reserved_cache`'s layer: a `DynamicLayer` (so masks and lengths are computed as for the default
    cache) whose `keys`/`values` are views of the first `length` positions of reserved buffers. Defined
    on first use, so that importing this module needs neither torch nor transformers."""
    from transformers.cache_utils import DynamicLayer

    class ReservedLayer(DynamicLayer):
        def __init__(self, capacity: int, keys: Any = None, values: Any = None, length: int = 0):
            super().__init__()
            self.capacity, self.length = capacity, 0
            if keys is not None:  # buffers to adopt
                self._k, self._v, self.length = keys, values, length
                self.device, self.is_initialized = keys.device, True
                self._views()

        def _reserve(self, keys: Any, values: Any) -> None:
            rows, heads, tokens, dim = keys.shape
            size = max(self.capacity, tokens)
            self._k = keys.new_zeros((rows, heads, size, dim))
            self._v = values.new_zeros((rows, heads, size, values.shape[-1]))
            self._k[:, :, :tokens], self._v[:, :, :tokens] = keys, values
            self.device, self.is_initialized, self.length = keys.device, True, tokens
            self._views()

        def _views(self) -> None:
            self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            self._reserve(key_states[:, :, :0], value_states[:, :, :0])

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            start, end = self.length, self.length + key_states.shape[-2]
            if end > self._k.shape[-2]:  # out of room: grow (a copy, as DynamicLayer makes every step)
                size = self._k.shape[-2]
                self.capacity = max(size + max(GROWTH_MIN, size // 4), end)
                self._reserve(self.keys, self.values)
            self._k[:, :, start:end], self._v[:, :, start:end] = key_states, value_states
            self.length = end
            self._views()
            return self.keys, self.values

        def batch_select_indices(self, indices: Any) -> None:
            if self.is_initialized:
                self._k, self._v = self._k[indices], self._v[indices]
                self._views()

        def release(self) -> None:
            """Drop the buffers (the layer is done with): their memory is free before the next layer's is."""
            self._k = self._v = self.keys = self.values = None
            self.is_initialized = False

        def _unsupported(self, *args: Any, **kwargs: Any) -> None:
            raise NotImplementedError("ReservedLayer supports update and batch_select_indices only (sqlenv.kv_cache)")

        # Everything else DynamicLayer can do would rebind `keys`/`values` behind the buffers' back.
        crop = batch_repeat_interleave = reorder_cache = offload = prefetch = reset = _unsupported

    return ReservedLayer
