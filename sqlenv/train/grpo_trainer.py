"""The GRPO trainer: TRL 1.16's `GRPOTrainer`, subclassed by name, and the log-prob passes of `grpo.shared_prefix`.

Importing this module imports TRL and torch; `sqlenv.train.grpo` (settings, batch plan, rewards, the builder)
does not, so a stage can read its settings without them. What the subclass adds:
- resume order: TRL's `RepeatSampler` has no `set_epoch`, so a resume in epoch >= 1 replayed epoch 0's prompts
  (`EpochRepeatSampler`, `sampler_epoch_callback`);
- few-shot prompts: worked oracle episodes in the system prompt while `state.global_step < few_shot_steps`, swapped
  where TRL reads the prompt, keyed on the restored `global_step` (exact and resume-safe; a dataset transform
  toggled by a callback would be one step late: accelerate fetches the next batch one step ahead);
- the generation batch's dataset rows for the `rollout_func` (`rollout_rows`), and the question ids of each
  training log entry (`log`: "questions");
- bf16 on a CPU: the loss's forward pass under autocast (`loss_autocast`), generation and reference passes not;
- `shared_prefix`: log-prob passes without padding, after the step's shared prompt prefix encoded once
  (`sqlenv.train.shared_prefix`; on by the device policy on one CPU process, `sqlenv.devices`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from accelerate.utils import gather_object
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from sqlenv.decode import common_prefix_length
from sqlenv.train.shared_prefix import SharedPrefix, replayable_under_checkpointing, usable_length


class EpochRepeatSampler(RepeatSampler):
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


def sampler_epoch_callback(trainer: Any):
    """A TrainerCallback that tells `trainer._epoch_sampler` its epoch at each epoch's start, from the
    (restored) trainer state.

    accelerate's `DataLoaderShard.set_epoch` reaches the sampler through one or two wrappers, not through
    both of a multi-process run resumed mid-epoch (`SkipBatchSampler` around `BatchSamplerShard`).
    `state.epoch` is the epoch number plus the finished fraction of it: exactly the number at an epoch's start.
    """
    class SamplerEpoch(TrainerCallback):
        def on_epoch_begin(self, args, state, control, **kwargs):
            sampler = getattr(trainer, "_epoch_sampler", None)
            if sampler is not None:
                sampler.set_epoch(math.floor(state.epoch or 0))

    return SamplerEpoch()


class SQLAgentGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose first `few_shot_steps` steps see worked examples in the system prompt, whose training
    order after a resume is that of an uninterrupted run (`EpochRepeatSampler`), which hands each generation
    batch's dataset rows to its `rollout_func` (`rollout_rows`: `sqlenv.train.rollouts.RolloutFunc`), and
    whose log-prob passes may run per rollout after the step's shared prompt prefix (`shared_prefix`).

    Private TRL methods it overrides, each for a reason docs/performance.md lists with its guarding test:
    `_get_train_sampler` (resume order), `_generate_and_score_completions` (few-shot prompts, the batch's
    rows and question ids, the shared prefix of the batch), `_get_per_token_logps_and_entropies` (the
    shared-prefix passes, `grpo.shared_prefix`)."""

    def __init__(self, *args: Any, few_shot_system: str | None = None, few_shot_steps: int = 0,
                 loss_autocast: bool = False, shared_prefix: bool = False, **kwargs: Any):  # fmt: skip
        super().__init__(*args, **kwargs)
        self.loss_autocast = loss_autocast
        # Under DDP the last micro-batch's backward all-reduces the gradients before the shared prefix's
        # share could be added (`sqlenv.train.shared_prefix`): one process only (`sqlenv.devices`).
        self.shared_prefix = shared_prefix and self.accelerator.num_processes == 1
        if self.shared_prefix and self.args.activation_checkpointing:
            replayable_under_checkpointing(self.model)
        self._prefix_ids: list[int] = []  # the prompt prefix every rollout of the current generation batch opens with
        self._step_prefix = None  # its SharedPrefix under the current weights, with gradient (one optimizer step)
        self.few_shot_system = few_shot_system
        self.few_shot_steps = few_shot_steps if few_shot_system else 0
        self._questions: list[str] = []  # ids of the questions generated for since the last training log
        self.rollout_rows: list[dict[str, Any]] | None = None  # the generation batch's dataset rows, for rollout_func
        self.rollout_question_ids: list[str] | None = None  # one per group trained on, where rollout_func chose them
        self.add_callback(sampler_epoch_callback(self))

    def compute_loss(self, model, inputs, *args, **kwargs):
        # The policy's forward pass, the one the loss backpropagates through; generation and the
        # reference pass (no gradient) stay outside autocast, where it would only add casts.
        if not self.loss_autocast:
            return super().compute_loss(model, inputs, *args, **kwargs)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            return super().compute_loss(model, inputs, *args, **kwargs)

    def _get_train_sampler(self, dataset=None):
        trl_sampler = super()._get_train_sampler(dataset)  # TRL's arguments, our epoch handling
        self._epoch_sampler = EpochRepeatSampler(
            data_source=trl_sampler.data_source, mini_repeat_count=trl_sampler.mini_repeat_count,
            batch_size=trl_sampler.batch_size, repeat_count=trl_sampler.repeat_count,
            shuffle=trl_sampler.shuffle, seed=trl_sampler.seed,
        )  # fmt: skip
        return self._epoch_sampler

    def _generate_and_score_completions(self, inputs):
        # Called once per generation batch, inside the step that uses it: global_step is the
        # number of finished steps (restored on resume), so steps 1..few_shot_steps get examples.
        if self.model.training and self.state.global_step < self.few_shot_steps:
            inputs = [{**x, "prompt": [{"role": "system", "content": self.few_shot_system}, *x["prompt"][1:]]} for x in inputs]
        if self.shared_prefix:
            self._prefix_ids = []  # TRL's reference pass runs inside: not the previous batch's prefix
        self.rollout_rows, self.rollout_question_ids = inputs, None
        try:
            batch = super()._generate_and_score_completions(inputs)
        finally:
            self.rollout_rows = None
        if self.model.training:  # the questions trained on: the batch's, or those dynamic sampling kept (RolloutFunc)
            ids = self.rollout_question_ids or [str(x.get("id", "")) for x in inputs]
            self._questions.extend(gather_object([str(i) for i in ids]))  # every process calls it
        if self.shared_prefix:
            self._prefix_ids = batch_prompt_prefix(batch["prompt_ids"], batch["prompt_mask"])
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
        if torch.is_grad_enabled():  # the loss's pass: the step's prefix, backpropagated once in training_step
            if self._step_prefix is None and len(self._prefix_ids) >= SharedPrefix.MIN_LENGTH:
                with self.accelerator.autocast():  # as TRL runs the model in this pass
                    self._step_prefix = SharedPrefix.encode(model, self._prefix_ids)
            prefix = self._step_prefix
        else:  # a reference or old-policy pass: this call's own prefix, no gradient
            ids = self._prefix_ids or batch_prompt_prefix(input_ids[:, : input_ids.size(1) - logits_to_keep],
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

    def log(self, logs: dict[str, Any], start_time: float | None = None) -> None:
        # A training log entry carries the distinct question ids of its steps ("questions", space-separated),
        # so the curve (from `state.log_history`, restored on resume) says which questions each step saw.
        if self._questions and "loss" in logs:
            logs = {**logs, "questions": " ".join(dict.fromkeys(self._questions))}
            self._questions = []
        super().log(logs, start_time)


def batch_prompt_prefix(prompt_ids: Any, prompt_mask: Any) -> list[int]:
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

    ran = [r for r in rows if r is not None]
    dtype = ran[0][0].dtype if ran else torch.float32
    zeros = torch.zeros(logits_to_keep, dtype=dtype, device=device)
    logps = torch.stack([zeros if r is None else r[0] for r in rows])
    entropies = torch.stack([zeros if r is None else r[1] for r in rows])
    if not ran and torch.is_grad_enabled():
        logps.requires_grad_()
    return logps, entropies
