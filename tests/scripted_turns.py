"""A `TurnGenerator` that replays scripted turn texts: GRPO's rollouts without a model's sampling.

`RolloutFunc(make_generator=...)` (and `sqlenv.train.rollouts.model_generator`, which the scripted stage
replaces) build one per generation batch; `texts(key, turn, context)` says what episode `key` (its place in
the batch) writes in its `turn`-th turn. Budgets cut a turn as a model's would be cut.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class ReplayTurns:
    def __init__(self, tokenizer, texts: Callable[[int, int, Sequence[int]], str]):
        self.tokenizer, self.texts = tokenizer, texts
        self.turn: dict[int, int] = {}
        self.batches: list[int] = []

    def start(self, key, context):
        self.turn[key] = 0

    def generate(self, keys, contexts, budgets):
        self.batches.append(len(keys))
        out = []
        for key, context, budget in zip(keys, contexts, budgets):
            text = self.texts(key, self.turn[key], context)
            self.turn[key] += 1
            out.append(self.tokenizer(text, add_special_tokens=False)["input_ids"][:budget])
        return out

    def finish(self, key):
        self.turn.pop(key, None)


def replaying(tokenizer, texts: Callable[[int, int, Sequence[int]], str]):
    """A `make_generator` for `RolloutFunc`: a fresh `ReplayTurns` per generation batch."""
    return lambda model, gen, eos_ids, pad_id, draft_tokens: ReplayTurns(tokenizer, texts)
