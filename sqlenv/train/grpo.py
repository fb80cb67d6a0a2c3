"""GRPO for the SQL agent: TRL 1.16's `GRPOTrainer` driving `SQLAgentEnv`, one builder per phase.

What this module builds, and what it guards:
- Settings of a phase from exactly its params sections (`phase_sections`, `phase_settings`): phase 1
  reads `grpo_phase1` + the shared `grpo`, `env`, `rewards`, `seed`, `model.{dtype,enable_thinking}`;
  phase 2 reads `grpo_phase2` instead, never the other phase's section. Each phase section holds its own
  `difficulties`, `max_steps`, `num_generations`, `learning_rate`, `temperature`,
  `max_completion_length`; `grpo` holds what both share. `beta` is the one key in both: `grpo.beta` is
  GRPO's KL coefficient, and a phase's own `beta` overrides it unless null (phase 2's 0.0 by default). Both phases train with `grpo.seed` where it is
  set, else with the master `seed`: a GRPO seed sweep leaves world, splits and SFT alone.
- Batch sizes (`plan_batches`): every optimizer step generates fresh rollouts for whole GRPO groups.
  TRL requires `generation_batch_size % num_generations == 0` and a generation batch that is a whole
  number of micro-batches; accumulation is raised to the smallest value that satisfies both, and
  `steps_per_generation` equals it, so one generation feeds exactly one optimizer step (on-policy).
- Rewards: the environment owns the optimised reward. TRL 1.16 appends `SQLAgentEnv.get_reward` as
  the LAST reward function with weight 1 (named after the class). Before it come one function per
  reward component (`component_reward_funcs`) with weight 0: TRL logs each as
  `rewards/<component>/mean|std`, and since the advantage is computed from `nansum(weights × rewards)`
  a zero weight adds exactly 0 (a test recomputes the advantages from the env reward alone). The
  first component function also reports per-batch episode diagnostics through TRL's `log_metric`
  hook (`episode/...` metrics, averaged per logging step) and per-episode columns through
  `log_extra` (they land in `trainer._logs["extra"]`, read by the transcript logger).
- Few-shot option (`grpo.few_shot_steps`): worked oracle episodes in the system prompt while
  `state.global_step < few_shot_steps`. The swap happens where TRL reads the prompt, in
  `SQLAgentGRPOTrainer._generate_and_score_completions`, keyed on the restored `global_step`: exact
  and resume-safe. (A dataset transform toggled by a callback would be one step late: accelerate's
  `DataLoaderShard` fetches the next batch one step ahead.)
- Resume is exact: resumed from a checkpoint, a phase ends with the weights of an uninterrupted run
  (a test compares every tensor). Trainer restores the optimizer, scheduler and RNG states (generation
  samples from torch's global generator) and skips the finished batches; TRL's `RepeatSampler` has no
  `set_epoch`, so a resume in epoch >= 1 replayed epoch 0's prompts: `epoch_repeat_sampler_class` adds it.
- What a run leaves behind (checkpoints and resume, the merged model, curve, transcripts) lives in
  `sqlenv.train.grpo_outputs`.

- Speed on CPU: the model is loaded in the dtype `model.dtype` resolves to; in bf16 the loss's forward pass
  runs under bf16 autocast, generation without (`loss_autocast` in `build_trainer`); activation
  checkpointing follows `grpo.activation_checkpointing` (`sqlenv.train.checkpointing`: by default on in
  float32 only: phase 1 peaked at 8.47 GiB in float32 without it, 6.04 with it, 5.11 in bf16);
  `train.trl_patches.compact_lm_head` stops TRL from pushing every prompt position through the LM head.

Not guarded: GRPO on a CPU is slow. Measured (Qwen2.5-0.5B, idle 2-core machine, 4 rollouts of one
turn, 86 tokens mean / 181 max): 90 s per step = generation 33 s + three log-prob passes (reference,
policy forward and backward) over prompt + completion. Two other busy processes on the same two cores
made that step 1,288 s (torch threads fighting for cores), so time runs on a quiet machine. A model
that never emits a parseable tool call gets a constant reward, hence zero advantage and no learning;
`frac_reward_zero_std` shows it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlenv.data.few_shot import few_shot_examples, few_shot_system_prompt
from sqlenv.data.questions import load_questions_file
from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig
from sqlenv.env.rewards import COMPONENTS
from sqlenv.env.trl_adapter import SQLAgentEnv, SQLAnswerAgentEnv, agent_env_class
from sqlenv.provenance import chat_template_kwargs
from sqlenv.train.checkpointing import activation_checkpointing
from sqlenv.train.processes import world_size
from sqlenv.decode import common_prefix_length
from sqlenv.train.shared_prefix import (
    SharedPrefix,
    replayable_under_checkpointing,
    usable_length,
)
from sqlenv.types import Question, strict_kwargs

STAGES = {1: "grpo_phase1", 2: "grpo_phase2"}
# How TRL names the environment's get_reward column: after the adapter class, one per answer mode.
ENV_REWARD_NAMES = (SQLAgentEnv.__name__, SQLAnswerAgentEnv.__name__)
TOOL_CALL_TAG = "<tool_call>"
EPISODE_METRICS = (
    "episode/accuracy", "episode/answered", "episode/turns", "episode/tool_calls", "episode/tokens",
    "episode/tool_call_parse_rate", "episode/argument_error_rate", "episode/calls_after_answer",
    "episode/budget_exhausted",
)  # fmt: skip


# ------------------------------------------------------------------------------------------ settings
def phase_sections(all_params: Mapping[str, Any], phase: int) -> dict[str, Any]:
    """The params a phase reads — and nothing else (hashed for resume, logged to MLflow)."""
    name = STAGES[phase]
    return {
        "seed": all_params["seed"],
        "env": dict(all_params["env"]),
        "rewards": dict(all_params["rewards"]),
        "model": {k: all_params["model"][k] for k in ("dtype", "enable_thinking")},
        "grpo": dict(all_params["grpo"]),
        name: dict(all_params[name]),
    }


@dataclass(frozen=True)
class PhaseSettings:
    """Everything a phase trains with, resolved from its params sections."""

    stage: str
    seed: int
    difficulties: tuple[str, ...]
    max_steps: int
    num_generations: int
    learning_rate: float
    temperature: float
    top_p: float
    max_completion_length: int
    beta: float
    batch_size: int
    gradient_accumulation_steps: int
    logging_steps: int
    checkpoint_every: int
    lora: bool
    lora_r: int
    lora_alpha: int
    few_shot_steps: int
    use_vllm: str  # none | colocate | server: TRL's use_vllm + vllm_mode (`grpo_config`)
    rollout_decoder: str  # cached (our KV-cached decode loop for each turn) | trl (TRL's transformers generate)
    draft_tokens: int  # cached: tokens guessed per rollout and decode step, checked by speculative sampling
    mask_truncated_completions: bool  # TRL's: a rollout cut off at max_completion_length leaves the loss
    shared_prefix: bool  # log-prob passes without padding, the step's shared prompt prefix encoded once (one process)
    activation_checkpointing: str | bool  # auto (on when computing in float32) | true | false (`train.checkpointing`)
    transcripts_every: int
    transcripts_per_log: int
    dtype: str
    enable_thinking: bool
    env: EnvConfig


def phase_settings(sections: Mapping[str, Any], phase: int) -> PhaseSettings:
    """Resolve a phase's settings from `phase_sections(...)` output: the shared `grpo` section and the
    phase's own, merged key by key (the two hold disjoint keys; a test ties the fields to the params)."""
    stage = STAGES[phase]
    g, p = sections["grpo"], sections[stage]
    if g["few_shot_steps"] < 0 or g["draft_tokens"] < 0 or g["checkpoint_every"] < 1 or p["max_steps"] < 1:
        raise ValueError("grpo.few_shot_steps and grpo.draft_tokens must be >= 0, grpo.checkpoint_every and max_steps >= 1")
    # A key lives in one section, except `beta`: grpo.beta is GRPO's KL coefficient, and a phase's own
    # beta (not null) overrides it (params.yaml: phase 1 uses grpo.beta, phase 2 keeps the recipe's 0.0).
    both = set(g) & set(p) - {"beta"}
    if both:
        raise ValueError(f"keys in both grpo and {stage}: {sorted(both)} (a key lives in one section)")
    merged = {**g, **p, "difficulties": tuple(p["difficulties"])}
    merged["beta"] = g["beta"] if p.get("beta") is None else p["beta"]
    seed = merged.pop("seed", None)  # grpo.seed: the phases' own training seed; None: the master seed
    return PhaseSettings(
        stage=stage, seed=int(sections["seed"] if seed is None else seed), dtype=sections["model"]["dtype"],
        enable_thinking=sections["model"]["enable_thinking"],
        env=EnvConfig.from_dict({**sections["env"], "rewards": dict(sections["rewards"])}),
        **strict_kwargs(PhaseSettings, merged, f"grpo / {stage}"),
    )  # fmt: skip


@dataclass(frozen=True)
class BatchPlan:
    """TRL batch arguments for one phase; `generation_batch_size` rollouts feed one optimizer step."""

    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int
    generation_batch_size: int
    num_generations: int
    world_size: int = 1

    @property
    def prompts_per_step(self) -> int:
        return self.generation_batch_size // self.num_generations


def plan_batches(batch_size: int, gradient_accumulation_steps: int, num_generations: int, world_size: int = 1) -> BatchPlan:
    """Smallest accumulation >= the requested one whose step holds whole groups of `num_generations`.

    One optimizer step sees `batch_size × world_size × accumulation` rollouts, all from one fresh
    generation (`steps_per_generation == accumulation`), so the batch is a multiple of the group size
    and of the global micro-batch, as TRL's GRPOConfig requires. E.g. batch 3, accumulation 1,
    4 generations -> accumulation 4, 12 rollouts, 3 questions per step.
    """
    if batch_size < 1 or gradient_accumulation_steps < 1 or world_size < 1:
        raise ValueError("batch_size, gradient_accumulation_steps and world_size must be >= 1")
    if num_generations < 2:
        raise ValueError(f"GRPO needs at least 2 generations per question, got num_generations={num_generations}")
    micro = batch_size * world_size
    steps = gradient_accumulation_steps
    while (micro * steps) % num_generations:  # terminates by steps = a multiple of num_generations
        steps += 1
    return BatchPlan(batch_size, steps, steps, micro * steps, num_generations, world_size)


# ------------------------------------------------------------------------------------------- dataset
def dataset_rows(questions: Sequence[Question], system: str = prompts.SYSTEM_PROMPT) -> list[dict[str, Any]]:
    """One row per question: its fields (for `SQLAgentEnv.reset(**row)`) + `prompt` = [system, user], with the
    environment's system prompt (`EnvConfig.system_prompt`)."""
    return [{**q.to_dict(), "prompt": [{"role": "system", "content": system}, prompts.user_message(q)]} for q in questions]


# ------------------------------------------------------------------------------------------- rewards
def episode_diagnostics(
    episodes: Sequence[Mapping[str, Any]], completions: Sequence[Sequence[Mapping[str, Any]]], completion_ids: Sequence[Sequence[int]]
) -> dict[str, float]:
    """Batch means of what TRL does not log itself (see EPISODE_METRICS).

    `turns` = assistant turns; `tokens` = completion tokens, tool results included; the tool-call
    parse rate = turns whose tool call TRL parsed / turns that tried one (a parsed call, or text still
    holding `<tool_call>` because TRL's parser fell back to plain text); NaN when nothing was tried
    (TRL drops NaN when it averages). `argument_error_rate` = env calls rejected for their tool name
    or arguments / env calls.
    """
    n = max(len(episodes), 1)
    attempted = parsed = 0
    turns = 0
    for completion in completions:
        for message in completion:
            if message.get("role") != "assistant":
                continue
            turns += 1
            ok = bool(message.get("tool_calls"))
            parsed += ok
            attempted += ok or TOOL_CALL_TAG in str(message.get("content") or "")
    calls = sum(e["steps"] for e in episodes)
    return {
        "episode/accuracy": sum(bool(e["correct"]) for e in episodes) / n,
        "episode/answered": sum(bool(e["answered"]) for e in episodes) / n,
        "episode/turns": turns / n,
        "episode/tool_calls": calls / n,
        "episode/tokens": sum(len(ids) for ids in completion_ids) / n,
        "episode/tool_call_parse_rate": parsed / attempted if attempted else math.nan,
        "episode/argument_error_rate": sum(e["parse_failures"] for e in episodes) / calls if calls else 0.0,
        "episode/calls_after_answer": sum(e["calls_after_end"] for e in episodes) / n,
        "episode/budget_exhausted": sum(bool(e["budget_exhausted"]) for e in episodes) / n,
    }


def verdict(episode: Mapping[str, Any]) -> str:
    return "correct" if episode["correct"] else ("wrong" if episode["answered"] else "unanswered")


def _component_reward(name: str, report: bool) -> Callable[..., list[float]]:
    def reward(environments=None, completions=None, completion_ids=None, log_metric=None, log_extra=None, **_):
        if environments is None:
            raise ValueError(f"reward component {name!r} needs GRPOTrainer(environment_factory=SQLAgentEnv...)")
        # `_episode` is the adapter's documented diagnostics hook (a property, so not a tool).
        episodes = [env._episode for env in environments]
        if report:
            if log_metric is not None:
                for key, value in episode_diagnostics(episodes, completions or [], completion_ids or []).items():
                    log_metric(key, value)
            if log_extra is not None:
                log_extra("question_id", [e["question_id"] for e in episodes])
                log_extra("verdict", [verdict(e) for e in episodes])
                log_extra("env_steps", [e["steps"] for e in episodes])
                log_extra("calls_after_end", [e["calls_after_end"] for e in episodes])
        return [float(e["reward_components"][name]) for e in episodes]

    reward.__name__ = reward.__qualname__ = name  # TRL names the metric after it: rewards/<name>/mean
    return reward


def component_reward_funcs(components: Sequence[str] = COMPONENTS) -> list[Callable[..., list[float]]]:
    """One zero-weight reward function per env reward component; the first also reports diagnostics."""
    return [_component_reward(name, report=(i == 0)) for i, name in enumerate(components)]


# ------------------------------------------------------------------------------------------- trainer
@functools.cache
def epoch_repeat_sampler_class() -> type:
    """TRL's `RepeatSampler` with `set_epoch`: the order of epoch e no longer depends on how many epochs this
    process iterated before.

    TRL's sampler draws epoch e's permutation from a generator seeded once and advanced by the e earlier
    iterations, and has no `set_epoch`. A run resumed in epoch e >= 1 is a fresh process with a fresh
    generator, so it replayed epoch 0's order: different prompts from the resumed step on than an
    uninterrupted run, hence different weights. Here each iteration rewinds the generator to its seeded
    state and draws e permutations first, e being the epoch last passed to `set_epoch` (transformers'
    Trainer and accelerate's DataLoaderShard call it before every epoch; iterated again without it, the
    next epoch). Epoch e gets exactly the order it gets in an uninterrupted TRL run.
    """
    import torch
    from trl.trainer.utils import RepeatSampler

    class EpochRepeatSampler(RepeatSampler):
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.epoch = 0
            self._seeded_state = self.generator.get_state() if self.shuffle else None

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def __iter__(self):
            if self.shuffle:
                self.generator.set_state(self._seeded_state)
                for _ in range(self.epoch):
                    torch.randperm(self.num_samples, generator=self.generator)
            self.epoch += 1
            yield from super().__iter__()

    return EpochRepeatSampler


def sampler_epoch_callback(trainer: Any):
    """A TrainerCallback that tells `trainer._epoch_sampler` its epoch at each epoch's start, from the
    (restored) trainer state.

    accelerate's `DataLoaderShard.set_epoch` reaches the sampler through one or two wrappers, not through
    both of a multi-process run resumed mid-epoch (`SkipBatchSampler` around `BatchSamplerShard`).
    `state.epoch` is the epoch number plus the finished fraction of it: exactly the number at an epoch's start.
    """
    from transformers import TrainerCallback

    class SamplerEpoch(TrainerCallback):
        def on_epoch_begin(self, args, state, control, **kwargs):
            sampler = getattr(trainer, "_epoch_sampler", None)
            if sampler is not None:
                sampler.set_epoch(math.floor(state.epoch or 0))

    return SamplerEpoch()


def _trainer_class():
    from trl import GRPOTrainer

    class SQLAgentGRPOTrainer(GRPOTrainer):
        """GRPOTrainer whose first `few_shot_steps` steps see worked examples in the system prompt, and whose
        training order after a resume is that of an uninterrupted run (`epoch_repeat_sampler_class`)."""

        def __init__(self, *args: Any, few_shot_system: str | None = None, few_shot_steps: int = 0,
                     rollout_decoder: str = "cached", loss_autocast: bool = False, shared_prefix: bool = True,
                     draft_tokens: int = 0, **kwargs: Any):  # fmt: skip
            super().__init__(*args, **kwargs)
            self.loss_autocast = loss_autocast
            # Under DDP the last micro-batch's backward all-reduces the gradients before the shared prefix's
            # share could be added (`sqlenv.train.shared_prefix`): one process only.
            self.shared_prefix = shared_prefix and self.accelerator.num_processes == 1
            if self.shared_prefix and self.args.activation_checkpointing:
                replayable_under_checkpointing(self.model)
            self._prefix_ids: list[int] = []  # the prompt prefix every rollout of the current generation batch opens with
            self._step_prefix = None  # its SharedPrefix under the current weights, with gradient (one optimizer step)
            self.few_shot_system = few_shot_system
            self.few_shot_steps = few_shot_steps if few_shot_system else 0
            self._questions: list[str] = []  # ids of the questions generated for since the last training log
            if rollout_decoder not in ROLLOUT_DECODERS:
                raise ValueError(f"grpo.rollout_decoder must be one of {ROLLOUT_DECODERS}, got {rollout_decoder!r}")
            self._turns = None
            if rollout_decoder == "cached" and cached_decoding_applies(self):
                from sqlenv.decode import ExtendingContexts, GenerationSettings

                gen = GenerationSettings(do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k or 0)
                self._turns = ExtendingContexts(None, gen, list(self.eos_token_ids), self._tokenizer.pad_token_id,
                                                draft_tokens=draft_tokens)  # fmt: skip
            self.add_callback(sampler_epoch_callback(self))

        def compute_loss(self, model, inputs, *args, **kwargs):
            # The policy's forward pass, the one the loss backpropagates through; generation and the
            # reference pass (no gradient) stay outside autocast, where it would only add casts.
            if not self.loss_autocast:
                return super().compute_loss(model, inputs, *args, **kwargs)
            import torch

            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                return super().compute_loss(model, inputs, *args, **kwargs)

        def _get_train_sampler(self, dataset=None):
            trl_sampler = super()._get_train_sampler(dataset)  # TRL's arguments, our epoch handling
            self._epoch_sampler = epoch_repeat_sampler_class()(
                data_source=trl_sampler.data_source, mini_repeat_count=trl_sampler.mini_repeat_count,
                batch_size=trl_sampler.batch_size, repeat_count=trl_sampler.repeat_count,
                shuffle=trl_sampler.shuffle, seed=trl_sampler.seed,
            )  # fmt: skip
            return self._epoch_sampler

        def _generate_and_score_completions(self, inputs):
            # Called once per generation batch, inside the step that uses it: global_step is the
            # number of finished steps (restored on resume), so steps 1..few_shot_steps get examples.
            if self.model.training:
                from accelerate.utils import gather_object

                self._questions.extend(gather_object([str(x.get("id", "")) for x in inputs]))  # every process calls it
            if self.model.training and self.state.global_step < self.few_shot_steps:
                inputs = [{**x, "prompt": [{"role": "system", "content": self.few_shot_system}, *x["prompt"][1:]]} for x in inputs]
            if self._turns is not None:
                self._turns.reset()  # new weights since the last batch: no cache survives it
            if self.shared_prefix:
                self._prefix_ids = []  # TRL's reference pass runs inside: not the previous batch's prefix
            try:
                batch = super()._generate_and_score_completions(inputs)
            finally:
                if self._turns is not None:
                    self._turns.reset()  # free the batch's caches before the log-prob passes
            if self.shared_prefix:
                self._prefix_ids = shared_prompt_prefix(batch["prompt_ids"], batch["prompt_mask"])
            return batch

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                               compute_entropy=False, compute_aux_loss=False, **multimodal):  # fmt: skip
            # TRL runs each micro-batch padded to its generation batch's longest prompt and longest completion, and
            # every rollout's system prompt again, forward and backward. Here each rollout runs without its padding,
            # after its step's shared prompt prefix encoded once (`sqlenv.train.shared_prefix`). Same log-probs
            # and gradients; a test trains a step both ways.
            if not self.shared_prefix or compute_aux_loss or any(v is not None for v in multimodal.values()):
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                    compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **multimodal,
                )  # fmt: skip
            import torch

            if torch.is_grad_enabled():  # the loss's pass: the step's prefix, backpropagated once in training_step
                if self._step_prefix is None and len(self._prefix_ids) >= SharedPrefix.MIN_LENGTH:
                    with self.accelerator.autocast():  # as TRL runs the model in this pass
                        self._step_prefix = SharedPrefix.encode(model, self._prefix_ids)
                prefix = self._step_prefix
            else:  # a reference or old-policy pass: this call's own prefix, no gradient
                ids = self._prefix_ids or shared_prompt_prefix(input_ids[:, : input_ids.size(1) - logits_to_keep],
                                                               attention_mask[:, : input_ids.size(1) - logits_to_keep])
                with self.accelerator.autocast():
                    prefix = SharedPrefix.encode(model, ids) if len(ids) >= SharedPrefix.MIN_LENGTH else None
            rows = [
                rollout_log_probs(model, ids, mask, logits_to_keep, prefix, self.accelerator.autocast)
                for ids, mask in zip(input_ids, attention_mask, strict=True)
            ]
            logps, entropies = stack_rows(rows, logits_to_keep, input_ids.device)
            return logps, (entropies if compute_entropy else None), None

        def training_step(self, model, inputs, num_items_in_batch):
            loss = super().training_step(model, inputs, num_items_in_batch)
            # The step's last micro-batch (the Trainer clips and steps right after): the shared prefix's gradient,
            # which every micro-batch's backward left in its leaves, goes into the adapters now, once.
            if self.accelerator.sync_gradients and self._step_prefix is not None:
                prefix, self._step_prefix = self._step_prefix, None
                prefix.finish()
            return loss

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            # TRL's regular (transformers) path re-encodes each rollout's whole context every turn; this one
            # prefills only what is new since the rollout's last turn (`sqlenv.decode.ExtendingContexts`).
            # Same inputs, same outputs (completion ids, stop token kept, at most max_completion_length new
            # tokens; no logprobs, as TRL's path) — a test compares both under greedy-equivalent sampling.
            if self._turns is None or images is not None or multimodal_fields or has_tool_images:
                return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
            import torch
            from trl.models.utils import unwrap_model_for_generation

            from sqlenv.prompt_lookup import packed_attention

            with (
                unwrap_model_for_generation(
                    self.model_wrapped, self.accelerator, gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                    generation_kwargs=self.generation_kwargs,
                    gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
                ) as model,
                torch.no_grad(),
                packed_attention(model) if self._turns.decoder.draft_tokens else contextlib.nullcontext(),
            ):  # fmt: skip
                self._turns.decoder.model = model
                return self._turns.generate(prompt_ids, self.max_completion_length), None

        def log(self, logs: dict[str, Any], start_time: float | None = None) -> None:
            # A training log entry carries the distinct question ids of its steps ("questions", space-separated),
            # so the curve (from `state.log_history`, restored on resume) says which questions each step saw.
            if self._questions and "loss" in logs:
                logs = {**logs, "questions": " ".join(dict.fromkeys(self._questions))}
                self._questions = []
            super().log(logs, start_time)

    return SQLAgentGRPOTrainer


ROLLOUT_DECODERS = ("cached", "trl")


# ------------------------------------------------------------------------------------- log-prob passes
def shared_prompt_prefix(prompt_ids: Any, prompt_mask: Any) -> list[int]:
    """The token ids every prompt of a (left-padded) batch opens with, ending before the last token of the
    shortest prompt: that token's hidden state predicts the rollout's first completion token, so it belongs
    to each rollout's own pass (`shared_prefix.usable_length`)."""
    prompts_ = [ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids, prompt_mask, strict=True)]
    if not prompts_:
        return []
    length = usable_length(common_prefix_length(prompts_), min(len(p) for p in prompts_))
    return prompts_[0][:length]


def rollout_log_probs(model: Any, ids: Any, mask: Any, logits_to_keep: int, prefix: SharedPrefix | None,
                      autocast: Callable[[], Any]) -> tuple[Any, Any] | None:  # fmt: skip
    """Log-probs and entropies of one rollout's completion tokens, as TRL's `_get_per_token_logps_and_entropies`
    computes them for its row: `ids` = prompt (left-padded) + completion (right-padded), `mask` their attention
    mask, the last `logits_to_keep` positions the completion. Only the real tokens are run, after `prefix` when
    the rollout opens with it; positions past the completion's last real token get 0 (the loss masks them).
    None for a completion without a real token (`mask_truncated_completions` zeroes a truncated one): there is
    nothing to score, and nothing is run."""
    import torch

    real = mask.nonzero().flatten()
    start, end = int(real[0]), int(real[-1]) + 1
    if end - start != real.numel():
        raise ValueError("a rollout's attention mask has a gap: not left-padded prompt + right-padded completion")
    prompt_width = ids.numel() - logits_to_keep
    n = end - prompt_width  # real completion tokens
    if n <= 0:
        return None
    seq = ids[start:end]
    labels = seq.clone()
    labels[: prompt_width - start] = -100  # score the completion only, as TRL's labels do
    use = prefix is not None and prefix.length <= prompt_width - start - 1 and prefix.starts(seq.tolist())
    skip = prefix.length if use else 0
    with autocast():
        out = model(input_ids=seq[skip:][None], labels=labels[skip:][None], fused_lm_head=True,
                    **({"cache": prefix.cache()} if use else {}))  # fmt: skip
    pad = logits_to_keep - n
    logps, entropy = out.log_probs[0, -n:], out.entropy[0, -n:]
    return torch.cat([logps, logps.new_zeros(pad)]), torch.cat([entropy, entropy.new_zeros(pad)])


def stack_rows(rows: Sequence[tuple[Any, Any] | None], logits_to_keep: int, device: Any) -> tuple[Any, Any]:
    """`rollout_log_probs` rows as TRL's [rows, logits_to_keep] log-probs and entropies. A row that ran nothing
    is zeros; if no row ran, the log-probs are a zero leaf that requires grad (under grad mode), so the
    micro-batch's loss still backpropagates — a zero gradient, as TRL's fully masked row gives."""
    import torch

    ran = [r for r in rows if r is not None]
    dtype = ran[0][0].dtype if ran else torch.float32
    zeros = torch.zeros(logits_to_keep, dtype=dtype, device=device)
    logps = torch.stack([zeros if r is None else r[0] for r in rows])
    entropies = torch.stack([zeros if r is None else r[1] for r in rows])
    if not ran and torch.is_grad_enabled():
        logps.requires_grad_()
    return logps, entropies


def cached_decoding_applies(trainer: Any) -> bool:
    """Whether `grpo.rollout_decoder: cached` can stand in for TRL's transformers generation: a text model
    generated by the trainer itself (not vLLM, not continuous batching), plain DDP or one process (no
    DeepSpeed/FSDP parameter gathering), and sampling our decoder reproduces (temperature, top-k, top-p;
    no min-p, repetition penalty or extra generation kwargs)."""
    from accelerate.utils import DistributedType

    args = trainer.args
    return (
        not trainer.use_vllm
        and not getattr(trainer, "use_transformers_continuous_batching", False)
        and not getattr(trainer, "_is_vlm", False)
        and trainer.accelerator.distributed_type in (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)
        and trainer.min_p is None
        and trainer.repetition_penalty == 1.0
        and args.generation_kwargs is None
    )


VLLM_MODES = ("none", "colocate", "server")  # not "off": DVC rewrites params.yaml as YAML 1.2, and 1.1 reads off as False


def vllm_arguments(use_vllm: str) -> dict[str, Any]:
    """`grpo.use_vllm` as TRL 1.16's GRPOConfig arguments: none -> HF generation on the training device;
    colocate / server -> `use_vllm=True` with that `vllm_mode` (vLLM inside the trainer's process, or a
    separate `trl vllm-serve` server the trainer syncs weights to)."""
    if use_vllm not in VLLM_MODES:
        raise ValueError(f"grpo.use_vllm must be one of {VLLM_MODES}, got {use_vllm!r}")
    return {"use_vllm": False} if use_vllm == "none" else {"use_vllm": True, "vllm_mode": use_vllm}


def grpo_config(settings: PhaseSettings, checkpoint_dir: str | os.PathLike[str], template_kwargs: Mapping[str, Any] | None = None):
    """The GRPOConfig of a phase (checkpoints to `checkpoint_dir`, no reporting: pipeline/ logs)."""
    from trl import GRPOConfig

    plan = plan_batches(settings.batch_size, settings.gradient_accumulation_steps, settings.num_generations, world_size())
    config = GRPOConfig(
        output_dir=str(checkpoint_dir),
        seed=settings.seed,
        max_steps=settings.max_steps,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant",  # a dozen steps: a decaying schedule would waste the last ones
        beta=settings.beta,
        # Advantage = reward - group mean, not divided by the group's std (Dr. GRPO). With TRL's default
        # "group" scaling, a group whose answers are all equally wrong still gets unit-size advantages
        # from shaping noise alone (measured: reward std 0.012 from step costs became +-1 advantages,
        # i.e. "make fewer calls"), which breaks "correctness is the gate, shaping terms stay small".
        scale_rewards="none",
        num_generations=settings.num_generations,
        per_device_train_batch_size=plan.per_device_train_batch_size,
        gradient_accumulation_steps=plan.gradient_accumulation_steps,
        generation_batch_size=plan.generation_batch_size,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_completion_length=settings.max_completion_length,
        max_tool_calling_iterations=settings.env.step_budget,
        **vllm_arguments(settings.use_vllm),
        mask_truncated_completions=settings.mask_truncated_completions,
        reward_weights=[0.0] * len(COMPONENTS),  # the env's get_reward (weight 1) is appended by TRL
        model_init_kwargs={"dtype": settings.dtype},
        chat_template_kwargs=dict(template_kwargs or {}),
        # The weights are loaded in `dtype` (bf16: ~1.6x faster than fp32 on CPU). On a GPU, bf16 autocast as
        # every GPU recipe (and DeepSpeed's bf16 config, `configs/accelerate/deepspeed_zero2.yaml`) expects. On
        # a CPU the trainer autocasts the loss's forward pass only (`loss_autocast`, see build_trainer).
        bf16=settings.dtype == "bfloat16" and _cuda(),
        use_cpu=not _cuda(),  # also what makes several CPU processes join as one (accelerate's MULTI_CPU, gloo)
        # In bf16 (micro-batch 1, loss autocast) phase 2 peaked at 6.0 GiB without; float32 needs it (`train.checkpointing`).
        activation_checkpointing=activation_checkpointing(settings.activation_checkpointing, settings.dtype),
        disable_dropout=True,
        logging_steps=settings.logging_steps,
        save_strategy="steps",
        save_steps=settings.checkpoint_every,
        save_total_limit=3,
        report_to="none",  # MLflow logging is pipeline/grpo_logging.py's job (see there why)
        log_completions=False,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
    )
    assert config.steps_per_generation == plan.steps_per_generation, "TRL derived another generation schedule"
    return config


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def template_kwargs(model_path: str | os.PathLike[str], enable_thinking: bool) -> dict[str, Any]:
    """chat_template kwargs recorded at model preparation, with Qwen3's `enable_thinking` from params
    when the template knows the variable (other templates ignore it, so it is not passed to them)."""
    kwargs = chat_template_kwargs(model_path)
    template = Path(model_path) / "chat_template.jinja"
    text = template.read_text(encoding="utf-8") if template.is_file() else ""
    if not text:
        config = Path(model_path) / "tokenizer_config.json"
        text = config.read_text(encoding="utf-8") if config.is_file() else ""
    if "enable_thinking" in text:
        kwargs["enable_thinking"] = enable_thinking
    return kwargs


def build_trainer(
    settings: PhaseSettings,
    *,
    model_path: str | os.PathLike[str],
    questions_file: str | os.PathLike[str],
    db_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
    callbacks: Sequence[Any] = (),
):
    """The phase's GRPOTrainer over the real environment (model loaded from `model_path` in `settings.dtype`)."""
    from datasets import Dataset
    from peft import LoraConfig

    if settings.use_vllm != "none":
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise ValueError(f"grpo.use_vllm: {settings.use_vllm} needs vLLM (`pip install vllm`, a GPU build)")
    questions = load_questions_file(questions_file, settings.difficulties)
    few_shot_system = None
    if settings.few_shot_steps:
        examples = few_shot_examples(questions, 2, db_dir=db_dir, env_config=settings.env, seed=settings.seed)
        shown = {e.question_id for e in examples}
        questions = [q for q in questions if q.id not in shown]  # never train on a question whose answer is shown
        few_shot_system = few_shot_system_prompt(2, examples, system=settings.env.system_prompt)
    peft_config = None
    if settings.lora:
        peft_config = LoraConfig(
            r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=0.0,
            target_modules="all-linear", task_type="CAUSAL_LM",
        )  # fmt: skip
    config = grpo_config(settings, checkpoint_dir, template_kwargs(model_path, settings.enable_thinking))
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is "experimental" in 1.16
    # GRPOTrainer wraps the model in LoRA before transformers' Trainer seeds: seed first, so the adapters
    # start the same whatever the process did before.
    from transformers import set_seed

    from sqlenv.train.adapters import skip_casts_under_autocast
    from sqlenv.train.heap import trim_callback

    set_seed(settings.seed)
    trainer = _trainer_class()(
        model=str(model_path),
        reward_funcs=component_reward_funcs(),
        args=config,
        train_dataset=Dataset.from_list(dataset_rows(questions, settings.env.system_prompt)),
        peft_config=peft_config,
        environment_factory=functools.partial(agent_env_class(settings.env), db_dir=str(db_dir), config=settings.env),
        callbacks=[trim_callback(), *callbacks],  # the heap freed after each step goes back to the OS
        few_shot_system=few_shot_system,
        few_shot_steps=settings.few_shot_steps,
        rollout_decoder=settings.rollout_decoder,
        draft_tokens=settings.draft_tokens,
        shared_prefix=settings.shared_prefix,
        # bf16 on a CPU: the loss's forward pass under bf16 autocast, where peft's cast of each LoRA input
        # to the fp32 adapters is redundant and skipped (`sqlenv.train.adapters`). One default-shape step
        # (8 rollouts of the SFT model, the same ones both ways, 2-core AMD EPYC): peak 7.6 -> 4.9 GB, loss
        # forward + backward 128 vs 131 s (within this machine's run-to-run noise). Not around generation:
        # there autocast costs ~12 % a decode step (casts of every adapter, every call).
        loss_autocast=settings.dtype == "bfloat16" and not _cuda(),
    )
    skip_casts_under_autocast(trainer.model)
    return trainer
