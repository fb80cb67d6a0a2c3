"""A patch of a TRL internal: score only the labelled positions in TRL's fused LM head on a CPU.

(The other one, SFT's only: `sqlenv.train.trainable_rows` wraps `_ChunkedLogProbFunction` so that the trainable
token rows get their gradient without a dense head-weight gradient.)

TRL 1.16's `add_fused_lm_head` projects only the positions with a label on Triton devices and *every*
position elsewhere (fixed tile shapes for compilers such as Neuron). On a CPU nothing is compiled, and
most positions are prompt: an SFT episode is ~1,100 tokens of which ~150 are assistant tokens, and a
GRPO log-prob pass runs the ~900-token prompt (system prompt + tool schemas) three times a step through
the 151,936-row head. Scoring only the labelled positions gives the same loss, log-probs and gradients
(the ignored positions are zeroed either way; tests check both trainers' cases) at a fraction of the
cost (measured: an SFT step 21 -> 10 CPU-seconds per 1,024 tokens; a GRPO backward 132 -> 60 s).

The switch is the module-level `trl.trainer.utils._use_triton` that `_fused_forward` consults for exactly
this decision: on a CPU it answers yes, elsewhere TRL's own answer stands. It is restored on exit, and a
TRL without the attribute fails loudly here rather than silently training slower; the tests fail too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def compact_lm_head() -> Iterator[None]:
    """While active, TRL's fused LM head scores labelled positions only on CPU devices."""
    import trl.trainer.utils as trl_utils

    original = getattr(trl_utils, "_use_triton", None)
    if original is None:
        raise RuntimeError("trl.trainer.utils._use_triton not found: re-check compact_lm_head for this TRL version")
    trl_utils._use_triton = lambda device: device.type == "cpu" or original(device)
    try:
        yield
    finally:
        trl_utils._use_triton = original
