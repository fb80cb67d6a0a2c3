"""Model evaluation's episodes: `play_model` plays questions greedily (or seeded sampling) through the one
episode loop, `sqlenv.episode_loop.play_rollouts`, which GRPO's rollouts also play, with the same decoder
(`sqlenv.episode_loop.model_generator`), so an evaluated episode is rendered and ended exactly as a training
rollout (see `sqlenv.episodes` and `sqlenv.episode_loop` for the rules).

What is evaluation's own: greedy decoding by default with the caller's RNG left alone, the model in eval mode, vLLM's
offline engine as the other backend (`sqlenv.eval.vllm_backend.VLLMGenerator`), and no generation after the turn
budget (it cannot change a verdict). `run_episodes` is `play_model`'s former name (deprecated).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlenv.env.environment import EnvConfig
from sqlenv.episode_loop import model_generator, play_rollouts
from sqlenv.rendering import ensure_response_parser, generation_eos_ids
from sqlenv.sampling import GenerationSettings
from sqlenv.types import EpisodeRecord, Question


def play_model(
    model: Any,
    tokenizer: Any,
    questions: Sequence[Question],
    *,
    db_dir: str | Path | None,
    env_config: EnvConfig = EnvConfig(),
    gen: GenerationSettings = GenerationSettings(),
    system_prompt: str | None = None,
    batch_size: int = 8,
    max_turns: int | None = None,
    max_new_tokens_per_turn: int | None = None,
    max_total_tokens: int = 4096,
    progress: bool = True,
    reuse_cache: bool = True,
    chat_template_kwargs: dict[str, Any] | None = None,
    parser: str = "strict",
    backend: str = "hf",
    llm_kwargs: dict[str, Any] | None = None,
    after_batch: Callable[[], Any] | None = None,
    draft_tokens: int = 0,
) -> list[EpisodeRecord]:
    """Play every question with `model` (a causal LM) and return one EpisodeRecord per question, in order.

    `batch_size` episodes run at once (1 = one at a time, through the very same code). `max_turns`
    defaults to the env's step budget; `max_total_tokens` bounds everything after the prompt (TRL's
    `max_completion_length`), `max_new_tokens_per_turn` (optional) one completion; `parser` reads the calls
    (`sqlenv.env.tool_calls`); `after_batch` is called after every batch call (`play_rollouts`). Greedy
    decoding (the default) picks the same tokens from the same logits, but bf16 logits on a CPU are not
    always bit-identical from one process to the next. Six runs of evaluate@grpo_phase1_n50 with the same
    weights and decoding (Intel Xeon, AMX; only how often the heap was trimmed varied, which does not
    predict the outcome) gave two sets of episodes, four runs one and two the other, 6 of 50 episodes apart
    (a near-tie token, then everything after it; 20 against 19 right). Sampling is seeded by `gen.seed` and
    leaves the caller's RNG state alone.

    `backend` decodes: "hf" — `model` is a transformers model, decoded by `model_generator` (`reuse_cache`:
    its KV caches; `draft_tokens` > 0: each decode step also checks that many tokens guessed from each
    episode's own context, kept as greedy decoding would or, sampling, by speculative sampling;
    `sqlenv.prompt_lookup`); "vllm" — `model` is the model folder, loaded and decoded by vLLM's offline
    engine (`sqlenv.eval.vllm_backend.VLLMGenerator`, prefix caching; `llm_kwargs` such as dtype go to `vllm.LLM`).
    Everything else (prompts, stop ids, tool calls, budgets, how episodes end) is the same code.
    """
    from sqlenv.eval.vllm_backend import check_backend

    ensure_response_parser(tokenizer)
    play = {"db_dir": db_dir, "env_config": env_config, "system_prompt": system_prompt, "batch_size": batch_size,
            "max_turns": max_turns, "max_new_tokens_per_turn": max_new_tokens_per_turn,
            "max_total_tokens": max_total_tokens, "progress": progress,
            "chat_template_kwargs": chat_template_kwargs, "parser": parser, "after_batch": after_batch}  # fmt: skip
    if check_backend(backend) == "vllm":
        return _run_vllm(model, tokenizer, questions, gen, llm_kwargs, **play)
    import torch

    eos_ids = generation_eos_ids(model, tokenizer)
    was_training = model.training
    model.eval()
    try:
        with (
            torch.random.fork_rng(devices=[]),
            model_generator(model, tokenizer, gen, eos_ids, system_prompt=system_prompt, env_config=env_config,
                            chat_template_kwargs=chat_template_kwargs, reuse_cache=reuse_cache,
                            draft_tokens=draft_tokens) as generator,
        ):  # fmt: skip
            torch.manual_seed(gen.seed)
            max_positions = getattr(model.config, "max_position_embeddings", None)
            return _records(play_rollouts(generator, tokenizer, questions, max_positions=max_positions, **play))
    finally:
        model.train(was_training)


def run_episodes(*args: Any, **kwargs: Any) -> list[EpisodeRecord]:
    """Deprecated: `play_model`'s former name."""
    warnings.warn("sqlenv.eval.rollout.run_episodes is now play_model", DeprecationWarning, stacklevel=2)
    return play_model(*args, **kwargs)


def _records(rollouts: Sequence[Any]) -> list[EpisodeRecord]:
    return [rollout.record for rollout in rollouts]


def _run_vllm(
    model_dir: Any,
    tokenizer: Any,
    questions: Sequence[Question],
    gen: GenerationSettings,
    llm_kwargs: dict[str, Any] | None,
    **play: Any,
) -> list[EpisodeRecord]:
    """`play_model` on vLLM: the stop ids and the context length come from the folder's configs, as the
    HF backend reads them off the loaded model, so both backends stop and end episodes alike."""
    from types import SimpleNamespace

    from transformers import AutoConfig, GenerationConfig

    from sqlenv.eval.vllm_backend import VLLMGenerator

    if not isinstance(model_dir, (str, Path)):
        raise TypeError(f"backend 'vllm' plays a model folder (str or Path), got {type(model_dir).__name__}")
    config = AutoConfig.from_pretrained(model_dir)
    try:
        generation_config = GenerationConfig.from_pretrained(model_dir)
    except OSError:  # no generation_config.json: what from_pretrained gives the HF model then
        generation_config = GenerationConfig.from_model_config(config)
    eos_ids = generation_eos_ids(SimpleNamespace(generation_config=generation_config), tokenizer)
    max_positions = getattr(config, "max_position_embeddings", None)
    generator = VLLMGenerator.from_folder(model_dir, gen, eos_ids, max_model_len=max_positions, llm_kwargs=llm_kwargs)
    return _records(play_rollouts(generator, tokenizer, questions, max_positions=max_positions, **play))
