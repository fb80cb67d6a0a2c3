"""GRPO's rollouts through TRL 1.16's public seam, `GRPOTrainer(rollout_func=EpisodeRollouts(...))`.

TRL calls the rollout function once per generation batch with the batch's prompts (each question's
`[system, user]`, repeated `num_generations` times) and the trainer. `EpisodeRollouts` plays every rollout
through the one episode loop evaluation also plays (`sqlenv.episodes.play_rollouts`), with the policy's
sampled turns from a KV-cached decoder (`turn_generator`), and returns what TRL trains on:

- `prompt_ids`, `completion_ids`: the rollout's tokens, every turn and tool result after the prompt;
- `env_mask`: 0 on the environment's tokens (tool results and the next assistant header), 1 on the model's;
  TRL multiplies it into the loss mask, as it does with its own tool loop's mask;
- `logprobs`: None (the HF decoder does not keep them; TRL then computes the old policy's itself when needed);
- `episode` (one dict per rollout, `SQLEnv.summary`) and `transcript` (the played messages): extra fields TRL
  hands to the reward functions (`sqlenv.train.grpo.reward_funcs`): the environment's reward, each reward
  component, diagnostics and transcripts come from there.

The questions behind the prompts are the batch's dataset rows, which the trainer hands over
(`SQLAgentGRPOTrainer.rollout_rows`): two questions may share a text in different databases.

What the rollouts are, token for token, is what TRL's own `environment_factory` loop produces for the same
turns (`grpo.rollout_decoder: trl`); a test replays scripted turns through both. The decoder differs:
each turn prefills only what is new since the rollout's last one (tool result, assistant header), the
system prompt and tool schemas every rollout opens with are encoded once per batch, a batch is handed
back once a quarter of its rows ended their turn (continuous batching), and `draft_tokens` > 0 checks
prompt-lookup guesses by speculative sampling (each token distributed as without them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlenv.decode import GenerationSettings, ModelGenerator, TurnGenerator
from sqlenv.env.environment import EnvConfig
from sqlenv.episodes import play_rollouts, rollout_chat_template, shared_prompt_prefix
from sqlenv.types import Question


def turn_generator(model: Any, gen: GenerationSettings, eos_ids: list[int], pad_id: int, draft_tokens: int) -> TurnGenerator:
    """The decoder of a generation batch's turns: `ModelGenerator` with per-rollout KV caches (tests replace it)."""
    return ModelGenerator(model, gen, eos_ids, pad_id, reuse_cache=True, draft_tokens=draft_tokens)


class EpisodeRollouts:
    """A `rollout_func` for `GRPOTrainer`: each generation batch played through `sqlenv.episodes.play_rollouts`."""

    def __init__(self, *, db_dir: str | Path, env_config: EnvConfig, draft_tokens: int = 0,
                 make_generator: Callable[..., TurnGenerator] | None = None):  # fmt: skip
        self.db_dir = str(db_dir)
        self.env_config = env_config
        self.draft_tokens = draft_tokens
        self.make_generator = make_generator

    def __call__(self, prompts: Sequence[list[dict[str, Any]]], trainer: Any) -> dict[str, Any]:
        import torch
        from trl.models.utils import unwrap_model_for_generation

        from sqlenv.prompt_lookup import packed_attention

        rows = getattr(trainer, "rollout_rows", None)
        if rows is None or len(rows) != len(prompts):
            raise RuntimeError("EpisodeRollouts needs the batch's dataset rows (SQLAgentGRPOTrainer.rollout_rows)")
        questions = [Question.from_dict(row) for row in rows]
        systems = {p[0]["content"] for p in prompts}
        if len(systems) != 1 or any(p[0]["role"] != "system" or len(p) != 2 for p in prompts):
            raise ValueError("every prompt of a batch must be [system, user] with one system prompt")
        system = systems.pop()
        tokenizer = trainer.processing_class
        gen = GenerationSettings(do_sample=True, temperature=trainer.temperature, top_p=trainer.top_p, top_k=trainer.top_k or 0)
        eos_ids, pad_id = list(trainer.eos_token_ids), tokenizer.pad_token_id
        kwargs = dict(trainer.chat_template_kwargs or {})
        args = trainer.args
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped, trainer.accelerator, gather_deepspeed3_params=args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
            packed_attention(model) if self.draft_tokens else contextlib.nullcontext(),
        ):  # fmt: skip
            generator = (self.make_generator or turn_generator)(model, gen, eos_ids, pad_id, self.draft_tokens)
            encode_prefix = getattr(generator, "encode_prefix", None)
            if encode_prefix is not None:  # the system prompt + tool schemas, once for the batch
                encode_prefix(shared_prompt_prefix(tokenizer, system, rollout_chat_template(tokenizer), kwargs, self.env_config))
            rollouts = play_rollouts(
                generator, tokenizer, questions, db_dir=self.db_dir, env_config=self.env_config, system_prompt=system,
                batch_size=len(questions), max_turns=trainer.max_tool_calling_iterations,
                max_total_tokens=trainer.max_completion_length,
                max_positions=getattr(model.config, "max_position_embeddings", None), progress=False,
                chat_template_kwargs=kwargs, final_turn=True,
            )  # fmt: skip
        return {
            "prompt_ids": [r.prompt_ids for r in rollouts],
            "completion_ids": [r.completion_ids for r in rollouts],
            "logprobs": None,
            "env_mask": [r.env_mask for r in rollouts],
            "episode": [r.summary for r in rollouts],
            "transcript": [r.record.messages for r in rollouts],
        }
