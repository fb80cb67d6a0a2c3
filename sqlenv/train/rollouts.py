"""GRPO's rollouts through TRL 1.16's public seam, `GRPOTrainer(rollout_func=RolloutFunc(...))`.

TRL calls the rollout function once per generation batch with the batch's prompts (each dataset row's `prompt`,
repeated `num_generations` times) and the trainer. `RolloutFunc` plays every rollout through the one episode
loop evaluation also plays (`sqlenv.episode_loop.play_rollouts`), with the policy's sampled turns from the same
cached decoder (`sqlenv.episode_loop.model_generator`), and returns what TRL trains on:

- `prompt_ids`, `completion_ids`: the rollout's tokens, every turn and tool result after the prompt;
- `env_mask`: 0 on the environment's tokens (tool results and the next assistant header), 1 on the model's;
  TRL multiplies it into the loss mask, as it does with its own tool loop's mask;
- `logprobs`: None (the HF decoder does not keep them; TRL then computes the old policy's itself when needed);
- `episode` (one dict per rollout, `SQLEnv.summary`) and `transcript` (the played messages): extra fields TRL
  hands to the reward functions (`sqlenv.train.grpo.reward_funcs`): the environment's reward, each reward
  component, diagnostics and transcripts come from there.

What is played is what TRL passes: each prompt as it comes (the first observation appended to its last message,
as TRL appends `reset()`'s), sampled with TRL's generation settings (`temperature`, `top_p`, `top_k`, `min_p`,
`repetition_penalty`, and `generation_kwargs` over them, as `GRPOTrainer` builds its generation config; a
`generation_kwargs` key the decoder cannot apply is refused: `sqlenv.sampling`). The questions behind the
prompts (database, gold answer) are the batch's dataset rows, which the trainer hands over
(`SQLAgentGRPOTrainer.rollout_rows`): two questions may share a text in different databases.

What the rollouts are, token for token, is what TRL's own `environment_factory` loop produces for the same
turns (`grpo.rollout_decoder: trl`); a test replays scripted turns through both. The decoder differs:
each turn prefills only what is new since the rollout's last one (tool result, assistant header), the
system prompt and tool schemas every rollout opens with are encoded once per batch, a batch is handed
back once a quarter of its rows ended their turn (continuous batching), and `draft_tokens` > 0 checks
prompt-lookup guesses by speculative sampling (each token distributed as without them).

Dynamic sampling (`oversample` = k > 1, `grpo.oversample`): a group whose rollouts are all right or all wrong
gives the correctness term no gradient. Each generation batch then plays k times its groups in one batch:
its own questions and (k - 1) x as many others of the phase's dataset (`candidate_rows`: a fixed permutation
walked by step, so a resumed run draws the same ones), and hands TRL as many groups as it asked for, those
with mixed correctness first (the batch's own before the others), then the batch's own. What was played and
kept goes to the reward functions as the extra field `sampling` (logged as `sampling/...`), and the kept
questions' ids to `trainer.rollout_question_ids` (the curve's `questions`). DAPO's dynamic sampling
(arXiv 2503.14476) with a bounded budget instead of "until the batch is full": the played candidates cost
generation only, no log-prob pass.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlenv.decode import TurnGenerator
from sqlenv.env.environment import EnvConfig
from sqlenv.episode_loop import model_generator, play_rollouts
from sqlenv.sampling import GenerationSettings
from sqlenv.types import Question


def generation_settings(trainer: Any) -> GenerationSettings:
    """The sampling TRL's own generation would use: its fields, updated by `args.generation_kwargs` as
    `GRPOTrainer.__init__` updates its generation config (ValueError for a key the decoder cannot apply)."""
    base = {name: getattr(trainer, name) for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")}
    return GenerationSettings.from_generation_kwargs(base, getattr(trainer.args, "generation_kwargs", None))


class RolloutFunc:
    """A `rollout_func` for `GRPOTrainer`: each generation batch played through `sqlenv.episode_loop.play_rollouts`.

    `make_generator(model, gen, eos_ids, pad_id, draft_tokens) -> TurnGenerator`: another decoder (tests replay
    scripted turns with one); default the cached decoder, `model_generator`."""

    def __init__(self, *, db_dir: str | Path, env_config: EnvConfig, draft_tokens: int = 0, oversample: int = 1,
                 make_generator: Callable[..., TurnGenerator] | None = None):  # fmt: skip
        if type(oversample) is not int or oversample < 1:
            raise ValueError(f"oversample must be a whole number >= 1, got {oversample!r}")
        self.db_dir = str(db_dir)
        self.env_config = env_config
        self.draft_tokens = draft_tokens
        self.oversample = oversample
        self.make_generator = make_generator

    def __call__(self, prompts: Sequence[list[dict[str, Any]]], trainer: Any) -> dict[str, Any]:
        from trl.models.utils import unwrap_model_for_generation

        rows = getattr(trainer, "rollout_rows", None)
        if rows is None or len(rows) != len(prompts):
            raise RuntimeError("RolloutFunc needs the batch's dataset rows (SQLAgentGRPOTrainer.rollout_rows)")
        n = trainer.num_generations
        asked = len(rows) // n  # the groups TRL asked for (a group's rollouts are consecutive)
        if self.oversample > 1:
            if len(rows) % n or any(rows[i]["id"] != rows[i - i % n]["id"] for i in range(len(rows))):
                raise RuntimeError("oversample needs whole groups in the batch (one process)")
            extra = candidate_rows(trainer.train_dataset, rows[::n], asked * (self.oversample - 1),
                                   step=trainer.state.global_step, seed=trainer.args.seed)  # fmt: skip
            system = prompts[0][:1] if prompts and prompts[0] and prompts[0][0].get("role") == "system" else []
            rows = list(rows) + [row for row in extra for _ in range(n)]
            prompts = list(prompts) + [system + list(row["prompt"])[len(system):] for row in extra for _ in range(n)]
        questions = [Question.from_dict(row) for row in rows]
        tokenizer = trainer.processing_class
        gen = generation_settings(trainer)
        eos_ids = list(trainer.eos_token_ids)
        kwargs = dict(trainer.chat_template_kwargs or {})
        # the prefix every rollout shares, encoded once: the batch's system prompt and the tool schemas
        first = prompts[0][0] if prompts and prompts[0] else {}
        system = first.get("content") if first.get("role") == "system" else None
        args = trainer.args
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped, trainer.accelerator, gather_deepspeed3_params=args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
            ) as model,
            self._generator(model, tokenizer, gen, eos_ids, system, kwargs) as generator,
        ):  # fmt: skip
            rollouts = play_rollouts(
                generator, tokenizer, questions, db_dir=self.db_dir, env_config=self.env_config, prompts=prompts,
                batch_size=len(questions), max_turns=trainer.max_tool_calling_iterations,
                max_total_tokens=trainer.max_completion_length,
                max_positions=getattr(model.config, "max_position_embeddings", None), progress=False,
                chat_template_kwargs=kwargs, final_turn=True,
            )  # fmt: skip
        sampling = None
        if self.oversample > 1:
            groups = [rollouts[i:i + n] for i in range(0, len(rollouts), n)]
            mixed = [len({bool(r.summary["correct"]) for r in g}) > 1 for g in groups]
            keep = select_groups(mixed, asked)
            rollouts = [r for i in keep for r in groups[i]]
            sampling = {"groups_played": len(groups), "groups_mixed": sum(mixed), "groups_kept_mixed": sum(mixed[i] for i in keep),
                        "groups_replaced": sum(i >= asked for i in keep)}  # fmt: skip
            trainer.rollout_question_ids = [r.summary["question_id"] for r in rollouts[::n]]
        out = {
            "prompt_ids": [r.prompt_ids for r in rollouts],
            "completion_ids": [r.completion_ids for r in rollouts],
            "logprobs": None,
            "env_mask": [r.env_mask for r in rollouts],
            "episode": [r.summary for r in rollouts],
            "transcript": [r.record.messages for r in rollouts],
        }
        if sampling is not None:
            out["sampling"] = sampling  # not a list: TRL hands it to every row's reward call
        return out

    @contextlib.contextmanager
    def _generator(self, model: Any, tokenizer: Any, gen: GenerationSettings, eos_ids: list[int], system: str | None,
                   kwargs: dict[str, Any]) -> Iterator[TurnGenerator]:  # fmt: skip
        if self.make_generator is None:
            with model_generator(model, tokenizer, gen, eos_ids, system_prompt=system, env_config=self.env_config,
                                 chat_template_kwargs=kwargs, draft_tokens=self.draft_tokens) as generator:  # fmt: skip
                yield generator
            return
        import torch

        with torch.no_grad():
            yield self.make_generator(model, gen, eos_ids, tokenizer.pad_token_id, self.draft_tokens)


def candidate_rows(dataset: Sequence[dict[str, Any]], batch: Sequence[dict[str, Any]], count: int, *, step: int,
                   seed: int) -> list[dict[str, Any]]:  # fmt: skip
    """`count` dataset rows to play beside `batch` (one row per group) at `step`: a permutation of the dataset
    fixed by `seed`, walked `count` rows a step (cyclically), skipping the batch's own questions and repeats.
    A function of the step alone, so a run resumed from a checkpoint plays the same candidates."""
    size = len(dataset)
    order = random.Random(f"oversample:{seed}").sample(range(size), size)
    taken = {row["id"] for row in batch}
    out: list[dict[str, Any]] = []
    for k in range(size):
        if len(out) == count:
            break
        row = dataset[order[(step * count + k) % size]]
        if row["id"] not in taken:
            taken.add(row["id"])
            out.append(row)
    return out


def select_groups(mixed: Sequence[bool], asked: int) -> list[int]:
    """Which `asked` of the played groups to train on: the first `asked` groups are the batch's own, the rest
    candidates. Mixed-correctness groups first (in play order), then the batch's own equal ones; sorted."""
    first = [i for i, m in enumerate(mixed) if m][:asked]
    rest = [i for i in range(asked) if not mixed[i]][: asked - len(first)]
    return sorted(first + rest)


def __getattr__(name: str) -> Any:
    if name == "EpisodeRollouts":  # deprecated: `RolloutFunc`'s former name
        warnings.warn("sqlenv.train.rollouts.EpisodeRollouts is now RolloutFunc", DeprecationWarning, stacklevel=2)
        return RolloutFunc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
