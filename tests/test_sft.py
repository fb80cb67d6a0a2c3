"""SFT on the tiny model: TRL's training template, token parity with GRPO rollouts (Qwen2.5 and Qwen3 templates),
the model's chat-template kwargs reaching the trainer, assistant masks, merged save."""

from __future__ import annotations

import inspect
import json
from types import SimpleNamespace

import pytest
import torch

from sqlenv.chat_templates import trl_chat_template
from sqlenv.data.questions import build_questions
from sqlenv.data.sft_data import SFTDataConfig, build_sft_data
from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig
from sqlenv.env.trl_adapter import SQLAgentEnv
from sqlenv.provenance import chat_template_kwargs
from sqlenv.train import sft
from sqlenv.train.grpo import template_kwargs
from sqlenv.train.sft import (
    TOOL_TAGS,
    TrainConfig,
    build_dataset,
    build_trainer,
    select_examples,
    tokenize_record,
    train_sft,
    training_chat_template,
)
from sqlenv.train.tiny_model import build_tiny_model
from sqlenv.train.trl_patches import compact_lm_head


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-qwen2")


@pytest.fixture(scope="module")
def tokenizer(tiny):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny)


@pytest.fixture
def variant(template_variant, tiny, tokenizer, tiny_models):
    """The model folder, tokenizer and recorded chat-template kwargs of one template variant (Qwen2.5: `tiny`)."""
    if template_variant == "qwen2_5":
        model_dir, tok = tiny, tokenizer
    else:
        model_dir, tok = tiny_models.path(template_variant), tiny_models.tokenizer(template_variant)
    return SimpleNamespace(name=template_variant, model_dir=model_dir, tokenizer=tok,
                           kwargs=chat_template_kwargs(model_dir))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    db_dir = tmp_path_factory.mktemp("world")
    built = build_questions(db_dir, seed=0, source="synthetic", domains=["retail"], databases_per_domain=1, questions_per_db=30)
    records = build_sft_data(built.questions, db_dir, EnvConfig(), SFTDataConfig(error_recovery_fraction=0.3)).records
    return db_dir, {q.id: q for q in built.questions}, records


def _trl_own_trainer(model_dir, tokenizer, records, kwargs, output_dir):
    """TRL's own SFTTrainer on the conversational rows, `assistant_only_loss=True`: the tokens and labels that
    `build_dataset`'s pre-tokenised rows must equal."""
    from datasets import Dataset, Features, Json, List, Value
    from trl import SFTConfig, SFTTrainer

    features = Features({"messages": List(Json()), "tools": Value("string")})
    if kwargs:  # SFTTrainer's own column for the template variables
        features["chat_template_kwargs"] = Json()
    rows = [sft.conversation(r, kwargs) for r in records]
    args = SFTConfig(output_dir=str(output_dir), assistant_only_loss=True, max_length=4096, max_steps=1,
                     use_cpu=True, report_to=[], save_strategy="no")
    return SFTTrainer(model=str(model_dir), args=args, train_dataset=Dataset.from_list(rows, features=features),
                      processing_class=tokenizer)


def test_trl_recognises_the_template_and_swaps_in_its_training_variant(tokenizer, tiny, world, tmp_path):
    from trl.chat_template_utils import has_generation_markers

    assert tokenizer.chat_template == trl_chat_template("qwen2_5")
    assert not has_generation_markers(tokenizer.chat_template)
    assert training_chat_template(tokenizer) == trl_chat_template("qwen2_5_training")
    dataset, _ = build_dataset(world[2][:2], tokenizer, max_length=4096)
    trainer = build_trainer(tiny, dataset, TrainConfig(max_steps=1), tmp_path)
    assert set(dataset.column_names) == {"input_ids", "assistant_masks"}  # tokenised here: the masks are the loss
    assert "TrimHeap" in [type(c).__name__ for c in trainer.callback_handler.callbacks]  # sqlenv.train.heap
    from peft.tuners.lora import LoraLayer

    lora = [m for m in trainer.model.modules() if isinstance(m, LoraLayer)]
    assert lora and not any(getattr(m, "_sqlenv_cast_hook", False) for m in lora)  # peft's input casts kept in SFT
    # What TRL's own conversational path would tokenise with under assistant_only_loss.
    assert _trl_own_trainer(tiny, tokenizer, world[2][:1], {}, tmp_path).chat_template == training_chat_template(tokenizer)


def _grpo_trainer_stub(tokenizer, env, kwargs):
    """The attributes GRPOTrainer's own `_tokenize_prompts`/`_get_tool_suffix_ids` read, set as its __init__ does
    (`kwargs`: `GRPOConfig.chat_template_kwargs`)."""
    from trl.chat_template_utils import (
        get_training_chat_template,
        is_chat_template_prefix_preserving,
    )

    tools = [getattr(env, n) for n, _ in inspect.getmembers(type(env), inspect.isfunction)
             if n not in ("reset", "get_reward") and not n.startswith("_")]
    template = None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
    return SimpleNamespace(
        processing_class=tokenizer, _tokenizer=tokenizer, chat_template=template, chat_template_kwargs=dict(kwargs),
        _is_vlm=False, environment_factories={"sql": SQLAgentEnv}, _batch_environments=["sql"],
        _env_tools={"sql": tools},
    )


THINK = "<think>\n\n</think>\n\n"
# Per template variant: what the model writes at the start of every turn, and the prompt tokens just before it
# (after "<|im_start|>assistant") that the training template marks as trained all the same. Qwen3's training
# template renders the empty think block in every assistant turn; GRPO's generation prompt holds it only when
# enable_thinking is false, so with thinking on the model itself must write it.
TURN_START = {"qwen2_5": ("", "\n"), "qwen3_nothink": ("", THINK), "qwen3_think": (THINK, "")}


@pytest.mark.parametrize("kind", ["plain", "sample", "recovery"])
def test_training_tokens_are_what_grpo_renders_and_the_model_generates(variant, world, kind):
    """prompt ids (GRPOTrainer._tokenize_prompts) + per turn: the model's own call text + GRPOTrainer's tool suffix,
    GRPO rendering with the kwargs `grpo.template_kwargs` gives it and SFT with those provenance recorded."""
    from trl import GRPOTrainer

    tokenizer = variant.tokenizer
    db_dir, questions, records = world
    record = next(r for r in records if r["kind"] == kind)
    question = questions[record["id"]]
    env = SQLAgentEnv(db_dir=db_dir)
    thinking = variant.name == "qwen3_think"
    grpo_kwargs = template_kwargs(variant.model_dir, enable_thinking=thinking)  # params' model.enable_thinking
    assert grpo_kwargs == variant.kwargs == ({} if variant.name == "qwen2_5" else {"enable_thinking": thinking})
    trainer = _grpo_trainer_stub(tokenizer, env, grpo_kwargs)
    lead, trained_prompt_tail = TURN_START[variant.name]
    # The dataset row's prompt as GRPO sees it: [system, user(question)] + reset() appended to the user turn.
    observation = env.reset(**question.to_dict())
    prompt = [{"role": "system", "content": prompts.SYSTEM_PROMPT},
              {"role": "user", "content": prompts.user_message(question)["content"] + observation}]
    prompt_ids, _, _ = GRPOTrainer._tokenize_prompts(trainer, [prompt])
    expected = list(prompt_ids[0])

    messages = record["messages"]
    turns = []
    for i, message in enumerate(messages[2:], start=2):
        if message["role"] != "assistant":
            continue
        if message.get("tool_calls"):
            call = message["tool_calls"][0]["function"]
            args = json.dumps(json.loads(call["arguments"]), ensure_ascii=False)
            text = lead + f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {args}}}\n</tool_call><|im_end|>'
        else:
            text = lead + message["content"] + "<|im_end|>"
        turn = tokenizer.encode(text, add_special_tokens=False)  # what the model generates, stop token included
        turns.append(turn)
        expected += turn
        tools = []
        for later in messages[i + 1:]:
            if later["role"] != "tool":
                break
            tools.append(later)
        if tools:
            expected += GRPOTrainer._get_tool_suffix_ids(trainer, tools)

    ids = tokenize_record(tokenizer, record, training_chat_template(tokenizer), variant.kwargs)
    newline = tokenizer.encode("\n", add_special_tokens=False)
    assert ids["input_ids"] == expected + newline  # the template closes the last turn with "<|im_end|>\n"
    # Trained tokens: per assistant turn the trained prompt tail (Qwen2.5: the "\n" after "<|im_start|>assistant")
    # + the completion + "\n".
    head = tokenizer.encode(trained_prompt_tail, add_special_tokens=False)
    mask, spans, start = ids["assistant_masks"], [], None
    for pos, bit in enumerate(mask + [0]):
        if bit and start is None:
            start = pos
        elif not bit and start is not None:
            spans.append(ids["input_ids"][start:pos])
            start = None
    assert spans == [head + turn + newline for turn in turns]


@pytest.mark.parametrize("template_variant", ["qwen2_5", "qwen3_nothink"], indirect=True)
def test_every_example_trains_on_assistant_tokens_and_matches_the_trainer(variant, world, tmp_path):
    tokenizer, records = variant.tokenizer, world[2]
    # Every assistant turn trained (the mistakes too): the parity with TRL's own path is about tokens and masks.
    dataset, stats = build_dataset(records, tokenizer, max_length=4096, template_kwargs=variant.kwargs,
                                   train_on_mistakes=True)
    assert stats.examples == len(records) and stats.dropped_too_long == 0
    assert 0 < stats.assistant_tokens < stats.tokens
    trainer = build_trainer(variant.model_dir, dataset, TrainConfig(max_steps=1, max_length=4096), tmp_path)
    template = training_chat_template(tokenizer)
    assert len(trainer.train_dataset) == len(records)
    for row, record in zip(trainer.train_dataset, records):
        mine = tokenize_record(tokenizer, record, template, variant.kwargs)
        assert sum(mine["assistant_masks"]) > 0
        assert row["input_ids"] == mine["input_ids"]
        assert row["labels"] == [t if m else -100 for t, m in zip(mine["input_ids"], mine["assistant_masks"])]
    # The same tokens and labels as TRL's own conversational path (the template's kwargs in its column).
    theirs = _trl_own_trainer(variant.model_dir, tokenizer, records, variant.kwargs, tmp_path)
    assert [r["input_ids"] for r in theirs.train_dataset] == [r["input_ids"] for r in trainer.train_dataset]
    assert [r["labels"] for r in theirs.train_dataset] == [r["labels"] for r in trainer.train_dataset]


def test_the_teachers_mistakes_are_read_but_not_trained_on(tokenizer, tiny, world, tmp_path):
    """`train_on_mistakes=False`: a recovery's failing query stays in the tokens and leaves the labels; every
    other turn keeps its labels. A record whose mistake is not an assistant turn is refused."""
    records = [r for r in world[2] if r["kind"] == "recovery"][:3]
    assert records and all(len(r["mistakes"]) == 1 for r in records)
    template = training_chat_template(tokenizer)
    for record in records:
        trained = tokenize_record(tokenizer, record, template)
        masked = tokenize_record(tokenizer, record, template, train_on_mistakes=False)
        assert masked["input_ids"] == trained["input_ids"]
        cleared = [i for i, (a, b) in enumerate(zip(trained["assistant_masks"], masked["assistant_masks"])) if a != b]
        assert cleared and all(trained["assistant_masks"][i] and not masked["assistant_masks"][i] for i in cleared)
        wrong = record["messages"][record["mistakes"][0]]["tool_calls"][0]["function"]["arguments"]
        assert json.loads(wrong)["sql"] in tokenizer.decode([trained["input_ids"][i] for i in cleared])
    on, on_stats = build_dataset(records, tokenizer, max_length=4096, train_on_mistakes=True)
    off, off_stats = build_dataset(records, tokenizer, max_length=4096)  # the default: out of the loss
    assert off_stats.mistake_turns_untrained == len(records) and on_stats.mistake_turns_untrained == 0
    assert 0 < off_stats.assistant_tokens < on_stats.assistant_tokens
    trainer = build_trainer(tiny, off, TrainConfig(max_steps=1, max_length=4096), tmp_path)
    for row, mine in zip(trainer.train_dataset, off):
        assert row["labels"] == [t if m else -100 for t, m in zip(mine["input_ids"], mine["assistant_masks"])]
    broken = {**records[0], "mistakes": [records[0]["mistakes"][0] + 1]}  # the tool result after it
    with pytest.raises(ValueError, match="not an assistant turn"):
        tokenize_record(tokenizer, broken, template, train_on_mistakes=False)


def test_the_trainer_renders_with_the_models_template_kwargs(tiny_models, world, tmp_path):
    """Under TRL's `qwen3_8` template `enable_thinking` also decides the system turn (reasoning instructions
    unless it is false). The model is prepared with enable_thinking false: the trainer's tokens, ours and
    GRPO's prompt (rendered with `grpo.template_kwargs`) all leave the instructions out."""
    from trl import GRPOTrainer

    model_dir = tiny_models.path("qwen3_nothink", chat_template="qwen3_8")
    tokenizer = tiny_models.tokenizer("qwen3_nothink", chat_template="qwen3_8")
    kwargs = chat_template_kwargs(model_dir)
    assert kwargs == {"enable_thinking": False} == template_kwargs(model_dir, enable_thinking=False)
    db_dir, questions, records = world
    records = records[:2]
    template = training_chat_template(tokenizer)
    dataset, _ = build_dataset(records, tokenizer, max_length=4096, template_kwargs=kwargs)
    trainer = build_trainer(model_dir, dataset, TrainConfig(max_steps=1, max_length=4096), tmp_path)
    assert template == trl_chat_template("qwen3_8_training")
    env = SQLAgentEnv(db_dir=db_dir)
    for row, record in zip(trainer.train_dataset, records):
        assert row["input_ids"] == tokenize_record(tokenizer, record, template, kwargs)["input_ids"]
        assert "Reasoning effort" not in tokenizer.decode(row["input_ids"])
        # The SFT stream starts with the prompt GRPO shows the model for this question, token for token.
        observation = env.reset(**questions[record["id"]].to_dict())
        prompt = [{"role": "system", "content": prompts.SYSTEM_PROMPT},
                  {"role": "user", "content": prompts.user_message(questions[record["id"]])["content"] + observation}]
        (prompt_ids,), _, _ = GRPOTrainer._tokenize_prompts(_grpo_trainer_stub(tokenizer, env, kwargs), [prompt])
        assert row["input_ids"][: len(prompt_ids)] == list(prompt_ids)
    # What the guard is about: without the kwargs the same record renders another system turn.
    assert "Reasoning effort" in tokenizer.decode(tokenize_record(tokenizer, records[0], template)["input_ids"])


class _Stop(Exception):
    pass


def test_train_sft_reads_the_kwargs_from_the_start_models_provenance(tiny_models, world, tmp_path, monkeypatch):
    seen = {}

    def stop(records, tokenizer, max_length, template_kwargs=None, train_on_mistakes=False):
        seen.update(n=len(records), kwargs=template_kwargs, train_on_mistakes=train_on_mistakes)
        raise _Stop

    monkeypatch.setattr(sft, "build_dataset", stop)
    with pytest.raises(_Stop):
        train_sft(world[2], tiny_models.path("qwen3_nothink"), tmp_path / "out",
                  TrainConfig(max_examples=2, train_on_mistakes=True))
    assert seen == {"n": 2, "kwargs": {"enable_thinking": False}, "train_on_mistakes": True}


def test_overlong_trajectories_are_dropped_and_counted(tokenizer, world):
    records = world[2]
    lengths = sorted(len(tokenize_record(tokenizer, r, training_chat_template(tokenizer))["input_ids"]) for r in records)
    cut = lengths[len(lengths) // 2]
    _, stats = build_dataset(records, tokenizer, max_length=cut)
    assert stats.dropped_too_long == sum(1 for n in lengths if n > cut) > 0
    assert stats.examples + stats.dropped_too_long == len(records) and stats.length["max"] <= cut
    with pytest.raises(ValueError, match="max_length"):
        build_dataset(records, tokenizer, max_length=10)


def test_subset_is_a_stable_hash_choice(world):
    records = world[2]
    a = select_examples(records, 5, seed=0)
    assert [r["id"] for r in a] == [r["id"] for r in select_examples(list(reversed(records)), 5, seed=0)]
    assert [r["id"] for r in a] != [r["id"] for r in select_examples(records, 5, seed=1)]
    assert len(select_examples(records, 0, seed=0)) == len(records)


def test_compact_head_gives_the_same_loss_and_gradients(tiny, tokenizer, world):
    """Scoring only labelled positions in TRL's fused head (our CPU speed-up) changes no number."""
    trainer = _one_trajectory_trainer(tiny, tokenizer, world)
    batch = trainer.data_collator([trainer.train_dataset[0]])
    model = trainer.model

    def loss_and_grads():
        model.zero_grad()
        out = model(**batch, fused_lm_head=True)
        loss = -out.log_probs.sum() / out.label_mask.sum()
        loss.backward()
        return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    loss_full, grads_full = loss_and_grads()
    with compact_lm_head():
        loss_compact, grads_compact = loss_and_grads()
    assert loss_compact == pytest.approx(loss_full, rel=1e-5)
    assert grads_full.keys() == grads_compact.keys() and any("trainable_tokens_delta" in n for n in grads_full)
    for name in grads_full:
        torch.testing.assert_close(grads_compact[name], grads_full[name], rtol=1e-4, atol=1e-6)


def test_two_step_lora_run_saves_a_merged_model_with_trained_tool_tag_rows(tiny, tokenizer, world, tmp_path):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.bfloat16)
    tag_ids = [tokenizer.convert_tokens_to_ids(t) for t in TOOL_TAGS]
    base_rows = base.get_input_embeddings().weight.detach()[tag_ids].clone()
    other_rows = base.get_input_embeddings().weight.detach()[:1000].clone()

    config = TrainConfig(max_examples=4, gradient_accumulation_steps=2, learning_rate=1e-2, logging_steps=1, max_length=4096)
    out = tmp_path / "sft"
    result = train_sft(world[2], tiny, out, config, output_dir=tmp_path / "checkpoints")
    assert result.steps == 2 and [row["step"] for row in result.curve] == [1, 2]
    assert all(row["loss"] > 0 for row in result.curve) and result.dataset.examples == 4

    assert not list(out.glob("adapter_*")) and (out / "model.safetensors").is_file()
    assert not list((tmp_path / "checkpoints").glob("checkpoint-*"))  # no intermediate checkpoints saved
    merged = AutoModelForCausalLM.from_pretrained(out)
    assert type(merged).__name__ == "Qwen2ForCausalLM" and merged.config.tie_word_embeddings
    weight = merged.get_input_embeddings().weight.detach()
    assert merged.get_output_embeddings().weight.data_ptr() == weight.data_ptr()
    assert not torch.equal(weight[tag_ids], base_rows)  # the tool-tag rows were trained ...
    assert torch.equal(weight[:1000], other_rows)  # ... and nothing else in the embedding
    assert merged.dtype == torch.bfloat16

    from transformers import AutoTokenizer

    saved = AutoTokenizer.from_pretrained(out)
    assert saved.chat_template == trl_chat_template("qwen2_5")  # the template TRL recognises is preserved
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["tag_rows_changed"] == [True, True] and provenance["source"] == "sft"
    assert provenance["fingerprint"] == result.provenance["fingerprint"]


def test_same_config_gives_the_same_weights_whatever_ran_before(tiny, world, tmp_path):
    from safetensors.torch import load_file

    config = TrainConfig(max_examples=4, gradient_accumulation_steps=2, learning_rate=1e-2, logging_steps=1, max_length=4096)
    weights = []
    for i in range(2):
        torch.rand(7 + i)  # a different global RNG state before each run (as other work in the process would leave)
        out = tmp_path / f"sft{i}"
        train_sft(world[2], tiny, out, config, output_dir=tmp_path / f"checkpoints{i}")
        weights.append(load_file(out / "model.safetensors"))
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_inspect_sft_prints_the_trained_tokens_bracketed(tiny, world, tmp_path, capsys):
    from sqlenv.train.inspect_sft import main

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in world[2][:3]))
    assert main(["--data", str(data), "--model", str(tiny), "--index", "2", "--plain"]) == 0
    out = capsys.readouterr().out
    record = world[2][2]
    assert f"id={record['id']}" in out and "template qwen2_5_training" in out
    assert "«\n<tool_call>\n{\"name\": " in out and f"«\n{prompts.FINAL_REPLY}<|im_end|>\n»" in out
    assert "<|im_start|>user" in out and "«<|im_start|>" not in out  # prompts and tool results are not trained
    assert main(["--data", str(data), "--model", str(tiny), "--index", "7"]) == 1
    assert "has no record 7 (it has 3)" in capsys.readouterr().err


def test_inspect_sft_renders_with_the_models_template_kwargs(tiny_models, world, tmp_path, capsys):
    from sqlenv.train.inspect_sft import main

    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps(world[2][0]) + "\n")
    model_dir = tiny_models.path("qwen3_nothink", chat_template="qwen3_8")
    assert main(["--data", str(data), "--model", str(model_dir), "--plain"]) == 0
    out = capsys.readouterr().out
    assert "template qwen3_8_training enable_thinking=False" in out and "Reasoning effort" not in out


def _train_recording(tiny, world, tmp_path, shared: bool, steps: int = 2, checkpointing=False):
    """Train `steps` SFT steps (2 trajectories each, float32); per step the trainable gradients the optimizer is
    handed, and the length of every sequence the model embedded."""
    from transformers import TrainerCallback

    dataset, _ = build_dataset(world[2][:4], AutoTokenizerFor(tiny), max_length=4096)
    config = TrainConfig(max_steps=steps, gradient_accumulation_steps=2, learning_rate=1e-3, max_length=4096,
                         dtype="float32", shared_prefix=shared, activation_checkpointing=checkpointing)  # fmt: skip
    grads, lengths = [], []

    class Grads(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})

    trainer = build_trainer(tiny, dataset, config, tmp_path / f"out-{shared}-{checkpointing}", callbacks=[Grads()])
    trainer.model.get_input_embeddings().register_forward_pre_hook(lambda m, a: lengths.append(a[0].shape[-1]))
    with sft.training_patches(trainer.model):  # as the stage trains
        trainer.train()
    return trainer, grads, lengths


def AutoTokenizerFor(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def test_shared_prefix_gives_the_same_gradients_and_encodes_the_prefix_once_per_step(tiny, world, tmp_path):
    """`sft.shared_prefix`: the system prompt + tool schemas that every trajectory opens with are run once per
    optimizer step, and each trajectory's suffix attends to their cache; the gradients the optimizer gets are
    those of TRL's own passes (tool-tag embedding rows included: the tool schemas mention the tags). Fails if
    the prefix's gradient is not backpropagated (`SharedPrefix.finish`), or if the prefix is run per trajectory."""
    plain, grads_plain, lengths_plain = _train_recording(tiny, world, tmp_path, shared=False)
    shared, grads_shared, lengths_shared = _train_recording(tiny, world, tmp_path, shared=True)
    n = len(shared._prefix_ids)
    assert n > 100 and plain._prefix_ids == []
    assert lengths_plain.count(n) == 0 and lengths_shared.count(n) == 2  # one prefix pass per step
    assert sum(lengths_shared) == sum(lengths_plain) - 2 * n  # 4 trajectories, 2 prefixes: 2 saved
    assert len(grads_plain) == len(grads_shared) == 2
    for step_plain, step_shared in zip(grads_plain, grads_shared):
        assert step_plain.keys() == step_shared.keys() and any("trainable_tokens_delta" in k for k in step_plain)
        for name in step_plain:
            torch.testing.assert_close(step_shared[name], step_plain[name], rtol=1e-3, atol=1e-6)
    losses = [[e["loss"] for e in t.state.log_history if "loss" in e] for t in (plain, shared)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


def test_activation_checkpointing_keeps_the_shared_prefix_and_the_gradients(tiny, world, tmp_path):
    """In float32 `sft.activation_checkpointing: auto` turns checkpointing on, and the backward replays every decoder
    layer. The suffixes must still attend to the shared prefix's cache in the forward and in the replay: the
    gradients are those of TRL's plain passes without checkpointing. Fails if transformers drops the cache from a
    checkpointed layer (`shared_prefix.replayable_under_checkpointing` not applied, or its attribute renamed), or
    if the replay extends the cache a second time (`PrefixCache`)."""
    plain, grads_plain, _ = _train_recording(tiny, world, tmp_path, shared=False, checkpointing=False)
    both, grads_both, lengths = _train_recording(tiny, world, tmp_path, shared=True, checkpointing="auto")
    assert both.args.activation_checkpointing and not plain.args.activation_checkpointing
    n = len(both._prefix_ids)
    assert n > 100 and lengths.count(n) == 2  # the prefix still runs once per step (a replay embeds nothing)
    assert all(layer._can_checkpoint_with_cache for layer in both.model.base_model.model.model.layers)
    for step_plain, step_both in zip(grads_plain, grads_both, strict=True):
        assert step_plain.keys() == step_both.keys()
        for name in step_plain:
            torch.testing.assert_close(step_both[name], step_plain[name], rtol=1e-3, atol=1e-6)


def test_activation_checkpointing_is_on_in_float32_only_by_default():
    from sqlenv.train.checkpointing import activation_checkpointing

    assert activation_checkpointing("auto", "float32") and not activation_checkpointing("auto", "bfloat16")
    assert activation_checkpointing(True, "bfloat16") and not activation_checkpointing(False, "float32")
    for bad in ("yes", 1, None):
        with pytest.raises(ValueError, match="activation_checkpointing"):
            activation_checkpointing(bad, "float32")


def _one_trajectory_trainer(tiny, tokenizer, world):
    """An SFT trainer of the tiny model (float32) over one trajectory: what the LM-head tests train on."""
    dataset, _ = build_dataset(world[2][:1], tokenizer, max_length=4096)
    return build_trainer(tiny, dataset, TrainConfig(max_steps=1, max_length=4096, dtype="float32"), tiny.parent / "out")


def _loss_and_grads(trainer, batch, read_head=False):
    """One SFT micro-batch through the trainer's own loss (TRL's fused head), forward and backward, float32;
    `read_head`: the head's weight read between them, as code asking for its dtype does."""
    model = trainer.model
    model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(model, batch)
    if read_head:
        assert model.get_output_embeddings().weight.dtype == torch.float32
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_sparse_trainable_rows_gives_the_same_loss_and_gradients(tiny, tokenizer, world, monkeypatch):
    """`trainable_rows.sparse_trainable_rows` (always on in the stage): the embedding looks the trained rows up apart,
    the tied head scores with a merged copy without gradient, and the rows' gradient through the head comes from a
    zero-valued term on the log-probs. Same loss, same LoRA gradients, the same gradient of the trained rows as
    peft's and TRL's dense path. Fails without the term (asserted below: the head's share of the rows' gradient
    is then missing), or if TRL's SFT loss reads anything but the log-probs through the head."""
    from sqlenv.train import trainable_rows

    trainer = _one_trajectory_trainer(tiny, tokenizer, world)
    batch = trainer.data_collator([trainer.train_dataset[0]])
    with compact_lm_head():
        loss_dense, grads_dense = _loss_and_grads(trainer, batch)
        with trainable_rows.sparse_trainable_rows(trainer.model) as layers:
            _loss_and_grads(trainer, batch)  # the head's copy made; then the rows move, as an optimizer step moves them
            (delta,) = [p for n, p in trainer.model.named_parameters() if "trainable_tokens_delta" in n]
            saved = delta.detach().clone()
            with torch.no_grad():
                delta.add_(1.0)
            loss_moved, _ = _loss_and_grads(trainer, batch)
            with torch.no_grad():
                delta.copy_(saved)
            loss_sparse, grads_sparse = _loss_and_grads(trainer, batch, read_head=True)
            monkeypatch.setattr(trainable_rows, "_row_term", lambda *a: a[3].new_zeros(a[3].shape))
            _, grads_without_term = _loss_and_grads(trainer, batch)
    assert layers == 2  # the embedding's and the tied head's
    assert loss_sparse == pytest.approx(loss_dense, rel=1e-6) and loss_moved != pytest.approx(loss_dense, rel=1e-3)
    rows = [n for n in grads_dense if "trainable_tokens_delta" in n]
    assert grads_dense.keys() == grads_sparse.keys() and len(rows) == 1
    for name in grads_dense:
        torch.testing.assert_close(grads_sparse[name], grads_dense[name], rtol=1e-5, atol=1e-7)
    assert not torch.allclose(grads_without_term[rows[0]], grads_dense[rows[0]], rtol=1e-3, atol=1e-5)


def _fresh_matrices(run, shape) -> int:
    """How many new tensors of `shape` (the vocabulary matrix) the ops of `run()` create: views and in-place
    results (which return an existing tensor) not counted."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            fresh = all(r.alias_info is None for r in func._schema.returns)
            if fresh and isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(shape):
                Count.n += 1
            return out

    with Count():
        run()
    return Count.n


def test_sparse_trainable_rows_makes_no_vocabulary_sized_tensor_per_pass(tiny, tokenizer, world):
    """What the sparse path is for: peft merges the whole [vocabulary, hidden] matrix on every embedding and head
    forward and autograd brings matrix-sized gradients back (a profile of default bf16 SFT steps on the 2-core
    Intel Xeon: 13 % of their time). Sparse: one merged copy of the head, made on its first read, then none."""
    from sqlenv.train.trainable_rows import sparse_trainable_rows

    trainer = _one_trajectory_trainer(tiny, tokenizer, world)
    batch = trainer.data_collator([trainer.train_dataset[0]])
    shape = trainer.model.get_input_embeddings().weight.shape

    def run():
        _loss_and_grads(trainer, batch)

    with compact_lm_head():
        dense = _fresh_matrices(run, shape)
        with sparse_trainable_rows(trainer.model):
            first, second = _fresh_matrices(run, shape), _fresh_matrices(run, shape)
    assert dense >= 4 and (first, second) == (1, 0)


def test_sparse_trainable_rows_hands_back_peft_and_trl_on_exit(tiny, tokenizer, world):
    import trl.trainer.utils as trl_utils

    from sqlenv.train.trainable_rows import sparse_trainable_rows, token_layers

    trainer = _one_trajectory_trainer(tiny, tokenizer, world)
    original = trl_utils._ChunkedLogProbFunction
    layers = token_layers(trainer.model)
    head = trainer.model.get_output_embeddings()
    embedding = trainer.model.get_input_embeddings().token_adapter
    with sparse_trainable_rows(trainer.model):
        assert trl_utils._ChunkedLogProbFunction is not original
        assert "forward_adapters" in embedding.__dict__ and "_getattr_wrapped" in head.__dict__
        assert not any("get_merged_weights" in layer.__dict__ for layer in layers)  # peft's own, for every forward
    assert trl_utils._ChunkedLogProbFunction is original and "_getattr_wrapped" not in head.__dict__
    assert all(not {"forward_adapters", "get_merged_weights", "_sqlenv_rows_state"} & set(layer.__dict__) for layer in layers)
    with sparse_trainable_rows(torch.nn.Linear(2, 2)) as taken:  # a model without token rows: nothing changes
        assert taken == 0 and trl_utils._ChunkedLogProbFunction is original


def test_sparse_trainable_rows_leaves_an_embedding_it_does_not_cover_to_peft(tiny, tokenizer, world, monkeypatch):
    """An embedding the sparse lookup does not cover (one that scales its output, as Gemma3's does) runs peft's own
    forward, with the merged matrix's gradient: the trained rows' gradient stays that of peft's path. Fails if the
    sparse lookup takes the scaled embedding (its loss is then the unscaled one), or if the head's gradient-free copy
    leaks into that forward (the embedding's share of the rows' gradient is then lost)."""
    from sqlenv.train.trainable_rows import sparse_trainable_rows

    trainer = _one_trajectory_trainer(tiny, tokenizer, world)
    batch = trainer.data_collator([trainer.train_dataset[0]])
    base = trainer.model.get_input_embeddings().token_adapter.base_layer

    class Scaled(torch.nn.Embedding):  # as Gemma3's: the lookup times `embed_scale`, which peft's own path applies
        def forward(self, x):
            return super().forward(x) * self.embed_scale

    monkeypatch.setattr(base, "__class__", Scaled)
    monkeypatch.setattr(base, "embed_scale", 2.0, raising=False)
    with compact_lm_head():
        loss_dense, grads_dense = _loss_and_grads(trainer, batch)
        with sparse_trainable_rows(trainer.model):
            loss_sparse, grads_sparse = _loss_and_grads(trainer, batch)
    assert loss_sparse == pytest.approx(loss_dense, rel=1e-6) and grads_dense.keys() == grads_sparse.keys()
    for name in grads_dense:
        torch.testing.assert_close(grads_sparse[name], grads_dense[name], rtol=1e-5, atol=1e-7)


def test_trainable_rows_checks_the_library_internals_it_relies_on(tiny, tokenizer, world, monkeypatch):
    """The sparse path reads TRL's `_ChunkedLogProbFunction` arguments by name and peft's token-layer attributes:
    when a release changes them, training refuses at once instead of computing something else."""
    import inspect as inspect_module

    import trl.trainer.utils as trl_utils

    from sqlenv.train import trainable_rows

    forward = inspect_module.signature(trl_utils._ChunkedLogProbFunction.forward)
    assert tuple(forward.parameters)[1:] == trainable_rows._LOGPROB_ARGUMENTS  # fails when TRL changes them
    trainer = _one_trajectory_trainer(tiny, tokenizer, world)

    class Renamed:
        @staticmethod
        def forward(ctx, hidden, weights, bias, targets):
            return hidden

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Renamed)
    with pytest.raises(RuntimeError, match="_ChunkedLogProbFunction"):
        with trainable_rows.sparse_trainable_rows(trainer.model):
            pass
    monkeypatch.undo()
    layer = trainable_rows.token_layers(trainer.model)[0]
    monkeypatch.delattr(type(layer), "get_merged_weights")
    with pytest.raises(RuntimeError, match="TrainableTokensLayer"):
        with trainable_rows.sparse_trainable_rows(trainer.model):
            pass
