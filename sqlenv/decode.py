"""Batched, cached decoding of the next turn of many episodes at once: pure torch, no TRL semantics.

The episode loop (`sqlenv.episode_loop`) asks, each turn, for the next completion of every running episode in ONE batched,
left-padded generation (`ModelGenerator.generate`). On a CPU the prompt (system prompt +
tool schemas, ~700 tokens) and the growing history cost far more to re-encode every turn than the short
completions cost to decode, so each episode keeps the key/value cache of its tokens between turns and
the shared prompt prefix is encoded once per run (`reuse_cache=True`). What a turn adds to an episode's
context (a tool result, the generation prompt) is prefilled in groups of episodes with additions of
similar length, never padded to the longest addition of the batch (`_prefill_rows`); the batched part
starts at each context's last token. Each batch call's cache is reserved with room for the tokens it
decodes (`DECODE_ROOM`, grown past it: `sqlenv.kv_cache.reserved_cache`), so decode steps write keys/values in place, and
it is each episode's only copy of its keys/values while the call runs (`_padded_batch`, `_keep`).
The cache of one turn is laid out
per row as `[pad, cached tokens, pad, new tokens]`; position ids come from the attention mask (cumsum,
as `generate` makes them), so padding anywhere changes nothing for the real tokens. The decode loop is
our own rather than `model.generate`, for two reasons: `generate` keeps decoding a row that has stopped
until the longest completion of the batch ends (half of all decoded rows in a measured n50 run); ours
cuts stopped rows out of the batch. And `generate` cannot stop mid-turn and go on later; ours
(`generate_some`) hands the batch back once some rows have stopped, so the runner refills it with their
next turns and new episodes (continuous batching) while the others go on from the tokens they have.
It picks tokens as `generate` does (`sqlenv.sampling`: argmax, or transformers' own logits processors,
repetition penalty, temperature, top-k, top-p, min-p, and a multinomial draw), and tests check it against
`generate`. `reuse_cache=False` re-encodes everything
each turn; a test checks both give the same tokens.

Its one caller is the episode loop (`sqlenv.episode_loop.play_rollouts`, through `model_generator`), which
GRPO's rollouts and evaluation share; episodes are keyed by their place in the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from sqlenv.kv_cache import reserved_cache
from sqlenv.prompt_lookup import PACKED_SDPA, NgramDrafter, accept_greedy, accept_sampled
from sqlenv.sampling import GenerationSettings


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """How many leading tokens all `sequences` share (0 for none)."""
    if not sequences:
        return 0
    first, n = sequences[0], min(len(s) for s in sequences)
    for other in sequences[1:]:
        n = next((i for i in range(n) if other[i] != first[i]), n)
    return n


class TurnGenerator(Protocol):
    """What `play_rollouts` needs from a policy: the next completion ids of several episodes at once.

    `start`/`finish` bracket an episode (keyed by its question's index), so an implementation may keep
    per-episode state such as a KV cache; `generate` gets each episode's whole context and its token
    budget and returns the completion ids (stop token included, nothing after it). A generator may also
    offer `generate_some(keys, contexts, budgets, min_stopped) -> (completions, stopped)`, which can return
    mid-turn (`ModelGenerator`); `play_rollouts` then uses it for continuous batching.
    """

    def start(self, key: int, context: list[int]) -> None: ...

    def generate(
        self, keys: Sequence[int], contexts: Sequence[list[int]], budgets: Sequence[int]
    ) -> list[list[int]]: ...

    def finish(self, key: int) -> None: ...


def backbone(model: Any) -> Any:
    """The transformer under `model`'s LM head (`get_decoder()`; through a peft wrapper too, whose LoRA layers
    sit inside it): what a forward that only extends a cache runs, no logits.

    A prefill needs no logits, and asking the causal LM for the last position's (`logits_to_keep=1`) was far
    from free: for a LoRA model of several rows, the LM head got a non-contiguous [rows, 1, hidden] slice, which
    torch's matmul does not fold into one matrix product; it expanded the 151,936 x 896 head into a batched
    product, ~1 s a row on the 2-core CPU (measured: a 6-row, 35-token prefill took 8.8 s with the head,
    1.2 s without; a GRPO generation spent ~45 of its 144 s there)."""
    get = getattr(model, "get_decoder", None)
    decoder = get() if callable(get) else None
    return decoder if decoder is not None else model


# Positions reserved beyond a batch's tokens for the ones its decoding adds. A batch call decodes few tokens: in
# evaluate@base_3shot_n50 (float32, AVX2 AMD EPYC; experiments/eval_memory_32) 36 of the 38 calls decoded 1-36
# tokens (median 14; the last few rows' calls 49 and 216), each handing the batch back once a quarter of its rows
# had stopped. Reserving the rows' whole remaining budget (up to 768 tokens) made 9-32 % of each batch cache
# (median 20 %), up to ~1 GB there, memory almost never written.
DECODE_ROOM = 64
PREFILL_PAD_SHARE = 0.2  # at most this share of a grouped prefill's positions is padding
PREFILL_GROUP_TOKENS = 2048  # positions per grouped prefill forward (beyond ~128 a CPU gains nothing more)
# Drafted positions a decode step may add, all rows together (`ModelGenerator._draft_length`): measured on the
# 2-core Intel Xeon (0.5B, bf16, 700 cached tokens), a step costs ~80-90 ms from 1 to 5 rows x 2 tokens, then
# ~1 ms more per row-token: [10 rows, 5 tokens] 140 ms, [25, 3] 163, [50, 1] 163, [50, 3] 305, [50, 5] 371. The
# [50, 1] step is bimodal across processes on that CPU (163 ms in some, 267-285 ms in others; [10, 1] ~90 ms in all).
DRAFT_POSITIONS = 128


def prefill_groups(lengths: dict[int, int]) -> list[list[int]]:
    """Rows grouped for prefill by their numbers of new tokens (`lengths`: row -> count), shortest first:
    a row joins the current group while the group, padded to its longest row, stays within
    `PREFILL_PAD_SHARE` padding and `PREFILL_GROUP_TOKENS` positions."""
    groups: list[list[int]] = []
    group: list[int] = []
    real = 0
    for row in sorted(lengths, key=lambda r: (lengths[r], r)):
        n = lengths[row]
        padded = (len(group) + 1) * n
        if group and (real + n < (1 - PREFILL_PAD_SHARE) * padded or padded > PREFILL_GROUP_TOKENS):
            groups.append(group)
            group, real = [], 0
        group.append(row)
        real += n
    if group:
        groups.append(group)
    return groups


class ModelGenerator:
    """One batched, left-padded generation per turn over the running episodes, with per-episode KV caches.

    Call it under `torch.no_grad()` with the model in eval mode (`sqlenv.episode_loop.model_generator` builds it).
    """

    def __init__(
        self, model: Any, gen: GenerationSettings, eos_ids: list[int], pad_id: int, reuse_cache: bool = True,
        draft_tokens: int = 0,
    ):
        self.model, self.gen, self.eos_ids, self.pad_id, self.reuse_cache = model, gen, eos_ids, pad_id, reuse_cache
        # Prompt-lookup drafting (`sqlenv.prompt_lookup`), on a model that attends with SDPA (checked per call:
        # GRPO hands the model over later).
        self.draft_tokens = max(0, draft_tokens)
        self._drafter = NgramDrafter() if self.draft_tokens else None
        self.steps = self.step_tokens = 0  # decode forwards run, tokens they produced (a drafting step: several)
        self._prefix_ids: list[int] = []
        self._prefix_kv: list[tuple[Any, Any]] | None = None
        self._kv: dict[int, tuple[list[tuple[Any, Any]], int]] = {}  # key -> (per-layer (K, V), tokens cached)

    def encode_prefix(self, ids: Sequence[int]) -> None:
        """Encode, once, a prompt prefix that many episodes share (system prompt and tool schemas)."""
        import torch

        self._prefix_ids = list(ids)
        self._prefix_kv = None
        if self.reuse_cache and self._prefix_ids:
            out = backbone(self.model)(input_ids=torch.tensor([self._prefix_ids], device=self.model.device), use_cache=True)
            # Per layer [kv_heads, tokens, head_dim], positions 0..P-1: the same in every episode.
            self._prefix_kv = [(layer.keys[0], layer.values[0]) for layer in out.cache.layers]

    def start(self, key: int, context: list[int]) -> None:
        self._kv.pop(key, None)
        if self._prefix_kv is None:
            return
        n, limit = 0, min(len(self._prefix_ids), len(context) - 1)  # at least one token left to feed
        while n < limit and context[n] == self._prefix_ids[n]:
            n += 1
        if n:
            self._kv[key] = ([(k[:, :n], v[:, :n]) for k, v in self._prefix_kv], n)

    def finish(self, key: int) -> None:
        self._kv.pop(key, None)
        if self._drafter is not None:
            self._drafter.forget(key)

    def cached(self, key: int) -> tuple[list[tuple[Any, Any]], int] | None:
        """The (per-layer keys/values, number of leading context tokens they cover) kept for an episode."""
        return self._kv.get(key)

    def _prefill_rows(self, keys: Sequence[int], contexts: Sequence[list[int]]) -> None:
        """Extend each episode's cache to all but the last token of its context; the batched step that
        follows then starts from each episode's last context token.

        Prefilled all together, every row would be padded to the longest new chunk of the batch: one
        1,000-token query result among 50 episodes made all 50 prefill 1,000 positions (on the 2-core CPU
        that padding was most of an evaluation's time). So episodes are prefilled in groups of similar
        new lengths (`prefill_groups`: at most a fifth of a group's positions are padding), and alone
        where nothing is similar. A group is worth it because a short chunk alone uses the CPU badly:
        measured on the 2-core CPU (0.5B model, bf16), one row of 48 tokens costs 3.9 ms a token, four
        such rows together 2.5. An episode with nothing cached yet is always prefilled alone (left
        padding would then leave query positions with nothing to attend to).
        """
        alone: list[list[int]] = []
        new: dict[int, int] = {}  # episodes with a cache -> tokens to prefill
        for i, (key, ctx) in enumerate(zip(keys, contexts)):
            state = self._kv.get(key)
            if state is None and len(ctx) > 1:
                alone.append([i])
            elif state is not None and len(ctx) - 1 > state[1]:
                new[i] = len(ctx) - 1 - state[1]
        groups = alone + prefill_groups(new)
        for group in groups:
            self._prefill_group([keys[i] for i in group], [contexts[i] for i in group])

    def _prefill_group(self, keys: Sequence[int], contexts: Sequence[list[int]]) -> None:
        """One forward over the given episodes' uncached context tokens but the last; keep their caches."""
        step_ids, mask, cache = self._padded_batch(keys, [ctx[:-1] for ctx in contexts], room=0)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1] :]
        backbone(self.model)(input_ids=step_ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
        self._keep(keys, range(len(keys)), range(len(keys)), mask, cache, release=True)

    def _padded_batch(self, keys: Sequence[int], contexts: Sequence[list[int]], room: int) -> tuple[Any, Any, Any]:
        """(ids of the uncached tokens [rows, t_new], attention mask [rows, t_cache + t_new], cache) for
        one forward over the given episodes, each row laid out `[pad, cached tokens | pad, new tokens]`.

        The attention mask zeroes both pads and the position ids come from its cumsum (as `generate`
        makes them), so every real token keeps its true position. The cache's buffers are built at their
        reserved size, `room` tokens beyond the batch's own, and filled once.

        The episodes' kept caches move into the buffers: each layer's copies are dropped as soon as that
        layer is filled, and the caller keeps the rows again after the forward (`_keep`). Keeping both
        for the whole turn held every episode's keys/values twice: in float32 (caches twice bf16's size)
        that took evaluate@base_3shot_n50 to 9.5 GiB, above the 8 GB every stage is meant to stay under."""
        import torch

        device = self.model.device
        states = [self._kv.pop(k, None) for k in keys]
        cached = [s[1] if s else 0 for s in states]
        new = [ctx[c:] for ctx, c in zip(contexts, cached)]
        rows, t_cache, t_new = len(contexts), max(cached), max(len(x) for x in new)
        input_ids = torch.full((rows, t_cache + t_new), self.pad_id, dtype=torch.long)
        mask = torch.zeros((rows, t_cache + t_new), dtype=torch.long)
        for row, (ctx, c, x) in enumerate(zip(contexts, cached, new)):
            if c:
                input_ids[row, t_cache - c : t_cache] = torch.tensor(ctx[:c])
                mask[row, t_cache - c : t_cache] = 1
            input_ids[row, t_cache + t_new - len(x) :] = torch.tensor(x)
            mask[row, t_cache + t_new - len(x) :] = 1
        size = t_cache + t_new + room
        buffers = []
        if t_cache:
            longest = states[cached.index(t_cache)][0]  # per layer (keys, values), each [kv_heads, tokens, head_dim]
            k0 = longest[0][0]
            for layer in range(len(longest)):
                keys_t = k0.new_zeros((rows, k0.shape[0], size, k0.shape[2]))
                values_t = keys_t.clone()
                for row, (state, c) in enumerate(zip(states, cached)):
                    if c:
                        keys_t[row, :, t_cache - c : t_cache] = state[0][layer][0]
                        values_t[row, :, t_cache - c : t_cache] = state[0][layer][1]
                        state[0][layer] = None  # this layer's copy is in the buffer now
                buffers.append((keys_t, values_t))
        cache = reserved_cache(self.model.config, size, buffers, length=t_cache)
        return input_ids[:, t_cache:].to(device), mask.to(device), cache

    def generate(self, keys: Sequence[int], contexts: Sequence[list[int]], budgets: Sequence[int]) -> list[list[int]]:
        return self._generate(keys, contexts, budgets, min_stopped=len(keys))[0]

    def generate_some(
        self, keys: Sequence[int], contexts: Sequence[list[int]], budgets: Sequence[int], min_stopped: int
    ) -> tuple[list[list[int]], list[bool]]:
        """`generate`, handing the batch back once `min_stopped` rows have stopped: (completions, stopped).

        A row that has not stopped returns the tokens it has so far and keeps its cache; called again with
        its context + those tokens (and the budget left), it goes on exactly where it was. This is what
        keeps the batch full (continuous batching): a turn of one episode no longer waits for the longest
        turn of the batch, since `play_rollouts` runs the stopped rows' tools, admits queued episodes and
        decodes them all together again. Measured on the 2-core CPU (0.5B model, bf16, 700 cached tokens),
        a decode step costs 94 ms for one row, 108 for 10 and 200 for 50: the weights are read once per
        step whatever the rows, so a batch that waits for its longest turn (an n50 evaluation averaged
        9.5 rows a step) pays three times as much per token as a full one.
        """
        return self._generate(keys, contexts, budgets, min_stopped)

    def _generate(self, keys: Sequence[int], contexts: Sequence[list[int]], budgets: Sequence[int],
                  min_stopped: int) -> tuple[list[list[int]], list[bool]]:  # fmt: skip
        if self.reuse_cache:
            self._prefill_rows(keys, contexts)
        if self._drafts():
            for key, context in zip(keys, contexts):
                self._drafter.extend(key, context)
        # Room for the tokens decoding adds, so the decode loop writes each step's keys/values in place instead
        # of copying the whole cache; beyond it the cache grows (`reserved_cache`). A drafting step writes its
        # guesses too (the rejected ones stay as masked holes until the batch's caches are kept).
        room = DECODE_ROOM * (2 if self._drafts() else 1)
        step_ids, mask, cache = self._padded_batch(keys, contexts, room=min(max(budgets, default=0), room))
        return self._decode(keys, contexts, step_ids, mask, cache, budgets, min_stopped)

    def _drafts(self) -> bool:
        """Whether steps guess tokens: `draft_tokens` > 0 and the model attends with SDPA (a several-token
        step's mask is the boolean one SDPA takes; `packed_attention` makes it cheap)."""
        attention = getattr(getattr(self.model, "config", None), "_attn_implementation", None)
        return self._drafter is not None and attention in ("sdpa", PACKED_SDPA)

    def _draft_length(self, rows: int) -> int:
        """Tokens to guess per row in a step of `rows` rows: `draft_tokens`, fewer in a full batch, where
        every guessed position costs compute (`DRAFT_POSITIONS`)."""
        return max(0, min(self.draft_tokens, DRAFT_POSITIONS // max(rows, 1) - 1))

    def _decode(self, keys: Sequence[int], contexts: Sequence[list[int]], step_ids: Any, mask: Any, cache: Any,
                budgets: Sequence[int], min_stopped: int) -> tuple[list[list[int]], list[bool]]:  # fmt: skip
        """Prefill `step_ids` (the tokens after the cached ones), then decode; a row leaves the batch once it
        has stopped, the batch returns once `min_stopped` rows have (or all have).

        `generate` would keep decoding finished rows until the longest completion of the turn ends (on
        this CPU that was half of all decoded rows). Here a stopped row gets mask 0 from then on, and once
        a quarter of the batch has stopped those rows are cut out of the cache (keeping their keys/values
        first), so later tokens cost only the rows still running. On an early return every row's
        keys/values are kept: a running row's cover its context and all its tokens so far but the last.

        With `draft_tokens`, a step feeds each running row its last token followed by the tokens
        `NgramDrafter` guesses come next; the row keeps what `accept_greedy` (the argmax tokens up to and
        including the first that differs from the guess) or `accept_sampled` (speculative sampling: each
        token distributed as a token-by-token draw) returns, and the rejected guesses' cache positions get
        mask 0. A repetition penalty (`GenerationSettings.repetition_penalty`) reads each row's sequence so far
        (`contexts` + its tokens, + the guesses before each drafted position), as `generate` reads an unpadded row.
        """
        import torch

        choose = self.gen.token_chooser()
        completions: list[list[int]] = [[] for _ in keys]
        running = [budget > 0 for budget in budgets]
        rows = list(range(len(keys)))  # batch row -> index into keys
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1] :]
        guesses: list[list[int]] = [[] for _ in rows]  # per batch row: the drafted tokens fed after its last one
        drafts = self._drafts()
        while True:
            width = step_ids.shape[1]
            drafting = any(guesses)
            if drafting:  # each step token sees the real cached tokens and the real step tokens up to itself
                attention = mask.bool()[:, None, None, :].repeat(1, 1, width, 1)
                attention[..., -width:] &= torch.ones(width, width, dtype=torch.bool, device=mask.device).tril()
            else:
                attention = mask
            logits = self.model(
                input_ids=step_ids,
                attention_mask=attention,
                position_ids=positions,
                cache=cache,
                use_cache=True,
                logits_to_keep=width if drafting else 1,
            ).logits
            history = None
            if choose.needs_history:  # per step position: the row's tokens up to the one fed there
                seen = [contexts[i] + completions[i] for i in rows]
                history = [s + g[:j] for s, g in zip(seen, guesses) for j in range(width)] if drafting else seen
            if not drafting:
                picked = [[t] for t in choose(logits[:, -1], history).tolist()]
            elif self.gen.do_sample:
                picked = accept_sampled(choose.probabilities(logits.flatten(0, 1), history).view(*logits.shape[:2], -1),
                                        guesses)  # fmt: skip
            elif choose.needs_history:
                picked = accept_greedy(choose.scores(logits.flatten(0, 1), history).view(*logits.shape[:2], -1), guesses)
            else:
                picked = accept_greedy(logits, guesses)
            self.steps += 1
            kept = []  # per batch row: the step's tokens that stay in its cache (the fed ones now its context)
            for b, i in enumerate(rows):
                n = 0
                while running[i] and n < len(picked[b]):
                    token = picked[b][n]
                    completions[i].append(token)
                    running[i] = token not in self.eos_ids and len(completions[i]) < budgets[i]
                    n += 1
                kept.append(n)
                self.step_tokens += n
                if drafts and n:
                    self._drafter.append(keys[i], completions[i][-n:])
            if drafting:
                columns = torch.arange(width, device=mask.device)[None, :]
                mask[:, -width:] = (columns < torch.tensor(kept, device=mask.device)[:, None]).to(mask.dtype)
                following = positions[:, :1] + torch.tensor(kept, device=mask.device)[:, None]
            else:
                following = positions[:, -1:] + 1
            stopped = [b for b, i in enumerate(rows) if not running[i]]
            if len(stopped) == len(rows) or running.count(False) >= min_stopped:
                self._keep(keys, rows, range(len(rows)), mask, cache, release=True)
                return completions, [not r for r in running]
            if 4 * len(stopped) >= len(rows):
                self._keep(keys, rows, stopped, mask, cache)
                alive = [b for b, i in enumerate(rows) if running[i]]
                index = torch.tensor(alive, device=mask.device)
                cache.batch_select_indices(index)
                mask, following = mask[index], following[index]
                rows = [rows[b] for b in alive]
            draft = self._draft_length(len(rows)) if drafts else 0
            feeds, guesses = [], []
            for i in rows:
                guess = []
                if running[i] and draft:
                    guess = self._drafter.draft(keys[i], min(draft, budgets[i] - len(completions[i]) - 1))
                feeds.append([completions[i][-1], *guess] if running[i] else [])
                guesses.append(guess)
            width = max(1, *(len(f) for f in feeds))
            step_ids = torch.tensor([f + [self.pad_id] * (width - len(f)) for f in feeds], device=mask.device)
            live = torch.tensor([[1] * len(f) + [0] * (width - len(f)) for f in feeds], dtype=mask.dtype,
                                device=mask.device)  # fmt: skip
            mask = torch.cat([mask, live], dim=1)
            positions = following + torch.arange(width, device=mask.device)[None, :]

    def _keep(self, keys: Sequence[int], rows: Sequence[int], batch_rows: Any, mask: Any, cache: Any,
              release: bool = False) -> None:  # fmt: skip
        """Keep the keys/values of the given batch rows' real tokens (mask 1), per episode, for next turn.
        A completion's last token is never fed back, so it is not among them. `release`: the batch is
        over, so each layer's buffers are dropped once its rows are copied out (the copies and the whole
        batch cache are then never held at once)."""
        if not self.reuse_cache:
            return
        index = {b: mask[b].nonzero().squeeze(1) for b in batch_rows}
        kept: dict[int, list[tuple[Any, Any]]] = {b: [] for b in batch_rows}
        for layer in cache.layers:
            for b in batch_rows:
                kept[b].append((layer.keys[b].index_select(1, index[b]), layer.values[b].index_select(1, index[b])))
            if release:
                layer.release()
        for b in batch_rows:
            self._kv[keys[rows[b]]] = (kept[b], len(index[b]))
