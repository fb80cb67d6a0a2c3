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
- Rollouts (`grpo.rollout_decoder`, resolved by the device policy, `sqlenv.devices`): `sqlenv` plays every
  rollout through the one episode loop evaluation plays (`sqlenv.train.rollouts.RolloutFunc`, TRL's
  public `rollout_func`), drafting `grpo.draft_tokens` per decode step (`auto`: the policy's, 8 on a CPU and
  0 on a GPU); `trl` leaves them to TRL's own `environment_factory` tool loop (TRL's or vLLM's
  generation). A test replays scripted turns through both and compares ids, mask, rewards and verdicts.
- Rewards: the environment owns the optimised reward, weight 1, named after the adapter class
  (`SQLAgentEnv`): with `trl`, TRL appends `SQLAgentEnv.get_reward` as the last reward function; with
  `sqlenv`, `reward_funcs` appends `env_reward_func`, which reads the same total from the rollout's
  `episode` field. Before it come one function per reward component with weight 0: TRL logs each as
  `rewards/<component>/mean|std`, and since the advantage is computed from `nansum(weights × rewards)`
  a zero weight adds exactly 0 (a test recomputes the advantages from the env reward alone). The
  first component function also reports per-batch episode diagnostics through TRL's `log_metric`
  hook (`episode/...` metrics, averaged per logging step) and per-episode columns through
  `log_extra` (they land in `trainer._logs["extra"]`, read by the transcript logger).
- Few-shot option (`grpo.few_shot_steps`), resume order and the shared-prefix log-prob passes: the trainer
  subclass, `sqlenv.train.grpo_trainer.SQLAgentGRPOTrainer`.
- Resume is exact: resumed from a checkpoint, a phase ends with the weights of an uninterrupted run
  (a test compares every tensor). Trainer restores the optimizer, scheduler and RNG states (generation
  samples from torch's global generator) and skips the finished batches.
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
from sqlenv.devices import GRPOPolicy, grpo_policy
from sqlenv.types import Question, strict_kwargs, verdict

STAGES = {1: "grpo_phase1", 2: "grpo_phase2"}
# How TRL names the environment's get_reward column: after the adapter class, one per answer mode.
ENV_REWARD_NAMES = (SQLAgentEnv.__name__, SQLAnswerAgentEnv.__name__)
TOOL_CALL_TAG = "<tool_call>"
EPISODE_METRICS = (
    "episode/accuracy", "episode/answered", "episode/turns", "episode/tool_calls", "episode/tokens",
    "episode/tool_call_parse_rate", "episode/argument_error_rate", "episode/calls_after_answer",
    "episode/budget_exhausted", "episode/mixed_correctness", "episode/informative_rollouts",
)  # fmt: skip
# Dynamic sampling (`grpo.oversample` > 1, `sqlenv.train.rollouts`): groups played in the step, those with mixed
# correctness among them, the mixed ones among those trained on, and the trained ones that replaced the batch's own.
SAMPLING_METRICS = ("sampling/groups_played", "sampling/groups_mixed", "sampling/groups_kept_mixed", "sampling/groups_replaced")


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
    rollout_decoder: str  # auto | sqlenv (the episode loop, TRL's rollout_func) | trl (TRL's environment_factory loop)
    draft_tokens: str | int  # auto (the device policy) | n: tokens the sqlenv loop guesses per rollout and decode step (0: off)
    oversample: int  # groups played per group trained on (dynamic sampling, `sqlenv.train.rollouts`); 1: off
    mask_truncated_completions: bool  # TRL's: a rollout cut off at max_completion_length leaves the loss
    shared_prefix: str | bool  # auto | true | false: log-prob passes without padding, after the step's shared prompt prefix (one process)
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
    draft = g["draft_tokens"]
    if draft != "auto" and (type(draft) is not int or draft < 0):
        raise ValueError(f"grpo.draft_tokens must be auto or a whole number >= 0, got {draft!r}")
    if type(g["oversample"]) is not int or g["oversample"] < 1:
        raise ValueError(f"grpo.oversample must be a whole number >= 1, got {g['oversample']!r}")
    if g["few_shot_steps"] < 0 or g["checkpoint_every"] < 1 or p["max_steps"] < 1:
        raise ValueError("grpo.few_shot_steps must be >= 0, grpo.checkpoint_every and max_steps >= 1")
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
    groups: dict[Any, list[bool]] = {}
    for e in episodes:
        groups.setdefault(e.get("question_id"), []).append(bool(e["correct"]))
    played_twice = [g for key, g in groups.items() if key is not None and len(g) > 1]
    mixed = [g for g in played_twice if len(set(g)) > 1]
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
        "episode/mixed_correctness": len(mixed) / len(played_twice) if played_twice else math.nan,
        "episode/informative_rollouts": sum(map(len, mixed)) / sum(map(len, played_twice)) if played_twice else math.nan,
    }


def _episodes(name: str, environments: Any, episode: Any) -> list[Mapping[str, Any]]:
    """Each rollout's `SQLEnv.summary`: the rollout_func's `episode` field, or (TRL's loop) the adapters' own."""
    if episode is not None:
        return list(episode)
    if environments is None:
        raise ValueError(f"reward {name!r} needs GRPOTrainer(rollout_func=RolloutFunc(...)) or "
                         "GRPOTrainer(environment_factory=SQLAgentEnv...)")  # fmt: skip
    return [env._episode for env in environments]  # the adapter's diagnostics hook (a property, so not a tool)


def _component_reward(name: str, report: bool) -> Callable[..., list[float]]:
    def reward(environments=None, episode=None, transcript=None, completions=None, completion_ids=None,
               log_metric=None, log_extra=None, sampling=None, **_):  # fmt: skip
        episodes = _episodes(name, environments, episode)
        if report:
            if log_metric is not None and sampling:  # what dynamic sampling played and kept: TRL passes it once per row
                for key in SAMPLING_METRICS:
                    log_metric(key, float(sampling[0][key.split("/", 1)[1]]))
            if log_metric is not None:
                # the rollout_func's played turns; TRL's loop leaves its parsed turns in `completions`
                turns = [m[2:] for m in transcript] if transcript is not None else completions or []
                for key, value in episode_diagnostics(episodes, turns, completion_ids or []).items():
                    log_metric(key, value)
                if episode is not None:  # what TRL's own loop logs of its tool calls
                    calls = sum(e["tool_calls"] for e in episodes)
                    log_metric("tools/call_frequency", calls / max(len(episodes), 1))
                    log_metric("tools/failure_frequency", sum(e["tool_failures"] for e in episodes) / calls if calls else 0.0)
            if log_extra is not None:
                log_extra("question_id", [e["question_id"] for e in episodes])
                log_extra("verdict", [verdict(e["answered"], e["correct"]) for e in episodes])
                log_extra("env_steps", [e["steps"] for e in episodes])
                log_extra("calls_after_end", [e["calls_after_end"] for e in episodes])
                if transcript is not None:  # the played episode, tables and tool results included
                    log_extra("messages", [list(m) for m in transcript])
        return [float(e["reward_components"][name]) for e in episodes]

    reward.__name__ = reward.__qualname__ = name  # TRL names the metric after it: rewards/<name>/mean
    return reward


def component_reward_funcs(components: Sequence[str] = COMPONENTS) -> list[Callable[..., list[float]]]:
    """One zero-weight reward function per env reward component; the first also reports diagnostics."""
    return [_component_reward(name, report=(i == 0)) for i, name in enumerate(components)]


def env_reward_func(env_class: type) -> Callable[..., list[float]]:
    """The environment's total reward (weight 1) read from the rollout_func's `episode` field, named after the
    adapter class as TRL names `get_reward` in its own loop, so both paths log `rewards/SQLAgentEnv/...`."""

    def reward(episode=None, **_):
        if episode is None:
            raise ValueError("the environment's reward needs GRPOTrainer(rollout_func=RolloutFunc(...))")
        return [float(e["reward"]) for e in episode]

    reward.__name__ = reward.__qualname__ = env_class.__name__
    return reward


def reward_funcs(policy: GRPOPolicy, env_config: EnvConfig) -> list[Callable[..., list[float]]]:
    """The reward functions of a phase: the components (weight 0), and the env's total where TRL does not add it."""
    funcs = component_reward_funcs()
    return funcs + [env_reward_func(agent_env_class(env_config))] if policy.rollout_decoder == "sqlenv" else funcs


VLLM_MODES = ("none", "colocate", "server")  # not "off": DVC rewrites params.yaml as YAML 1.2, and 1.1 reads off as False


def vllm_arguments(use_vllm: str) -> dict[str, Any]:
    """`grpo.use_vllm` as TRL 1.16's GRPOConfig arguments: none -> HF generation on the training device;
    colocate / server -> `use_vllm=True` with that `vllm_mode` (vLLM inside the trainer's process, or a
    separate `trl vllm-serve` server the trainer syncs weights to)."""
    if use_vllm not in VLLM_MODES:
        raise ValueError(f"grpo.use_vllm must be one of {VLLM_MODES}, got {use_vllm!r}")
    return {"use_vllm": False} if use_vllm == "none" else {"use_vllm": True, "vllm_mode": use_vllm}


def phase_policy(settings: PhaseSettings) -> GRPOPolicy:
    """The device policy's choices for this phase on this machine (`sqlenv.devices`)."""
    import torch

    return grpo_policy(cuda=torch.cuda.is_available(), processes=world_size(), use_vllm=settings.use_vllm,
                       dtype=settings.dtype, rollout_decoder=settings.rollout_decoder,
                       shared_prefix=settings.shared_prefix, draft_tokens=settings.draft_tokens)  # fmt: skip


def grpo_config(settings: PhaseSettings, checkpoint_dir: str | os.PathLike[str], template_kwargs: Mapping[str, Any] | None = None,
                policy: GRPOPolicy | None = None):  # fmt: skip
    """The GRPOConfig of a phase (checkpoints to `checkpoint_dir`, no reporting: pipeline/ logs)."""
    from trl import GRPOConfig

    policy = policy or phase_policy(settings)
    cuda = policy.device not in ("cpu", "cpu-ddp")
    # the env's total has weight 1: TRL appends get_reward in its own loop, `reward_funcs` appends it with sqlenv's
    weights = [0.0] * len(COMPONENTS) + ([1.0] if policy.rollout_decoder == "sqlenv" else [])

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
        reward_weights=weights,
        model_init_kwargs={"dtype": settings.dtype},
        chat_template_kwargs=dict(template_kwargs or {}),
        # The weights are loaded in `dtype` (bf16: ~1.6x faster than fp32 on CPU). On a GPU, bf16 autocast as
        # every GPU recipe (and DeepSpeed's bf16 config, `configs/accelerate/deepspeed_zero2.yaml`) expects. On
        # a CPU the trainer autocasts the loss's forward pass only (`loss_autocast`, see build_trainer).
        bf16=policy.mixed_precision_bf16,
        use_cpu=not cuda,  # also what makes several CPU processes join as one (accelerate's MULTI_CPU, gloo)
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
    policy: GRPOPolicy | None = None,
):
    """The phase's GRPOTrainer over the real environment (model loaded from `model_path` in `settings.dtype`).

    `policy` (default: this machine's, `phase_policy`) says who plays the rollouts (`RolloutFunc` through
    TRL's `rollout_func`, or TRL's `environment_factory` loop), how many tokens that loop drafts, which log-prob
    passes run, the precision and the heap trims: the builder follows it, not the settings' `auto` knobs."""
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
    policy = policy or phase_policy(settings)
    config = grpo_config(settings, checkpoint_dir, template_kwargs(model_path, settings.enable_thinking), policy)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func and environment_factory are "experimental" in 1.16
    # GRPOTrainer wraps the model in LoRA before transformers' Trainer seeds: seed first, so the adapters
    # start the same whatever the process did before.
    from transformers import set_seed

    from sqlenv.train.adapters import skip_casts_under_autocast
    from sqlenv.train.grpo_trainer import SQLAgentGRPOTrainer
    from sqlenv.train.heap import trim_callback
    from sqlenv.train.rollouts import RolloutFunc

    if settings.oversample > 1 and (policy.rollout_decoder != "sqlenv" or world_size() > 1):
        raise ValueError("grpo.oversample > 1 needs the sqlenv rollout decoder and one process "
                         f"(here: rollout_decoder {policy.rollout_decoder}, {world_size()} processes)")  # fmt: skip
    if policy.rollout_decoder == "sqlenv":
        # drafting as the policy says: on a CPU by default, on a GPU only where grpo.draft_tokens sets a count
        rollouts = {"rollout_func": RolloutFunc(db_dir=db_dir, env_config=settings.env, draft_tokens=policy.draft_tokens,
                                                oversample=settings.oversample)}  # fmt: skip
    else:
        rollouts = {"environment_factory": functools.partial(agent_env_class(settings.env), db_dir=str(db_dir), config=settings.env)}
    set_seed(settings.seed)
    trainer = SQLAgentGRPOTrainer(
        model=str(model_path),
        reward_funcs=reward_funcs(policy, settings.env),
        args=config,
        train_dataset=Dataset.from_list(dataset_rows(questions, settings.env.system_prompt)),
        peft_config=peft_config,
        **rollouts,
        # the heap freed after each step goes back to the OS (glibc, on a CPU)
        callbacks=[trim_callback(), *callbacks] if policy.heap_trim else list(callbacks),
        few_shot_system=few_shot_system,
        few_shot_steps=settings.few_shot_steps,
        shared_prefix=policy.shared_prefix,
        # bf16 on a CPU: the loss's forward pass under bf16 autocast, where peft's cast of each LoRA input
        # to the fp32 adapters is redundant and skipped (`sqlenv.train.adapters`). One default-shape step
        # (8 rollouts of the SFT model, the same ones both ways, 2-core AMD EPYC): peak 7.6 -> 4.9 GB, loss
        # forward + backward 128 vs 131 s (within this machine's run-to-run noise). Not around generation:
        # there autocast costs ~12 % a decode step (casts of every adapter, every call).
        loss_autocast=policy.loss_autocast,
    )
    if policy.loss_autocast:
        skip_casts_under_autocast(trainer.model)
    return trainer
