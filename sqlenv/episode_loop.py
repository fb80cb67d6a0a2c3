"""The one episode loop: a policy plays many episodes turn by turn, as GRPO trains and evaluation scores.

GRPO's rollouts (`sqlenv.train.rollouts.RolloutFunc`, through TRL 1.16's public `GRPOTrainer(rollout_func=...)`)
and every model evaluation (`sqlenv.eval.rollout.play_model`) call `play_rollouts`, with the decoder
`model_generator` builds (vLLM's `sqlenv.eval.vllm_backend.VLLMGenerator` for `evaluate.backend: vllm`); only
the decoding differs (sampled or greedy). A rollout is what TRL's own `environment_factory` tool loop would have
produced for the same turns (`grpo.rollout_decoder: trl` keeps that loop as the library-native option; a test
replays scripted turns through both and compares the completion ids, the environment mask, each reward
component and the verdict). The rules of an episode are `sqlenv.episodes.Episode`'s, its tokens
`sqlenv.rendering`'s:

- token sequence: by concatenation, `context + completion_ids + tool_suffix_ids(tool_messages)`, never by
  re-tokenising the conversation; the tool-result tokens are the environment's (`env_mask` 0), the
  model's turns the policy's (1); a completion keeps its stop token and nothing after it;
- `max_turns` is TRL's `max_tool_calling_iterations`: at most that many turns have their calls executed. TRL
  then generates once more without executing anything: a training rollout does too (`final_turn=True`: those
  tokens are trained on); evaluation skips that generation (nothing it does can change the calls,
  observations, reward or verdict);
- `max_total_tokens` is `max_completion_length` (everything after the prompt, tool results included), and
  each turn may use what is left of it (`max_new_tokens_per_turn` is an optional extra cap, off by
  default). Tool results that would push a rollout past it (or past the model's context) are left out of
  its tokens and the episode ends; the env has run the calls either way, so the transcript keeps them.
With `parser="lenient"` (base checkpoints, see `sqlenv.env.tool_calls`) a turn's calls may also be JSON
written as text; that is the one, stated departure from a training rollout, and only base policies use it.

Batching: a rolling pool of `batch_size` episodes; each turn, the next completion of every running
episode comes from ONE batched generation (`sqlenv.decode.ModelGenerator`, which keeps each episode's
key/value cache between turns; or vLLM), then tools run, then finished episodes leave and queued ones take
their slots. With `ModelGenerator` the batch is handed back once a quarter of it has ended its turn
(continuous batching): an episode's next turn does not wait for the longest turn of the batch, and the
tokens are the ones a whole-turn batch (or one episode at a time) gives. Each running episode's place in
the loop is one `RolloutState`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlenv.decode import ModelGenerator, TurnGenerator
from sqlenv.env.environment import EnvConfig
from sqlenv.env.tool_calls import parse_turn
from sqlenv.episodes import Episode
from sqlenv.rendering import (
    ensure_response_parser,
    prompt_token_ids,
    rollout_chat_template,
    shared_prompt_prefix,
    tool_suffix_ids,
)
from sqlenv.sampling import GenerationSettings
from sqlenv.types import EpisodeRecord, Question


@dataclass
class Rollout:
    """One played episode: its record, and its tokens as a GRPO rollout (`prompt_ids` then `completion_ids`,
    every model turn and tool result after the prompt; `env_mask[i]` is 0 where completion token i is the
    environment's, 1 where the policy generated it)."""

    record: EpisodeRecord
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    summary: dict[str, Any]  # the environment's own account (`SQLEnv.summary`), what GRPO's reward functions read


@dataclass
class RolloutState:
    """Where one running episode stands in the loop."""

    episode: Episode
    context: list[int]  # the prompt and everything after it, with the current turn's tokens so far
    prompt_len: int
    turn_start: int  # length of the context the current turn continues
    tokens: int = 0  # tokens the model generated
    completion: list[int] = field(default_factory=list)  # the rollout's tokens after its prompt ...
    env_mask: list[int] = field(default_factory=list)  # ... and whose they are (0: the environment's)
    final_turn: bool = False  # past the turn budget, generating the one turn TRL still generates

    def budget(self, per_turn: int, max_total_tokens: int) -> int:
        """Tokens the next generation may add: what is left of the turn's and of the episode's budget."""
        return min(per_turn - (len(self.context) - self.turn_start), max_total_tokens - (len(self.context) - self.prompt_len))

    def take(self, ids: list[int], env: bool) -> None:
        """Append tokens to the rollout, the policy's (`env` False) or the environment's."""
        self.completion += ids
        self.env_mask += [0 if env else 1] * len(ids)

    def rollout(self) -> Rollout:
        episode = self.episode
        return Rollout(episode.to_record(tokens=self.tokens), self.context[: self.prompt_len], self.completion,
                       self.env_mask, episode.summary())  # fmt: skip


def play_rollouts(
    generator: TurnGenerator,
    tokenizer: Any,
    questions: Sequence[Question],
    *,
    db_dir: str | Path | None,
    env_config: EnvConfig = EnvConfig(),
    system_prompt: str | None = None,
    prompts: Sequence[Sequence[dict[str, Any]]] | None = None,
    batch_size: int = 8,
    max_turns: int | None = None,
    max_new_tokens_per_turn: int | None = None,
    max_total_tokens: int = 4096,
    max_positions: int | None = None,
    progress: bool = True,
    chat_template_kwargs: dict[str, Any] | None = None,
    parser: str = "strict",
    after_batch: Callable[[], Any] | None = None,
    final_turn: bool = False,
) -> list[Rollout]:
    """The episode loop over any `TurnGenerator`; rollouts come back in question order.

    `prompts` (one per question): the messages each episode opens with (TRL's prompt), instead of
    `[system_prompt, the question]`.

    A rolling pool: up to `batch_size` episodes run at once, each turn is one `generator.generate` call
    over all of them, finished episodes leave and queued ones take their place. A generator that can hand
    a batch back early (`ModelGenerator.generate_some`) is asked to once a quarter of its rows have ended
    their turn: those episodes run their tools, queued ones start, and the rest go on from the tokens they
    have, all in the next batch (continuous batching: the same tokens, fewer decode steps).

    `final_turn`: after the turn budget, generate the one turn TRL's loop still generates (its calls are
    not run); training rollouts want its tokens, evaluation does not.

    `after_batch` is called after every batch call. Each call leaves per-episode caches of new sizes behind,
    and glibc keeps the memory the old ones freed resident: with a hand-back every quarter of the rows the
    heap fragmented, and `evaluate@base_3shot_n50` (the longest prompts) peaked at 7.1-8.6 GiB; the
    evaluation stage passes a `sqlenv.train.heap.Trimmer`, which hands free pages back to the OS once the
    process holds more than 5 GiB (5.8 GiB peak, 7 trims in 43 batches).
    """
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if (max_new_tokens_per_turn is not None and max_new_tokens_per_turn < 1) or max_total_tokens < 1:
        raise ValueError("max_new_tokens_per_turn and max_total_tokens must be >= 1")
    if prompts is not None and len(prompts) != len(questions):
        raise ValueError(f"{len(prompts)} prompts for {len(questions)} questions")
    per_turn = max_new_tokens_per_turn or max_total_tokens
    ensure_response_parser(tokenizer)
    template = rollout_chat_template(tokenizer)
    kwargs = chat_template_kwargs or {}
    max_positions = max_positions or 10**9

    def start(key: int) -> RolloutState:
        episode = Episode(questions[key], db_dir=db_dir, env_config=env_config, system_prompt=system_prompt,
                          max_turns=max_turns, prompt=None if prompts is None else prompts[key])  # fmt: skip
        ids = prompt_token_ids(tokenizer, episode.messages, episode.tools, template, kwargs)
        generator.start(key, ids)
        return RolloutState(episode, ids, prompt_len=len(ids), turn_start=len(ids))

    def end_turn(state: RolloutState, turn: list[int], cut: bool) -> None:
        """The turn's tokens are all there: parse it, run its calls, append what follows it."""
        episode, context = state.episode, state.context[: state.turn_start]
        state.take(turn, env=False)
        parsed, strict, lenient = parse_turn(tokenizer, turn, context, episode.tools, parser)
        if state.final_turn:  # TRL's turn after the turn budget: kept, its calls never run
            episode.note_unplayed_turn(parsed)
            state.final_turn = False
            return
        tool_messages = episode.apply_turn(parsed, strict, lenient, cut=cut)
        if not tool_messages:
            return
        # the results follow the turn, unless they would not fit (TRL leaves them out then)
        suffix = tool_suffix_ids(tokenizer, tool_messages, template, kwargs)
        ids = context + turn + suffix
        used = len(ids) - state.prompt_len
        if used > max_total_tokens:
            episode.end("token budget")
        elif len(ids) >= max_positions:
            episode.end("context length")
        else:
            state.take(suffix, env=True)
            if used == max_total_tokens:
                episode.end("token budget")  # nothing is left for a next turn
            elif not episode.done or (final_turn and episode.end_reason == "turn budget"):
                state.context, state.turn_start = ids, len(ids)
                state.final_turn = episode.done

    generate_some = getattr(generator, "generate_some", None)
    states: dict[int, RolloutState] = {}
    results: list[Rollout | None] = [None] * len(questions)
    queue = deque(range(len(questions)))
    with tqdm(total=len(questions), desc="episodes", unit="ep", disable=not progress) as bar:
        while queue or states:
            while queue and len(states) < batch_size:
                key = queue.popleft()
                states[key] = start(key)
            running = list(states)
            # Each completion fits the turn's and the episode's token budget (TRL: max_completion_length).
            budgets = [states[k].budget(per_turn, max_total_tokens) for k in running]
            batch = [states[k].context for k in running]
            if generate_some is None:
                new, stopped = generator.generate(running, batch, budgets), [True] * len(running)
            else:
                new, stopped = generate_some(running, batch, budgets, min_stopped=-(-len(running) // 4))
            if after_batch is not None:
                after_batch()
            for key, ids_new, turn_over, budget in zip(running, new, stopped, budgets):
                state = states[key]
                state.tokens += len(ids_new)
                if not turn_over:  # goes on in the next batch
                    state.context = state.context + ids_new
                    continue
                # cut: this call's part of the turn used up what was left
                end_turn(state, state.context[state.turn_start :] + ids_new, cut=len(ids_new) >= budget)
                if state.episode.done and not state.final_turn:
                    results[key] = state.rollout()
                    generator.finish(key)
                    del states[key]
                    bar.update(1)
    return [r for r in results if r is not None]


@contextmanager
def model_generator(
    model: Any,
    tokenizer: Any,
    gen: GenerationSettings,
    eos_ids: list[int],
    *,
    system_prompt: str | None,
    env_config: EnvConfig,
    chat_template_kwargs: dict[str, Any] | None = None,
    reuse_cache: bool = True,
    draft_tokens: int = 0,
) -> Iterator[ModelGenerator]:
    """The cached decoder evaluation and GRPO's rollouts both play with: `ModelGenerator` on `model` under
    `torch.no_grad()`, with prompt-lookup drafting of `draft_tokens` (inside `packed_attention`, the SDPA variant
    drafting steps are cheap with) and, with `reuse_cache`, the prompt prefix every episode shares (`system_prompt`
    and the tool schemas) encoded once. The caller puts the model in eval mode and seeds sampling."""
    import torch

    from sqlenv.prompt_lookup import packed_attention

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    with torch.no_grad(), packed_attention(model) if draft_tokens else nullcontext():
        generator = ModelGenerator(model, gen, eos_ids, pad_id, reuse_cache=reuse_cache, draft_tokens=draft_tokens)
        if reuse_cache:
            generator.encode_prefix(shared_prompt_prefix(tokenizer, system_prompt, rollout_chat_template(tokenizer),
                                                         chat_template_kwargs, env_config))  # fmt: skip
        yield generator
