"""GRPO's rollouts through the one episode loop (`RolloutFunc`, TRL's public `rollout_func`) against TRL's own
`environment_factory` tool loop: the same scripted turns must give the same training batch.

Both trainers are the stage's (`build_trainer`), one per `grpo.rollout_decoder`; the model's sampling is replaced
by the same script on both sides (a replaying `TurnGenerator` on ours; TRL's turn generation on TRL's, which this
test may name). Compared: completion ids, completion mask, TRL's tool mask (ours: `env_mask`), each reward
component, the environment's reward, the advantages and the verdicts. The scripts hold calls, a call with
arguments the tool rejects, a malformed call, a turn without a call, calls after `answer`, a turn cut off by
the token budget and a rollout that runs into the turn budget (TRL then generates one more turn, unplayed).
"""

from __future__ import annotations

import json

import pytest
import torch
from fixtures_env import Q_COUNT, concert_db_dir  # noqa: F401  (fixture)
from scripted_turns import replaying

from sqlenv.data.oracle import oracle_calls
from sqlenv.devices import grpo_policy
from sqlenv.env.environment import SQLEnv
from sqlenv.env.rewards import COMPONENTS
from sqlenv.train.grpo import ENV_REWARD_NAMES, build_trainer, dataset_rows, phase_sections, phase_settings
from sqlenv.types import Question

from test_grpo import repo_params

QUESTIONS = [
    Question(id=f"count_{i}", db_id="concert", question=text, gold_sql="SELECT count(*) FROM singer", tables=("singer",))
    for i, text in enumerate(["How many singers are there?", "Count the singers.", "What is the number of singers?"])
]  # fmt: skip
MAX_COMPLETION = 420
STEP_BUDGET = 3


def call(name: str, arguments, lead: str = "") -> str:
    return lead + '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call><|im_end|>' % (name, json.dumps(arguments))


def scripts(gold) -> list[list[str]]:
    """One script per rollout (two per question); each first turn differs, so TRL's contexts say whose they are."""
    reply = "The answer is given.<|im_end|>"
    return [
        [call("describe", {"table_name": "singer"}, "A"), call("query", {"sql": "SELECT count(*) FROM singer"}),
         call("answer", gold), reply],  # fmt: skip
        [call("query", {"statement": "SELECT 1"}, "B"),  # arguments the tool rejects
         'Next.<tool_call>\n{"name": "answer", "arguments": {"value": "3"\n</tool_call><|im_end|>'],  # malformed: ends
        ["C I do not know.<|im_end|>"],  # no call
        [call("answer", gold, "D"), call("describe", {"table_name": "singer"}), reply],  # a call after answer
        [call("describe", {"table_name": "singer"}, "E"), "E " + "counting " * 600 + "<|im_end|>"],  # cut off
        [call("describe", {"table_name": "singer"}, f"F{i}") for i in range(6)],  # past the turn budget
    ]


def trl_turns(tokenizer, script, prompt_count):
    """TRL's turn generation replaced by the scripts: its first call is every rollout in order; a later call
    holds the contexts of the rollouts still calling tools, each found by the tokens its first turn added."""
    first: dict[int, list[int]] = {}
    turn: dict[int, int] = {}

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        out = []
        for j, context in enumerate(prompt_ids):
            if len(prompt_ids) == prompt_count and not first.get(j):
                i = j
            else:
                i = max((k for k, head in first.items() if context[: len(head)] == head), key=lambda k: len(first[k]))
            k = turn.get(i, 0)
            turn[i] = k + 1
            ids = tokenizer(script[i][min(k, len(script[i]) - 1)], add_special_tokens=False)["input_ids"]
            if k == 0:
                first[i] = list(context) + ids
            out.append(ids)
        return out, None

    return generate


def scripted_batch(decoder: str, tmp_path, db_dir, scripted: bool = True, config: dict | None = None,
                   edit_prompt=None, monkeypatch=None, script=None, recorder=None, questions=QUESTIONS,
                   batch_questions=None, grpo_params: dict | None = None):  # fmt: skip
    """One generation batch of the stage's trainer. `config`: GRPOConfig fields set before the trainer is built (the
    generation settings TRL reads at its init); `edit_prompt(messages) -> messages`: the dataset rows' prompts as
    TRL passes them, changed; `script`: other scripted turns (default `scripts`); `recorder(tokenizer)`: the rollout function's `make_generator`
    instead of the replaying one; `questions`: the phase's dataset; `batch_questions`: those the batch holds (default:
    all of them, two rollouts each); `grpo_params`: params of the `grpo` section changed."""
    from transformers import AutoTokenizer

    import sqlenv.train.grpo as grpo
    from sqlenv.train.tiny_model import build_tiny_model

    if config:
        made = grpo.grpo_config

        def grpo_config(*args, **kwargs):
            out = made(*args, **kwargs)
            for key, value in config.items():
                setattr(out, key, value)
            return out

        monkeypatch.setattr(grpo, "grpo_config", grpo_config)

    tiny = build_tiny_model(tmp_path / "tiny", dtype="float32")
    questions_file = tmp_path / "train.jsonl"
    questions_file.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in questions))
    p = repo_params()
    p["model"]["dtype"] = "float32"
    p["env"]["step_budget"] = STEP_BUDGET
    batch_questions = list(questions if batch_questions is None else batch_questions)
    p["grpo"].update(batch_size=2 * len(batch_questions), gradient_accumulation_steps=1, lora_r=4, lora_alpha=8,
                     rollout_decoder=decoder, **(grpo_params or {}))  # fmt: skip
    p["grpo_phase1"].update(beta=0.0, max_steps=1, num_generations=2, max_completion_length=MAX_COMPLETION)
    settings = phase_settings(phase_sections(p, 1), 1)
    policy = grpo_policy(cuda=False, processes=1, use_vllm="none", dtype="float32", rollout_decoder=decoder, shared_prefix=False)
    trainer = build_trainer(settings, model_path=tiny, questions_file=questions_file, db_dir=db_dir,
                            checkpoint_dir=tmp_path / "ck", policy=policy)  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    gold = oracle_calls(Q_COUNT, SQLEnv(db_dir).sandbox_for("concert"))[-1][1]
    script = script or scripts(gold)
    if not scripted:  # the model samples; top_k=1 makes it the argmax, comparable token for token
        torch.manual_seed(0)  # a random tiny model's argmax is one token everywhere: make it depend on the context
        for name, weight in trainer.model.get_base_model().named_parameters():
            if "norm" not in name:
                weight.data.normal_(0, 0.3)
        trainer.top_k = trainer.generation_config.top_k = 1
    elif decoder == "sqlenv":
        assert trainer.rollout_func is not None
        trainer.rollout_func.make_generator = (recorder(tokenizer) if recorder else
                                               replaying(tokenizer, lambda key, k, ctx: script[key][min(k, len(script[key]) - 1)]))
    else:
        assert trainer.rollout_func is None
        trainer._generate_single_turn = trl_turns(tokenizer, script, len(script))
    rows = [dict(row) for row in dataset_rows(batch_questions, settings.env.system_prompt) for _ in range(2)]  # as a loader yields
    if edit_prompt is not None:
        rows = [{**row, "prompt": edit_prompt(row["prompt"])} for row in rows]
    trainer.model.train()  # as inside trainer.train()
    batch = trainer._generate_and_score_completions(rows)
    logs = trainer._logs
    return {
        "batch": batch,
        "rewards": {k: list(v) for k, v in logs["rewards"].items()},
        "advantages": list(logs["advantages"]),
        "verdict": list(logs["extra"]["verdict"]),
        "pad": tokenizer.pad_token_id,
        "trainer": trainer,
        "transcripts": logs["extra"].get("messages"),
        "metrics": {k: list(v) for k, v in trainer._metrics["train"].items()},
    }


@pytest.fixture(scope="module")
def both(tmp_path_factory, concert_db_dir):  # noqa: F811
    return {d: scripted_batch(d, tmp_path_factory.mktemp(d), concert_db_dir) for d in ("sqlenv", "trl")}


def test_rollout_func_gives_trls_tool_loop_batch(both):
    ours, trl = both["sqlenv"]["batch"], both["trl"]["batch"]
    rows = ours["completion_ids"].size(0)
    assert rows == trl["completion_ids"].size(0) == 6
    for i in range(rows):
        n = int(trl["completion_mask"][i].sum())
        assert int(ours["completion_mask"][i].sum()) == n
        assert ours["completion_ids"][i, :n].tolist() == trl["completion_ids"][i, :n].tolist(), f"rollout {i}"
        assert ours["tool_mask"][i, :n].tolist() == trl["tool_mask"][i, :n].tolist(), f"rollout {i}: env mask"
        assert ours["prompt_ids"][i][ours["prompt_mask"][i].bool()].tolist() == trl["prompt_ids"][i][trl["prompt_mask"][i].bool()].tolist()
    # the scripts reach what they are meant to: tool results masked, a cut-off turn, the turn after the budget
    masks = [trl["tool_mask"][i, : int(trl["completion_mask"][i].sum())].tolist() for i in range(rows)]
    assert all(0 in m for i, m in enumerate(masks) if i != 2) and 0 not in masks[2]
    assert int(trl["completion_mask"][4].sum()) == MAX_COMPLETION
    assert masks[5][-1] == 1 and sum(1 for a, b in zip(masks[5], masks[5][1:]) if a == 0 and b == 1) == STEP_BUDGET


def test_rollout_func_gives_trls_rewards_and_verdicts(both):
    ours, trl = both["sqlenv"], both["trl"]
    for name in (*COMPONENTS, ENV_REWARD_NAMES[0]):
        assert ours["rewards"][name] == pytest.approx(trl["rewards"][name], abs=1e-9), name
    assert ours["advantages"] == pytest.approx(trl["advantages"], abs=1e-6)
    assert ours["verdict"] == trl["verdict"] == ["correct", "unanswered", "unanswered", "correct", "unanswered", "unanswered"]
    assert len(set(trl["rewards"][ENV_REWARD_NAMES[0]])) > 3  # the scripts earn different rewards


def test_cached_decoder_with_drafting_gives_trls_generated_tokens(tmp_path, concert_db_dir):  # noqa: F811
    """The model's own turns, decoded by the episode loop's cached decoder with drafting (params: 8 guessed
    tokens a step, kept by speculative sampling) and by TRL's transformers generation, under sampling that
    picks the argmax (top_k=1): the same completion ids."""
    ours = scripted_batch("sqlenv", tmp_path / "ours", concert_db_dir, scripted=False)["batch"]
    trl = scripted_batch("trl", tmp_path / "trl", concert_db_dir, scripted=False)["batch"]
    assert ours["completion_mask"].sum() > 6 * 50  # long turns, not a token each
    for i in range(6):
        n = int(trl["completion_mask"][i].sum())
        assert int(ours["completion_mask"][i].sum()) == n
        assert ours["completion_ids"][i, :n].tolist() == trl["completion_ids"][i, :n].tolist(), f"rollout {i}"


def test_rollout_func_applies_trls_repetition_penalty(tmp_path, monkeypatch, concert_db_dir):  # noqa: F811
    """`repetition_penalty` set in GRPOConfig (and the same through `generation_kwargs`) is applied by the episode
    loop's cached decoder as TRL's transformers generation applies it (`RepetitionPenaltyLogitsProcessor` over the
    whole context): under sampling that picks the argmax (top_k=1), the same completion ids, which differ from the
    unpenalised ones."""
    penalty = {"repetition_penalty": 1.6}
    plain = scripted_batch("sqlenv", tmp_path / "plain", concert_db_dir, scripted=False)  # before any config is patched
    ours = scripted_batch("sqlenv", tmp_path / "ours", concert_db_dir, scripted=False, config=penalty, monkeypatch=monkeypatch)
    kwargs = scripted_batch("sqlenv", tmp_path / "kw", concert_db_dir, scripted=False,
                            config={"generation_kwargs": penalty}, monkeypatch=monkeypatch)  # fmt: skip
    trl = scripted_batch("trl", tmp_path / "trl", concert_db_dir, scripted=False, config=penalty, monkeypatch=monkeypatch)
    ids = {name: [b["batch"]["completion_ids"][i, : int(b["batch"]["completion_mask"][i].sum())].tolist() for i in range(6)]
           for name, b in (("ours", ours), ("kwargs", kwargs), ("trl", trl), ("plain", plain))}  # fmt: skip
    assert ids["ours"] == ids["trl"] and ids["kwargs"] == ids["trl"]
    assert ids["ours"] != ids["plain"]


def test_rollout_func_passes_min_p_and_refuses_what_it_cannot_apply(tmp_path, monkeypatch, concert_db_dir):  # noqa: F811
    """GRPOConfig's `min_p` (and `generation_kwargs`, which override TRL's fields as in TRL) reach the cached
    decoder's sampler; a `generation_kwargs` key the decoder cannot apply is refused by name, not ignored."""
    seen = []

    def recording(tokenizer):
        from scripted_turns import ReplayTurns

        def make(model, gen, eos_ids, pad_id, draft_tokens):
            seen.append(gen)
            return ReplayTurns(tokenizer, lambda key, k, ctx: "No call.<|im_end|>")

        return make

    config = {"min_p": 0.2, "repetition_penalty": 1.1, "generation_kwargs": {"top_p": 0.7}}
    batch = scripted_batch("sqlenv", tmp_path / "a", concert_db_dir, config=config, monkeypatch=monkeypatch,
                           script=[["No call.<|im_end|>"]] * 6, recorder=recording)  # fmt: skip
    assert batch["batch"]["completion_ids"].size(0) == 6
    (gen,) = seen
    assert (gen.do_sample, gen.min_p, gen.repetition_penalty, gen.top_p) == (True, 0.2, 1.1, 0.7)
    with pytest.raises(ValueError, match="no_repeat_ngram_size"):
        scripted_batch("sqlenv", tmp_path / "b", concert_db_dir, config={"generation_kwargs": {"no_repeat_ngram_size": 3}},
                       monkeypatch=monkeypatch, script=[["No call.<|im_end|>"]] * 6)  # fmt: skip


def test_rollout_func_plays_the_prompt_trl_passes(tmp_path, monkeypatch, concert_db_dir):  # noqa: F811
    """The prompt TRL hands to `rollout_func` is what is played, not a rendering of the question record: a prompt
    whose user message says something else (and a system prompt of its own) opens the rollout's tokens and its
    transcript, the environment's first observation appended to the user message as TRL appends `reset()`'s."""
    from transformers import AutoTokenizer

    def edit(prompt):
        return [{"role": "system", "content": "Own system prompt."},
                {"role": "user", "content": "Answer briefly. " + prompt[-1]["content"].upper()}]  # fmt: skip

    out = scripted_batch("sqlenv", tmp_path / "a", concert_db_dir, edit_prompt=edit, monkeypatch=monkeypatch)
    batch = out["batch"]
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "a" / "tiny")
    transcripts = out["transcripts"]
    for i, messages in enumerate(transcripts):
        question = QUESTIONS[i // 2]
        assert messages[0] == {"role": "system", "content": "Own system prompt."}
        assert messages[1]["content"].startswith("Answer briefly. " + question.question.upper())
        assert "singer" in messages[1]["content"][len("Answer briefly. " + question.question):]  # the tables observed
        ids = batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist()
        assert tokenizer.decode(ids).count("Answer briefly. " + question.question.upper()) == 1
        assert "Own system prompt." in tokenizer.decode(ids)


# ---------------------------------------------------------------------------------------- dynamic sampling
def test_candidate_rows_are_a_function_of_the_step_and_skip_the_batch():
    from sqlenv.train.rollouts import candidate_rows

    dataset = [{"id": f"q{i}"} for i in range(7)]
    batch = [{"id": "q0"}, {"id": "q3"}]
    first = candidate_rows(dataset, batch, 4, step=0, seed=5)
    assert len(first) == 4 and not {"q0", "q3"} & {r["id"] for r in first}
    assert len({r["id"] for r in first}) == 4  # no repeats
    assert first == candidate_rows(dataset, batch, 4, step=0, seed=5)  # what a resumed run draws again
    assert candidate_rows(dataset, batch, 4, step=1, seed=5) != first  # the walk moves on with the step
    assert len(candidate_rows(dataset, batch, 10, step=0, seed=5)) == 5  # never more than the others there are


def test_select_groups_prefers_mixed_correctness_then_the_batchs_own():
    from sqlenv.train.rollouts import select_groups

    # the batch's own groups are the first 2, candidates after them
    assert select_groups([False, False, True, False, True], 2) == [2, 4]
    assert select_groups([False, True, False, True], 2) == [1, 3]  # the batch's mixed one stays
    assert select_groups([False, False, False, True], 2) == [0, 3]  # one mixed: the batch's first fills in
    assert select_groups([True, False, True, True], 2) == [0, 2]
    assert select_groups([False, False, False, False], 2) == [0, 1]  # nothing mixed: the batch as it came


def test_oversampled_batch_trains_on_the_groups_of_mixed_correctness(tmp_path, monkeypatch, concert_db_dir):  # noqa: F811
    """The batch holds two questions whose rollouts agree (both right; both wrong); dynamic sampling plays two more,
    one of them mixed. TRL gets two groups: that mixed candidate and the batch's first; the rewards, verdicts, the
    `sampling/...` metrics and the curve's question ids say so."""
    gold = oracle_calls(Q_COUNT, SQLEnv(concert_db_dir).sandbox_for("concert"))[-1][1]
    texts = ["How many singers are there?", "Count the singers.", "What is the number of singers?",
             "How many singers do we have?", "Give the count of singers.", "Number of singers?"]  # fmt: skip
    questions = [Question(id=f"count_{i}", db_id="concert", question=t, gold_sql="SELECT count(*) FROM singer",
                          tables=("singer",)) for i, t in enumerate(texts)]  # fmt: skip
    right, wrong = [call("answer", gold), "Done.<|im_end|>"], [call("answer", {"value": "999"}), "Done.<|im_end|>"]
    played: list[str] = []  # the context each scripted turn was asked for, decoded

    def recorder(tokenizer):
        # rollouts 0-1: the batch's first question, both right; 2-3: its second, both wrong; then the candidates
        # in play order: 4-5 mixed (right, wrong), 6-7 both wrong
        plan = [right, right, wrong, wrong, right, wrong, wrong, wrong]

        def texts_of(key, k, context):
            played.append(tokenizer.decode(context))
            return plan[key][min(k, len(plan[key]) - 1)]

        return replaying(tokenizer, texts_of)

    out = scripted_batch("sqlenv", tmp_path, concert_db_dir, monkeypatch=monkeypatch, recorder=recorder,
                         questions=questions, batch_questions=questions[:2], grpo_params={"oversample": 2})  # fmt: skip
    trainer = out["trainer"]
    assert out["batch"]["completion_ids"].size(0) == 4  # what TRL asked for, no more
    assert out["verdict"] == ["correct", "correct", "correct", "wrong"]
    assert out["advantages"][:2] == pytest.approx([0.0, 0.0], abs=1e-9) and out["advantages"][2] > 0 > out["advantages"][3]
    ids = trainer._questions
    assert ids[0] == "count_0" and ids[1] not in ("count_0", "count_1") and len(ids) == 2
    m = out["metrics"]
    assert m["sampling/groups_played"] == [4.0] and m["sampling/groups_mixed"] == [1.0]
    assert m["sampling/groups_kept_mixed"] == [1.0] and m["sampling/groups_replaced"] == [1.0]
    assert m["episode/mixed_correctness"] == [0.5]
    # every candidate opened with the batch's system prompt
    assert len(played) >= 8 and all(p.startswith(played[0][:200]) for p in played[:8])


def test_oversample_is_refused_where_it_cannot_choose_groups(tmp_path, concert_db_dir):  # noqa: F811
    p = repo_params()
    p["grpo"]["oversample"] = 0
    with pytest.raises(ValueError, match="oversample must be a whole number"):
        phase_settings(phase_sections(p, 1), 1)
    from sqlenv.train.rollouts import RolloutFunc

    with pytest.raises(ValueError, match="oversample"):
        RolloutFunc(db_dir=concert_db_dir, env_config=phase_settings(phase_sections(repo_params(), 1), 1).env, oversample=1.5)
