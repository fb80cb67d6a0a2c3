"""Multi-turn SFT warm-up: TRL's `SFTTrainer` with assistant-only loss on the verified trajectories, LoRA merged.

What is trained on, token for token, is what GRPO shows and generates (a test compares against how TRL's own
GRPOTrainer tokenizes the prompt and each tool result):
- The rows are tokenised here (`build_dataset`: `input_ids` and `assistant_masks`, from which SFTTrainer builds
  its labels), exactly as SFTTrainer's own conversational path with `assistant_only_loss=True` would tokenise
  them (a test compares the two): `messages` (arguments decoded to objects by `prompts.messages_for_template`)
  and `tools` rendered with TRL's training template for the model (`training_chat_template`: for Qwen2.5 TRL's
  `qwen2_5_training`, the same text plus `{% generation %}` markers). Tokenising here is what lets a turn be left
  out of the loss: the teacher's deliberate mistakes (`sft.train_on_mistakes: false`), which stay in the context.
- The chat-template variables the start model was prepared with (`provenance.chat_template_kwargs`, e.g.
  Qwen3's `{"enable_thinking": False}`; GRPO and evaluation render with the same) are passed to the template
  for every row. TRL's `qwen3_training` reads `enable_thinking` only in the generation prompt, which SFT never
  renders, so for Qwen3 they change no SFT token today; a template that reads them elsewhere (TRL's
  `qwen3_8_training` puts reasoning instructions in the system turn) would train on another prompt than GRPO
  and evaluation show without them.
- Trajectories longer than `max_length` are dropped and counted, never truncated (a cut-off episode would
  teach the model to stop mid-call).

Why `trainable_token_indices`: in the offline base checkpoint the `<tool_call>`/`</tool_call>` embedding
rows were never trained (they equal the padding rows), and the input and output embeddings are tied. LoRA on
linear layers cannot raise the logit of a token whose output row is noise, so those rows (all tokens
`provenance.untrained_token_ids` lists, plus the two tool tags always) are trained with peft's
`trainable_token_indices`; peft wraps the tied `lm_head` with the same delta, and `merge_and_unload` writes
the delta into the one shared matrix. `train.merge.save_trained` checks the tag rows really changed before saving.
peft merges the whole 151,936-row matrix on every forward for those ~13 rows; training runs inside
`training_patches`, whose `train.trainable_rows.sparse_trainable_rows` trains them without such copies (the same
loss and LoRA gradients; bench/bench_sft.py --vary trainable_rows: 0.82x the seconds a step on the Intel Xeon).

The device policy (`sqlenv.devices.sft_policy`, the `SFT` rows of docs/gpu.md's table) decides SFT's CPU
mechanisms: the LM-head patch (`trl_patches.compact_lm_head`) and the heap trims after each step run on a CPU
only. peft's input cast to the fp32 LoRA adapters is kept (GRPO skips it under its loss-only autocast): in SFT
skipping it measured 0.91x the peak and 0.91x the seconds a step, under the project's bar for a private name.

What this does not do: write the final folder atomically (the caller owns the destination; the `sft`
stage wraps it in `pipeline.io.atomic_dir`), or log anywhere but through the trainer's `report_to`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlenv.env import prompts
from sqlenv.provenance import (
    chat_template_kwargs,
    model_fingerprint,
    read_provenance,
    untrained_token_ids,
)
from sqlenv.devices import SFTPolicy, sft_policy
from sqlenv.train.checkpointing import activation_checkpointing
from sqlenv.train.merge import TOOL_TAGS, save_trained, tag_rows
from sqlenv.decode import common_prefix_length
from sqlenv.train.processes import world_size
from sqlenv.train.shared_prefix import (
    SharedPrefix,
    replayable_under_checkpointing,
    usable_length,
)
from sqlenv.train.trainable_rows import sparse_trainable_rows
from sqlenv.train.trl_patches import compact_lm_head
from sqlenv.types import stable_hash, strict_kwargs


@dataclass(frozen=True)
class TrainConfig:
    """The `sft` params section plus what the stage adds (seed, dtype, where to report). The defaults of the
    params-backed fields are params.yaml's (a test keeps them equal), so a library default is the pipeline's."""

    max_examples: int = 192
    epochs: int = 1
    learning_rate: float = 2e-4
    batch_size: int = 1
    gradient_accumulation_steps: int = 2
    max_length: int = 2048
    lora: bool = True
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    logging_steps: int = 2
    shared_prefix: bool = True
    activation_checkpointing: str | bool = "auto"  # auto: on when computing in float32 (`train.checkpointing`)
    train_on_mistakes: bool = False  # the teacher's deliberate wrong calls stay in the context, out of the loss
    seed: int = 0
    dtype: str = "bfloat16"
    max_steps: int = -1  # > 0 overrides epochs (tests)
    report_to: tuple[str, ...] = ()
    warmup_ratio: float = 0.05

    @classmethod
    def from_params(cls, sft: dict[str, Any], **extra: Any) -> TrainConfig:
        """From the `sft` params section plus `extra`."""
        return cls(**strict_kwargs(cls, sft, "sft training"), **extra)


@dataclass
class DatasetStats:
    candidates: int
    examples: int
    dropped_too_long: int
    tokens: int
    assistant_tokens: int
    mistake_turns_untrained: int = 0  # the teacher's deliberate wrong calls kept out of the loss
    length: dict[str, float] = field(default_factory=dict)
    by_kind: dict[str, int] = field(default_factory=dict)
    by_hardness: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------- examples
def select_examples(records: Sequence[dict[str, Any]], max_examples: int, seed: int) -> list[dict[str, Any]]:
    """The first `max_examples` records in stable-hash order of their ids (all when 0), in that order."""
    ordered = sorted(records, key=lambda r: (stable_hash(seed, "sft-subset:" + r["id"]), r["id"]))
    return ordered if max_examples <= 0 else ordered[:max_examples]


def training_chat_template(tokenizer: Any) -> str:
    """The template SFTTrainer tokenises with under `assistant_only_loss=True` (see its `__init__`)."""
    from trl.chat_template_utils import (
        get_training_chat_template,
        has_generation_markers,
    )

    own = tokenizer.chat_template
    if has_generation_markers(own):
        return own
    template = get_training_chat_template(tokenizer)
    if template is None:
        raise ValueError("TRL has no training chat template (with generation markers) for this tokenizer")
    return template


def conversation(record: dict[str, Any], template_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One dataset row as SFTTrainer reads it: messages with object arguments, tools as a JSON string, and
    `chat_template_kwargs` (the model's chat-template variables) when there are any."""
    row = {"messages": prompts.messages_for_template(record["messages"]), "tools": record["tools"]}
    if template_kwargs:
        row["chat_template_kwargs"] = dict(template_kwargs)
    return row


def tokenize_record(
    tokenizer: Any,
    record: dict[str, Any],
    chat_template: str,
    template_kwargs: Mapping[str, Any] | None = None,
    train_on_mistakes: bool = True,
) -> dict[str, list[int]]:
    """`input_ids` and `assistant_masks` exactly as SFTTrainer's tokenize step makes them under
    `assistant_only_loss=True` (the row's `chat_template_kwargs` after `chat_template` and `tools`, as its
    `tokenize_fn` spreads them); with `train_on_mistakes=False` the record's `mistakes` (the teacher's
    deliberate wrong calls, `sft_data.mistake_turns`) are out of the mask: still read, never imitated."""
    row = conversation(record, template_kwargs)
    kwargs = {"chat_template": chat_template, "tools": json.loads(row["tools"]), **row.get("chat_template_kwargs", {})}
    out = tokenizer.apply_chat_template(
        row["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True, **kwargs
    )
    mask = list(out["assistant_masks"])
    if not train_on_mistakes and record.get("mistakes"):
        mask = without_turns(mask, record["messages"], record["mistakes"])
    return {"input_ids": list(out["input_ids"]), "assistant_masks": mask}


def without_turns(mask: Sequence[int], messages: Sequence[dict[str, Any]], indices: Sequence[int]) -> list[int]:
    """`mask` with the assistant turns at `indices` (positions in `messages`) cleared: the k-th run of 1s is the
    k-th assistant message (tool results and the prompt sit between them)."""
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    runs, start = [], None
    for pos, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = pos
        elif not bit and start is not None:
            runs.append((start, pos))
            start = None
    if len(runs) != len(turns):
        raise ValueError(f"{len(turns)} assistant turns but {len(runs)} trained spans: cannot leave turns out")
    out = list(mask)
    for index in indices:
        if index not in turns:
            raise ValueError(f"message {index} is not an assistant turn")
        begin, end = runs[turns.index(index)]
        out[begin:end] = [0] * (end - begin)
    return out


def build_dataset(
    records: Sequence[dict[str, Any]],
    tokenizer: Any,
    max_length: int,
    template_kwargs: Mapping[str, Any] | None = None,
    train_on_mistakes: bool = False,
):
    """(datasets.Dataset, DatasetStats): the rows SFTTrainer gets, tokenised here (`input_ids`, `assistant_masks`:
    the trainer builds its labels from the mask), overlong trajectories dropped.

    Tokenised here rather than by the trainer so that a turn can be left out of the loss: with
    `train_on_mistakes=False` the teacher's deliberate mistakes are (`tokenize_record`). The tokens are the ones
    SFTTrainer's own conversational path makes (a test compares them). `template_kwargs`: the model's
    chat-template variables (`provenance.chat_template_kwargs`), rendered into every row."""
    from datasets import Dataset, Features, List, Value

    template = training_chat_template(tokenizer)
    rows, lengths, assistant, kept = [], [], 0, []
    too_long = masked_turns = 0
    for record in records:
        ids = tokenize_record(tokenizer, record, template, template_kwargs, train_on_mistakes)
        if len(ids["input_ids"]) > max_length:
            too_long += 1
            continue
        n_assistant = sum(ids["assistant_masks"])
        if n_assistant == 0:  # would train on nothing: the template or the record is broken
            raise ValueError(f"trajectory {record['id']} has no assistant tokens under the training template")
        rows.append(ids)
        lengths.append(len(ids["input_ids"]))
        assistant += n_assistant
        masked_turns += 0 if train_on_mistakes else len(record.get("mistakes", ()))
        kept.append(record)
    if not rows:
        raise ValueError(f"no SFT trajectory fits max_length={max_length} ({too_long} longer)")
    features = Features({"input_ids": List(Value("int32")), "assistant_masks": List(Value("int8"))})
    dataset = Dataset.from_list(rows, features=features)
    stats = DatasetStats(
        candidates=len(records),
        examples=len(rows),
        dropped_too_long=too_long,
        tokens=sum(lengths),
        assistant_tokens=assistant,
        mistake_turns_untrained=masked_turns,
        length={
            "min": min(lengths),
            "mean": round(statistics.fmean(lengths), 1),
            "median": statistics.median(lengths),
            "max": max(lengths),
        },
        by_kind=_count(kept, "kind"),
        by_hardness=_count(kept, "hardness"),
    )
    return dataset, stats


def _count(records: Sequence[dict[str, Any]], key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        out[r.get(key, "")] = out.get(r.get(key, ""), 0) + 1
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------------------------------- trainer
def trainable_token_ids(model_path: str | os.PathLike[str], tokenizer: Any) -> list[int]:
    """Embedding rows to train: those provenance lists as untrained, and the tool tags in any case."""
    ids = set(untrained_token_ids(model_path))
    for tag in TOOL_TAGS:
        tid = tokenizer.convert_tokens_to_ids(tag)
        if tid is None or tid == tokenizer.unk_token_id:
            raise ValueError(f"tokenizer of {model_path} has no {tag} token")
        ids.add(tid)
    return sorted(ids)


def machine_policy() -> SFTPolicy:
    """The device policy's SFT choices on this machine (`sqlenv.devices`)."""
    import torch

    return sft_policy(cuda=torch.cuda.is_available(), processes=world_size())


def build_trainer(
    model_path: str | os.PathLike[str],
    dataset: Any,
    config: TrainConfig,
    output_dir: str | os.PathLike[str],
    callbacks: Sequence[Any] = (),
    policy: SFTPolicy | None = None,
):
    """An SFTTrainer over `dataset` (from `build_dataset`) for the model folder `model_path`; `policy` (default:
    this machine's, `machine_policy`) says whether the heap is trimmed after each step.

    The model is loaded in `config.dtype` (bf16 or float32, whichever `model.dtype: auto` measured faster on
    this CPU; TRL would load float32 from a path). Activation checkpointing, on by default in TRL, follows
    `config.activation_checkpointing` (`sqlenv.train.checkpointing`: by default on in float32 only, where
    the memory is; in bf16 it would add a forward pass to every step: measured on the 6 longest episodes,
    ~1,400 tokens: 7.3 GB peak and 30 s a step without, 3.9 GB and 42 s with). On a CPU the heap is trimmed after
    every step (`sqlenv.train.heap`), so freed activations do not pile up (default run: 9.8 GB peak before, 8.5 GB
    after). In bf16 the Trainer runs the model under autocast; peft's cast of each LoRA input to the fp32 adapters
    stays (skipping it, `sqlenv.train.adapters`, saved 0.91x the peak and the time of a step: under the bar for a
    private name, so only GRPO's loss-only autocast uses it). Nothing is saved under `output_dir`
    (`save_strategy="no"`).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from trl import SFTConfig, SFTTrainer

    from sqlenv.train.heap import trim_callback

    policy = policy or machine_policy()
    checkpointing = activation_checkpointing(config.activation_checkpointing, config.dtype)
    # The LoRA matrices are initialised here, before the Trainer seeds anything: seed first, so the
    # same params give the same adapters whatever the process did before.
    set_seed(config.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, config.dtype))
    if config.lora:
        from peft import LoraConfig, get_peft_model

        peft_config = LoraConfig(
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules="all-linear",
            trainable_token_indices=trainable_token_ids(model_path, tokenizer),
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, peft_config)
        _expose_head_bias(model)
    args = SFTConfig(
        output_dir=str(output_dir),
        assistant_only_loss=False,  # the rows come tokenised with their assistant masks (`build_dataset`)
        max_length=config.max_length,
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=config.warmup_ratio,  # a float in [0, 1) is a share of the total steps
        logging_steps=config.logging_steps,
        logging_first_step=True,
        save_strategy="no",
        report_to=list(config.report_to),
        seed=config.seed,
        data_seed=config.seed,
        bf16=config.dtype == "bfloat16",
        use_cpu=policy.device.startswith("cpu"),
        activation_checkpointing=checkpointing,  # (transformers 5.24's name of gradient_checkpointing)
        dataloader_num_workers=0,
        disable_tqdm=False,
    )
    return _trainer_class()(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[trim_callback(), *callbacks] if policy.heap_trim else list(callbacks),  # glibc, on a CPU
        shared_prefix=config.shared_prefix,
    )


def dataset_prefix(dataset: Any) -> list[int]:
    """The token ids every trajectory of SFTTrainer's prepared `dataset` (`input_ids`, `labels` with -100 off the
    assistant turns) opens with — the system prompt and tool schemas —, ending before the position that predicts
    the earliest labelled token (`shared_prefix.usable_length`). Empty without those columns."""
    if not {"input_ids", "labels"} <= set(dataset.column_names) or len(dataset) == 0:
        return []
    ids = dataset["input_ids"]
    first_labelled = min(next((i for i, t in enumerate(row) if t != -100), len(row)) for row in dataset["labels"])
    return list(ids[0][: usable_length(common_prefix_length(ids), first_labelled)])


def _trainer_class() -> type:
    from trl import SFTTrainer

    class SQLAgentSFTTrainer(SFTTrainer):
        """SFTTrainer that encodes the prefix every trajectory opens with once per optimizer step
        (`sqlenv.train.shared_prefix`) instead of once per trajectory: the same loss and gradients."""

        def __init__(self, *args: Any, shared_prefix: bool = True, **kwargs: Any):
            super().__init__(*args, **kwargs)
            # One process only: under DDP the gradients are all-reduced before the prefix's share is added.
            on = shared_prefix and self.accelerator.num_processes == 1
            self._prefix_ids = dataset_prefix(self.train_dataset) if on else []
            self._step_prefix = None
            if self._prefix_ids and self.args.activation_checkpointing:
                replayable_under_checkpointing(self.model)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            # The suffix after the shared prefix, attending to the prefix's cache; the attention mask keeps its
            # full length (prefix + suffix), which is also what TRL counts as the step's tokens.
            n = len(self._prefix_ids)
            ids, labels = inputs.get("input_ids"), inputs.get("labels")
            applies = (
                n >= SharedPrefix.MIN_LENGTH and ids is not None and labels is not None and ids.size(0) == 1
                and set(inputs) <= {"input_ids", "labels", "attention_mask"}
                and bool(inputs.get("attention_mask", ids.new_ones(1)).all()) and bool((labels[0, : n + 1] == -100).all())
                and ids[0, :n].tolist() == self._prefix_ids and ids.size(1) > n
            )  # fmt: skip
            if applies and model.training and not return_outputs:
                if self._step_prefix is None:  # the step's first micro-batch, inside the Trainer's autocast
                    self._step_prefix = SharedPrefix.encode(model, self._prefix_ids)
                inputs = {**inputs, "input_ids": ids[:, n:], "labels": labels[:, n:], "cache": self._step_prefix.cache()}
                inputs.setdefault("attention_mask", ids.new_ones(ids.shape))
            return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)

        def training_step(self, *args: Any, **kwargs: Any):
            loss = super().training_step(*args, **kwargs)
            # The step's last micro-batch (clipping and the optimizer step follow): the prefix's gradient, left in
            # its leaves by every micro-batch, goes into the adapters once.
            if self.accelerator.sync_gradients and self._step_prefix is not None:
                prefix, self._step_prefix = self._step_prefix, None
                prefix.finish()
            return loss

    return SQLAgentSFTTrainer


def _expose_head_bias(model: Any) -> None:
    """Let TRL's fused LM head read `lm_head.bias` through peft's trainable-tokens wrapper.

    SFTTrainer (TRL 1.16) computes log-probabilities from `lm_head.weight` and `lm_head.bias` directly. On a
    tied model peft wraps `lm_head` in a `TrainableTokensWrapper` whose `weight` is the merged matrix (base
    rows with the trained rows swapped in, differentiable in the delta), so the output side of the tool-tag
    rows is trained too — but the wrapper exposes no `bias` and the first step fails with AttributeError.
    The wrapped head of a Qwen2 model has no bias; we say so on the wrapper. A head with a real bias would
    need it registered twice, so that case is refused rather than silently trained without it.
    """
    head = model.get_output_embeddings()
    original = getattr(head, "original_module", None)
    if original is None or "bias" in head.__dict__ or hasattr(type(head), "bias"):
        return
    if getattr(original, "bias", None) is not None:
        raise ValueError("trainable token rows on an output head with a bias are not supported by TRL's fused LM head")
    head.bias = None


def loss_curve(log_history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-logging-step rows (step, epoch, loss, learning_rate, grad_norm, token accuracy, tokens seen)."""
    keys = ("step", "epoch", "loss", "learning_rate", "grad_norm", "mean_token_accuracy", "entropy", "num_tokens")
    return [{k: entry.get(k) for k in keys} for entry in log_history if "loss" in entry]


# -------------------------------------------------------------------------------------------- training
@dataclass
class SFTResult:
    dataset: DatasetStats
    train_loss: float
    steps: int
    train_wall_s: float
    seconds_per_step: float
    activation_checkpointing: bool
    curve: list[dict[str, Any]]
    provenance: dict[str, Any]

    def metrics(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("curve", "provenance")}
        out["fingerprint"] = self.provenance.get("fingerprint")
        return out


@contextlib.contextmanager
def training_patches(model: Any, sparse_rows: bool = True, policy: SFTPolicy | None = None) -> Iterator[None]:
    """What SFT's `trainer.train()` runs inside, in the stage and the benchmarks: where `policy` (default: this
    machine's) says so (a CPU), TRL's fused LM head scores the labelled positions only (`trl_patches.compact_lm_head`);
    and the trainable token rows train without whole-vocabulary copies (`trainable_rows.sparse_trainable_rows`;
    `sparse_rows=False`: peft's own path, for A/Bs)."""
    policy = policy or machine_policy()
    with (compact_lm_head() if policy.compact_lm_head else contextlib.nullcontext()), (
        sparse_trainable_rows(model) if sparse_rows else contextlib.nullcontext()
    ):
        yield


def train_sft(
    records: Sequence[dict[str, Any]],
    model_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None,
    config: TrainConfig,
    *,
    output_dir: str | os.PathLike[str] = "checkpoints/sft",
    callbacks: Sequence[Any] = (),
) -> SFTResult:
    """Select, tokenise and train; merge and save the final model into `out_dir`.

    `out_dir=None`: train without saving — a non-main process of a multi-process run, whose model is
    the main process's (the returned result then has no provenance).
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    chosen = select_examples(records, config.max_examples, config.seed)
    # Rendered with the variables GRPO and evaluation use for this model (Qwen3: enable_thinking).
    dataset, stats = build_dataset(
        chosen, tokenizer, config.max_length, chat_template_kwargs(model_path), config.train_on_mistakes
    )
    policy = machine_policy()
    trainer = build_trainer(model_path, dataset, config, output_dir, callbacks, policy=policy)
    before = tag_rows(trainer.model, tokenizer)
    t0 = time.monotonic()
    with training_patches(trainer.model, policy=policy):
        output = trainer.train()
    wall = time.monotonic() - t0
    curve = loss_curve(trainer.state.log_history)
    if out_dir is None:
        return _result(stats, output, trainer, wall, curve, {})
    base = read_provenance(model_path)
    # With LoRA these rows are the trainable_token_indices; full fine-tuning trains every row anyway.
    trained_rows = {tokenizer.convert_ids_to_tokens(i): i for i in trainable_token_ids(model_path, tokenizer)}
    provenance = save_trained(
        trainer, out_dir, start_dir=model_path, dtype=config.dtype, tag_rows_before=before, tokenizer=tokenizer,
        provenance={
            "spec": f"sft:{base.get('spec', str(model_path))}",
            "source": "sft",
            "base_fingerprint": model_fingerprint(model_path),
            "upstream": base.get("upstream"),
            "chat_template": base.get("chat_template", {}),
            "chat_template_kwargs": base.get("chat_template_kwargs", {}),
            # The rows the base listed as untrained are among the trained ones (`trainable_token_ids`).
            "untrained_tokens": {t: i for t, i in base.get("untrained_tokens", {}).items() if i not in trained_rows.values()},
            "trained_token_rows": trained_rows,
            "sft": {"examples": stats.examples, "steps": trainer.state.global_step, "lora": config.lora},
        },
    )  # fmt: skip
    return _result(stats, output, trainer, wall, curve, provenance)


def _result(stats: DatasetStats, output: Any, trainer: Any, wall: float, curve: list, provenance: dict) -> SFTResult:
    steps = trainer.state.global_step
    return SFTResult(
        dataset=stats,
        train_loss=float(output.training_loss) if math.isfinite(output.training_loss) else float("nan"),
        steps=steps,
        train_wall_s=round(wall, 1),
        seconds_per_step=round(wall / steps, 2) if steps else 0.0,
        activation_checkpointing=bool(trainer.args.activation_checkpointing),
        curve=curve,
        provenance=provenance,
    )
