"""Guards the episode runner: token-for-token parity with TRL 1.16 GRPO rollouts (Qwen2.5 and Qwen3 templates, thinking
off and on), batching, caching, counting."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch
from fixtures_env import Q_COUNT, Q_FRANCE, Q_JOIN, QUESTIONS, concert_db_dir  # noqa: F401  (fixture)

from sqlenv.data.oracle import oracle_calls, play
from sqlenv.decode import ModelGenerator, backbone
from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig, SQLEnv
from sqlenv.env.trl_adapter import SQLAgentEnv, agent_env_class, tool_methods
from sqlenv.episode_loop import play_rollouts
from sqlenv.episodes import Episode
from sqlenv.eval.rollout import play_model
from sqlenv.provenance import chat_template_kwargs
from sqlenv.rendering import generation_eos_ids, prompt_token_ids, rollout_chat_template, tool_suffix_ids
from sqlenv.sampling import GenerationSettings
from sqlenv.train.tiny_model import build_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny32", dtype="float32")


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture
def chat(template_variant, tiny_dir, tokenizer, tiny_models):
    """One chat-template variant: its tokenizer, the kwargs its folder records (what evaluation and GRPO pass),
    and what the model writes at the start of every turn (Qwen3 with thinking on: the empty think block,
    which the generation prompt holds when thinking is off)."""
    if template_variant == "qwen2_5":
        model_dir, tok = tiny_dir, tokenizer
    else:
        model_dir, tok = tiny_models.path(template_variant), tiny_models.tokenizer(template_variant)
    lead = "<think>\n\n</think>\n\n" if template_variant == "qwen3_think" else ""
    return types.SimpleNamespace(name=template_variant, tokenizer=tok, kwargs=chat_template_kwargs(model_dir), lead=lead)


@pytest.fixture(scope="module")
def chaotic_model(tiny_dir):
    """The tiny model in fp32 with its weights scaled up: greedy output then depends on every context
    token (the plain random model repeats one token forever), so any padding or cache mistake shows."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    return model.eval()


def call_text(name: str, arguments) -> str:
    """A tool call as the model emits it (the template's own `tojson` spelling)."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments, ensure_ascii=False)}}}\n</tool_call>'


def turn_text(*calls, content: str = "") -> str:
    body = "\n".join(call_text(n, a) for n, a in calls)
    return (f"{content}\n{body}" if content and body else content or body) + "<|im_end|>"


class ScriptedGenerator:
    """A TurnGenerator that replays fixed completion texts per episode and records every context."""

    def __init__(self, tokenizer, scripts: dict[int, list[str]]):
        self.tokenizer, self.scripts = tokenizer, {k: list(v) for k, v in scripts.items()}
        self.contexts: dict[int, list[list[int]]] = {k: [] for k in scripts}
        self.completions: dict[int, list[list[int]]] = {k: [] for k in scripts}
        self.batches: list[int] = []

    def start(self, key, context):
        assert not self.contexts[key]

    def generate(self, keys, contexts, budgets):
        self.batches.append(len(keys))
        out = []
        for key, context, budget in zip(keys, contexts, budgets):
            ids = self.tokenizer(self.scripts[key].pop(0), add_special_tokens=False)["input_ids"][:budget]
            self.contexts[key].append(list(context))
            self.completions[key].append(ids)
            out.append(ids)
        return out

    def finish(self, key):
        pass


def play_records(*args, **kwargs):
    """The records of `play_rollouts` (what evaluation keeps)."""
    return [rollout.record for rollout in play_rollouts(*args, **kwargs)]


def oracle_script(question, db_dir, lead: str = "") -> tuple[list, list[str]]:
    calls = oracle_calls(question, SQLEnv(db_dir).sandbox_for(question.db_id))
    return calls, [lead + turn_text(call) for call in calls] + [lead + prompts.FINAL_REPLY + "<|im_end|>"]


# ----------------------------------------------------------------------------------- render parity
def test_scripted_episode_renders_exactly_like_the_chat_template(chat, concert_db_dir):
    """(a) the runner's incremental ids == (b) apply_chat_template of the full transcript, minus the
    template's newline after the final <|im_end|> (generation stops at <|im_end|>; that is the one,
    intended difference). Every intermediate context equals the template render with a generation prompt.
    One turn makes two calls, to cover several tool results in one user turn. The template is the one GRPO
    renders with (Qwen2.5's own; Qwen3's training variant, its own not being prefix-preserving), with the
    model's recorded kwargs."""
    tokenizer, lead = chat.tokenizer, chat.lead
    calls, _ = oracle_script(Q_JOIN, concert_db_dir)
    describes = [c for c in calls if c[0] == "describe"]
    script = [turn_text(*describes[:2], content="Two tables first."), *[turn_text(c) for c in calls[2:]]]
    script = [lead + t for t in script] + [lead + prompts.FINAL_REPLY + "<|im_end|>"]
    gen = ScriptedGenerator(tokenizer, {0: script})
    (record,) = play_records(gen, tokenizer, [Q_JOIN], db_dir=concert_db_dir, progress=False,
                              chat_template_kwargs=chat.kwargs)
    assert record.correct and record.answered and record.parse_failures == 0
    # The generation prompt the model continues from: Qwen3 with thinking off already holds the empty think block.
    think_block = "<think>\n\n</think>\n\n" if chat.name == "qwen3_nothink" else ""
    assert all(tokenizer.decode(c).endswith("<|im_start|>assistant\n" + think_block) for c in gen.contexts[0])

    tools = tool_methods(SQLAgentEnv())
    template = rollout_chat_template(tokenizer)
    assert (template is None) == (chat.name == "qwen2_5")
    full = list(gen.contexts[0][-1]) + gen.completions[0][-1]
    rendered = tokenizer.apply_chat_template(
        prompts.messages_for_template(record.messages), tools=tools, tokenize=True, return_dict=False,
        chat_template=template, **chat.kwargs,
    )
    assert full == rendered[:-1]
    assert tokenizer.decode(rendered[-1:]) == "\n" and tokenizer.decode(full[-1:]) == "<|im_end|>"

    assistant_at = [i for i, m in enumerate(record.messages) if m["role"] == "assistant"]
    assert len(assistant_at) == len(gen.contexts[0]) == len(script)
    for turn, at in enumerate(assistant_at):
        expected = tokenizer.apply_chat_template(
            prompts.messages_for_template(record.messages[:at]),
            tools=tools,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            chat_template=template,
            **chat.kwargs,
        )
        assert gen.contexts[0][turn] == expected, f"context before turn {turn} differs"


def test_runner_transcript_equals_the_oracle_player(chat, concert_db_dir):
    """One call per turn: the runner's record is the oracle player's record (the SFT data format)."""
    tokenizer = chat.tokenizer
    for question in QUESTIONS:
        calls, script = oracle_script(question, concert_db_dir, chat.lead)
        (record,) = play_records(
            ScriptedGenerator(tokenizer, {0: script}), tokenizer, [question], db_dir=concert_db_dir, progress=False,
            chat_template_kwargs=chat.kwargs,
        )
        expected = play(SQLEnv(concert_db_dir), question, calls)
        assert record.messages == expected.messages
        for name in ("answered", "correct", "verdict_reason", "answer", "steps", "parse_failures",
                     "calls_after_answer", "budget_exhausted", "reward", "reward_components"):
            assert getattr(record, name) == getattr(expected, name), name
        assert record.tokens == sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in script)


def _fake_trainer(tokenizer, env, max_completion_length, scripted_turns, kwargs):
    """Just enough of a GRPOTrainer for its own `_tokenize_prompts`, `_get_tool_suffix_ids` and
    `_tool_call_loop` to run: one environment, one rollout, generations replayed from a script
    (`kwargs`: `GRPOConfig.chat_template_kwargs`)."""
    from trl import GRPOTrainer

    tools = tool_methods(env)
    fake = types.SimpleNamespace(
        processing_class=tokenizer,
        _tokenizer=tokenizer,
        _is_vlm=False,
        chat_template=rollout_chat_template(tokenizer),
        chat_template_kwargs=dict(kwargs),
        environment_factories={None: SQLAgentEnv},
        _batch_environments=[None],
        _env_tools={None: tools},
        tools=tools,
        _sync_tool_dicts=[{t.__name__: t for t in tools}],
        _async_tool_dicts=[{}],
        max_tool_calling_iterations=10**6,
        max_completion_length=max_completion_length,
        use_vllm=False,
        model=types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=32768)),
    )

    def generate_single_turn(ids, images, multimodal, num_generations=1, has_tool_images=False):
        return [tokenizer(scripted_turns.pop(0), add_special_tokens=False)["input_ids"] for _ in ids], None

    fake._generate_single_turn = generate_single_turn
    for name in ("_tokenize_prompts", "_get_tool_suffix_ids", "_tool_call_loop"):
        setattr(fake, name, types.MethodType(getattr(GRPOTrainer, name), fake))
    return fake


def test_tokens_and_messages_match_trl_grpo_tool_loop(chat, concert_db_dir):
    """The same scripted completions through TRL's own GRPOTrainer code (prompt tokenisation, tool loop,
    suffix ids, parsing) and through the runner give the same token ids and the same tool results."""
    from trl.chat_template_utils import add_response_schema, parse_response

    tokenizer = chat.tokenizer
    add_response_schema(tokenizer)
    calls, script = oracle_script(Q_FRANCE, concert_db_dir, chat.lead)
    script[0] = chat.lead + turn_text(calls[0], content="Let me look at the table.")

    env = SQLAgentEnv(db_dir=concert_db_dir)
    prompt = [{"role": "system", "content": prompts.SYSTEM_PROMPT}, prompts.user_message(Q_FRANCE)]
    prompt[-1] = {**prompt[-1], "content": prompt[-1]["content"] + env.reset(**Q_FRANCE.to_dict())}
    fake = _fake_trainer(tokenizer, env, 4096, list(script[1:]), chat.kwargs)
    prompt_ids, _, _ = fake._tokenize_prompts([prompt])
    first = tokenizer(script[0], add_special_tokens=False)["input_ids"]
    completions = [[parse_response(tokenizer, first, prefix=prompt_ids[0], tools=fake.tools)]]
    _, trl_messages, trl_completion_ids, *_ = fake._tool_call_loop(
        [list(prompt)], prompt_ids, [first], completions, None, None, {}
    )

    gen = ScriptedGenerator(tokenizer, {0: script})
    (record,) = play_records(gen, tokenizer, [Q_FRANCE], db_dir=concert_db_dir, progress=False,
                              chat_template_kwargs=chat.kwargs)
    ours = gen.contexts[0][-1] + gen.completions[0][-1]
    assert ours == list(prompt_ids[0]) + trl_completion_ids[0]
    ours_tools = [(m["name"], m["content"]) for m in record.messages if m["role"] == "tool"]
    assert ours_tools == [(m["name"], m["content"]) for m in trl_messages[0] if m["role"] == "tool"]
    assert record.reward == pytest.approx(env.get_reward())

    for tool_messages in ([prompts.tool_message("describe", "x")], [prompts.tool_message("query", "a\n1")] * 2):
        ours_suffix = tool_suffix_ids(tokenizer, tool_messages, fake.chat_template, chat.kwargs)
        assert ours_suffix == fake._get_tool_suffix_ids(tool_messages)


# ------------------------------------------------------------------------- TRL rollout vs evaluator
def _trl_rollout(tokenizer, question, db_dir, script, *, iterations, max_completion_length=4096, config=EnvConfig(),
                 kwargs=None):
    """One rollout through TRL 1.16's own GRPOTrainer code (prompt tokenisation, tool loop, suffix ids, parsing)."""
    from trl.chat_template_utils import add_response_schema, parse_response

    add_response_schema(tokenizer)
    env = agent_env_class(config)(db_dir=db_dir, config=config)
    prompt = [{"role": "system", "content": config.system_prompt}, prompts.user_message(question)]
    prompt[-1] = {**prompt[-1], "content": prompt[-1]["content"] + env.reset(**question.to_dict())}
    fake = _fake_trainer(tokenizer, env, max_completion_length, list(script[1:]), kwargs or {})
    fake.max_tool_calling_iterations = iterations
    prompt_ids, _, _ = fake._tokenize_prompts([prompt])
    first = tokenizer(script[0], add_special_tokens=False)["input_ids"]
    completions = [[parse_response(tokenizer, first, prefix=prompt_ids[0], tools=fake.tools)]]
    _, messages, completion_ids, *_ = fake._tool_call_loop(
        [list(prompt)], prompt_ids, [first], completions, None, None, {}
    )
    return env, messages[0], prompt_ids[0] + completion_ids[0]


def _executed(messages) -> list[tuple[list, list]]:
    """(calls, tool results) of every assistant turn whose calls ran (it is followed by tool messages)."""
    out = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant" or i + 1 >= len(messages) or messages[i + 1]["role"] != "tool":
            continue
        calls = []
        for c in m.get("tool_calls") or ():
            args = c["function"]["arguments"]
            calls.append((c["function"]["name"], json.loads(args) if isinstance(args, str) else args))
        results = []
        for t in messages[i + 1:]:
            if t["role"] != "tool":
                break
            results.append((t["name"], t["content"]))
        out.append((calls, results))
    return out


GOLD_COUNT = ("query", {"sql": Q_COUNT.gold_sql})
RIGHT_COUNT = ("answer", {"value": "5"})
DESCRIBE = ("describe", {"table_name": "singer"})
PARITY_SCRIPTS = {
    "no call in mid-episode ends it": [turn_text(DESCRIBE), "Let me think about it.<|im_end|>",
                                       turn_text(GOLD_COUNT), turn_text(RIGHT_COUNT)],
    "malformed call JSON ends it": [turn_text(DESCRIBE),
                                    '<tool_call>\n{"name": "query", "arguments": {"sql": "SELECT 1"\n</tool_call><|im_end|>',
                                    turn_text(RIGHT_COUNT)],
    "unknown tool, bad arguments, calls after the answer": [
        turn_text(("drop_table", {"table_name": "singer"})), turn_text(("query", {"query": "SELECT 1"})),
        turn_text(GOLD_COUNT), turn_text(RIGHT_COUNT), turn_text(DESCRIBE, ("answer", {"value": "6"})),
        "Done.<|im_end|>"],
    "answer and more in one turn": [turn_text(GOLD_COUNT, RIGHT_COUNT, DESCRIBE), "Done.<|im_end|>"],
    "turn budget": [turn_text(DESCRIBE), turn_text(("sample", {"table_name": "singer"})),
                    turn_text(("describe", {"table_name": "concert"})), turn_text(RIGHT_COUNT), "Done.<|im_end|>"],
    "step budget used up inside a turn": [turn_text(*[("sample", {"table_name": "singer"})] * 4),
                                          turn_text(RIGHT_COUNT), "I am out of budget.<|im_end|>"],
}


@pytest.mark.parametrize("name", list(PARITY_SCRIPTS))
def test_evaluator_ends_episodes_as_the_trl_rollout_does(chat, concert_db_dir, name):
    """The same scripted turns through TRL's GRPO tool loop and through the evaluator: the same executed
    calls, tool results, token ids, reward and verdict."""
    tokenizer = chat.tokenizer
    script = [chat.lead + t for t in PARITY_SCRIPTS[name]]
    config = EnvConfig(step_budget=2) if "step budget" in name else EnvConfig()
    turns = 3 if name == "turn budget" else config.step_budget
    env, trl_messages, trl_ids = _trl_rollout(tokenizer, Q_COUNT, concert_db_dir, script, iterations=turns,
                                              config=config, kwargs=chat.kwargs)
    gen = ScriptedGenerator(tokenizer, {0: list(script)})
    (record,) = play_records(gen, tokenizer, [Q_COUNT], db_dir=concert_db_dir, env_config=config,
                              max_turns=turns, progress=False, chat_template_kwargs=chat.kwargs)
    assert _executed(record.messages[2:]) == _executed(trl_messages)
    assert record.reward == pytest.approx(env.get_reward())
    assert record.reward_components == pytest.approx(env._episode["reward_components"])
    assert (record.answered, record.correct) == (env._episode["answered"], env._episode["correct"])
    ours = gen.contexts[0][-1] + gen.completions[0][-1]
    # TRL generates once more after its last tool-calling iteration and never runs that turn: we skip it.
    assert trl_ids[: len(ours)] == ours
    trl_turns = sum(m["role"] == "assistant" for m in trl_messages)
    assert len(gen.completions[0]) == trl_turns - (record.end_reason == "turn budget")


SQL_ANSWER = ("answer", {"sql": "SELECT count(*) FROM singer"})
MODE_SCRIPTS = {  # (schema, answer): the turns of one episode
    ("full", "sql"): [turn_text(GOLD_COUNT), turn_text(SQL_ANSWER), "Submitted.<|im_end|>"],
    ("full", "value"): [turn_text(GOLD_COUNT), turn_text(RIGHT_COUNT), turn_text(DESCRIBE), "Done.<|im_end|>"],
    ("hidden", "sql"): [turn_text(DESCRIBE), turn_text(("answer", {"sql": "SELECT count(*) FROM concert"})),
                        "Submitted.<|im_end|>"],
}


@pytest.mark.parametrize("mode", list(MODE_SCRIPTS))
def test_evaluator_matches_the_trl_rollout_in_every_environment_mode(chat, concert_db_dir, mode):
    """Full schema in the first message and SQL answers: TRL's tool loop over the mode's adapter and the evaluator
    see the same prompt tokens, calls, results, reward and verdict."""
    tokenizer = chat.tokenizer
    config = EnvConfig(schema=mode[0], answer=mode[1])
    script = [chat.lead + t for t in MODE_SCRIPTS[mode]]
    env, trl_messages, trl_ids = _trl_rollout(tokenizer, Q_COUNT, concert_db_dir, script, iterations=15, config=config,
                                              kwargs=chat.kwargs)
    gen = ScriptedGenerator(tokenizer, {0: list(script)})
    (record,) = play_records(gen, tokenizer, [Q_COUNT], db_dir=concert_db_dir, env_config=config, progress=False,
                              chat_template_kwargs=chat.kwargs)
    assert _executed(record.messages[2:]) == _executed(trl_messages)
    assert (record.answered, record.correct) == (env._episode["answered"], env._episode["correct"])
    assert record.value_correct == env._episode["value_correct"]
    assert record.reward == pytest.approx(env.get_reward())
    ours = gen.contexts[0][-1] + gen.completions[0][-1]
    assert trl_ids[: len(ours)] == ours
    first_user = record.messages[1]["content"]
    assert ("CREATE TABLE singer" in first_user) == (mode[0] == "full")
    assert record.correct == (mode != ("hidden", "sql"))


def test_over_long_tool_result_ends_the_episode_as_in_trl(chat, concert_db_dir):
    """TRL drops the tool messages that overflow max_completion_length but its env ran them: same reward."""
    tokenizer = chat.tokenizer
    script = [chat.lead + turn_text(DESCRIBE), chat.lead + turn_text(RIGHT_COUNT)]
    env, trl_messages, _ = _trl_rollout(tokenizer, Q_COUNT, concert_db_dir, script, iterations=15,
                                        max_completion_length=40, kwargs=chat.kwargs)
    (record,) = play_records(ScriptedGenerator(tokenizer, {0: list(script)}), tokenizer, [Q_COUNT],
                              db_dir=concert_db_dir, max_total_tokens=40, progress=False,
                              chat_template_kwargs=chat.kwargs)
    assert record.end_reason == "token budget" and not record.answered
    assert record.reward == pytest.approx(env.get_reward())
    assert [m for m in trl_messages if m["role"] == "tool"] == []  # dropped from TRL's completion, not unrun


# ------------------------------------------------------------------------------------------ counting
def test_parse_failure_unknown_tool_and_calls_after_answer_are_counted(tokenizer, concert_db_dir):
    calls, _ = oracle_script(Q_COUNT, concert_db_dir)
    script = [
        turn_text(("drop_table", {"table_name": "singer"})),  # unknown tool: TRL's own error text
        turn_text(("query", {"query": "SELECT 1"})),  # wrong argument name: the env's error text
        *[turn_text(c) for c in calls],
        turn_text(("describe", {"table_name": "singer"})),  # after the answer: executed and penalised
        "Done.<|im_end|>",  # the learned stop
    ]
    (record,) = play_records(
        ScriptedGenerator(tokenizer, {0: script}), tokenizer, [Q_COUNT], db_dir=concert_db_dir, progress=False
    )
    tools = [m for m in record.messages if m["role"] == "tool"]
    assert tools[0]["content"] == str({"error": "Tool drop_table not found."})
    assert tools[1]["content"].startswith("Error: ")
    assert record.correct and record.answered and not record.budget_exhausted
    assert record.parse_failures == 2
    assert record.steps == 2 + len(calls)
    assert record.turns == record.strict_call_turns == record.lenient_call_turns == 2 + len(calls)
    assert record.calls_after_answer == 1
    assert record.reward_components["post_episode_penalty"] == pytest.approx(EnvConfig().rewards.post_episode_penalty)
    assert record.messages[-1] == {"role": "assistant", "content": "Done."}
    assert record.end_reason == "stopped"


def test_a_turn_without_a_call_ends_the_episode(tokenizer, concert_db_dir):
    script = [turn_text(DESCRIBE), "I think there are five singers.<|im_end|>", turn_text(RIGHT_COUNT)]
    gen = ScriptedGenerator(tokenizer, {0: script})
    (record,) = play_records(gen, tokenizer, [Q_COUNT], db_dir=concert_db_dir, progress=False)
    assert not record.answered and record.end_reason == "no tool call"
    assert record.verdict_reason == "not answered (no tool call)"
    assert (record.turns, record.strict_call_turns, record.steps) == (2, 1, 1)
    assert len(gen.completions[0]) == 2 and not [m for m in record.messages if m.get("name") == "invalid"]


def test_lenient_parser_plays_json_written_as_text(tokenizer, concert_db_dir):
    """A base checkpoint's fenced JSON: no call for TRL's parser, a call for the lenient one; both counted."""
    fenced = '```json\n{"name": "query", "arguments": {"sql": "SELECT count(*) FROM singer"}}\n```<|im_end|>'
    bare = '{"name": "answer", "arguments": {"value": "5"}}<|im_end|>'
    script = [fenced, bare, "Done.<|im_end|>"]
    (strict,) = play_records(ScriptedGenerator(tokenizer, {0: list(script)}), tokenizer, [Q_COUNT],
                              db_dir=concert_db_dir, progress=False)
    assert strict.end_reason == "no tool call" and (strict.turns, strict.strict_call_turns, strict.lenient_call_turns) == (1, 0, 1)
    (lenient,) = play_records(ScriptedGenerator(tokenizer, {0: list(script)}), tokenizer, [Q_COUNT],
                               db_dir=concert_db_dir, progress=False, parser="lenient")
    assert lenient.correct and lenient.end_reason == "stopped"
    assert (lenient.turns, lenient.strict_call_turns, lenient.lenient_call_turns) == (2, 0, 2)
    assert [m["name"] for m in lenient.messages if m["role"] == "tool"] == ["query", "answer"]


def test_budgets_end_unanswered_episodes(tokenizer, concert_db_dir):
    describe = turn_text(DESCRIBE)
    # Turn budget: three turns with calls, never an answer.
    (record,) = play_records(
        ScriptedGenerator(tokenizer, {0: [describe] * 3}),
        tokenizer, [Q_COUNT], db_dir=concert_db_dir, max_turns=3, progress=False,
    )
    assert not record.answered and record.steps == 3 and record.parse_failures == 0
    assert record.verdict_reason == "not answered (turn budget)" and not record.budget_exhausted
    # The env's step budget, reached inside one turn of four calls: the other two are calls after the end.
    (record,) = play_records(
        ScriptedGenerator(tokenizer, {0: [turn_text(*[("sample", {"table_name": "singer"})] * 4), "ok<|im_end|>"]}),
        tokenizer, [Q_COUNT], db_dir=concert_db_dir, env_config=EnvConfig(step_budget=2), progress=False,
    )
    assert record.budget_exhausted and record.steps == 2 and record.calls_after_answer == 2
    assert record.verdict_reason == "not answered (step budget)"
    # The token budget: the first tool result does not fit.
    gen = ScriptedGenerator(tokenizer, {0: [describe, describe]})
    (record,) = play_records(gen, tokenizer, [Q_COUNT], db_dir=concert_db_dir, max_total_tokens=40, progress=False)
    assert not record.answered and record.verdict_reason == "not answered (token budget)"
    assert len(gen.contexts[0]) == 1


def test_a_call_cut_off_by_the_token_budget_ends_the_episode_on_the_budget(tokenizer, concert_db_dir):
    """A turn whose generation runs out of tokens in the middle of a call holds no call, so it ends the episode,
    as TRL's loop ends it; the reason recorded is the token budget, not "no tool call" (a choice to stop)."""
    where = " OR ".join(f"name = 'singer {i}'" for i in range(40))
    script = [turn_text(DESCRIBE), turn_text(("query", {"sql": f"SELECT count(*) FROM singer WHERE {where}"}))]
    probe = ScriptedGenerator(tokenizer, {0: [*script, "Done.<|im_end|>"]})
    play_records(probe, tokenizer, [Q_COUNT], db_dir=concert_db_dir, progress=False)
    first_turn = len(probe.contexts[0][1]) - len(probe.contexts[0][0])  # the describe turn and its tool result
    assert len(probe.completions[0][1]) > 20  # the query turn is long enough to cut
    gen = ScriptedGenerator(tokenizer, {0: list(script)})
    (record,) = play_records(gen, tokenizer, [Q_COUNT], db_dir=concert_db_dir, max_total_tokens=first_turn + 10,
                              progress=False)
    assert [len(c) for c in gen.completions[0]][1:] == [10]  # the query call was cut off after 10 tokens
    assert record.end_reason == "token budget" and record.verdict_reason == "not answered (token budget)"
    assert (record.turns, record.steps, record.answered) == (2, 1, False)


def test_a_turn_handed_back_and_then_stopped_is_not_labelled_as_cut_off(tokenizer, concert_db_dir):
    """Continuous batching hands a turn back unfinished and asks again with a smaller budget; a turn that then
    stops on its own (<|im_end|>, no call) ends as "no tool call": it was never cut off, however long the whole
    turn is against the remaining budget of the last call."""
    ids = tokenizer("I cannot tell which table holds the singers, so I stop here.<|im_end|>",
                    add_special_tokens=False)["input_ids"]
    parts = [(ids[:-4], False), (ids[-4:], True)]  # handed back 4 tokens short of its end, then finished
    budgets = []

    class HandingBack:
        def start(self, key, context):
            pass

        def generate_some(self, keys, contexts, asked, min_stopped):
            budgets.append(list(asked))
            completion, stopped = parts.pop(0)
            return [completion], [stopped]

        def finish(self, key):
            pass

    (record,) = play_records(HandingBack(), tokenizer, [Q_COUNT], db_dir=concert_db_dir,
                              max_total_tokens=len(ids) + 2, progress=False)
    assert budgets == [[len(ids) + 2], [6]] and len(ids) > 6  # the whole turn is longer than the last budget
    assert record.end_reason == "no tool call" and record.tokens == len(ids)


def test_rolling_pool_keeps_batches_full_and_order(tokenizer, concert_db_dir):
    scripts = {}
    for i, question in enumerate(QUESTIONS * 2):
        _, script = oracle_script(question, concert_db_dir)
        scripts[i] = script if i % 2 else [turn_text(DESCRIBE)] + script  # staggered episode lengths
    gen = ScriptedGenerator(tokenizer, scripts)
    records = play_records(gen, tokenizer, QUESTIONS * 2, db_dir=concert_db_dir, batch_size=4, progress=False)
    assert [r.question_id for r in records] == [q.id for q in QUESTIONS * 2]
    assert all(r.correct for r in records)
    assert max(gen.batches) == 4 and gen.batches[:3] == [4, 4, 4]  # refilled as episodes finish
    assert sum(gen.batches) == sum(len(s) for s in scripts.values())


# ---------------------------------------------------------------------------------- model generation
def test_batched_cached_and_sequential_runs_agree(chaotic_model, tokenizer, concert_db_dir, monkeypatch):
    """Greedy decoding: one at a time, batched with caches, and batched without caches give the same
    tokens (hence the same transcripts and verdicts). Each question twice: equal episodes in one batch.
    The random model never writes a call, so every turn is read as a `describe` call here: the episodes
    run several turns, which is what the caches must survive."""
    import sqlenv.episode_loop as episodes

    def every_turn_a_call(tokenizer, completion, prefix, tools, parser="strict"):
        content = tokenizer.decode(completion, skip_special_tokens=True)
        call = {"type": "function", "function": {"name": "describe", "arguments": {"table_name": "singer"}}}
        return {"role": "assistant", "content": content, "tool_calls": [call]}, False, False

    monkeypatch.setattr(episodes, "parse_turn", every_turn_a_call)
    questions = list(QUESTIONS) * 2
    common = dict(db_dir=concert_db_dir, env_config=EnvConfig(step_budget=3), max_new_tokens_per_turn=10,
                  progress=False)
    sequential = play_model(chaotic_model, tokenizer, questions, batch_size=1, **common)
    batched = play_model(chaotic_model, tokenizer, questions, batch_size=4, **common)
    uncached = play_model(chaotic_model, tokenizer, questions, batch_size=4, reuse_cache=False, **common)
    assert [r.to_dict() for r in batched] == [r.to_dict() for r in sequential]
    assert [r.to_dict() for r in uncached] == [r.to_dict() for r in sequential]
    assert [r.to_dict() for r in sequential[:3]] == [r.to_dict() for r in sequential[3:]]
    assert len({r.messages[2]["content"] for r in sequential[:3]}) == 3  # outputs depend on the question
    assert all(r.tokens > 10 and r.turns == 3 and r.end_reason == "turn budget" for r in sequential)


# Greedy rollouts of `chaotic_model` (below), every turn read as a call: (prompt, completion, the model's tokens, turns,
# end reason, sha256 of the JSON [prompt_ids, completion_ids, env_mask] cut to 16 hex digits), as the loop gave them
# before it was reshaped into one state per rollout (same figures from the old and the new code).
PINNED_GREEDY = {
    "q_count": (529, 183, 30, 3, "turn budget", "d67df3464fe59d32"),
    "q_france": (532, 183, 30, 3, "turn budget", "116ad438f0f47866"),
    "q_join": (533, 183, 30, 3, "turn budget", "f13309c1826516c1"),
}


def test_greedy_rollouts_play_the_pinned_tokens(chaotic_model, tokenizer, concert_db_dir, monkeypatch):
    """Greedy episodes of several turns (tool results in the context) through the decoder evaluation and GRPO
    build (`model_generator`): their tokens are the pinned ones. The chaotic model's every token depends on its
    whole context, so a change in rendering, caching, batching or token choice moves them."""
    import hashlib

    import sqlenv.episode_loop as episodes
    from sqlenv.episode_loop import model_generator

    def every_turn_a_call(tokenizer, completion, prefix, tools, parser="strict"):
        content = tokenizer.decode(completion, skip_special_tokens=True)
        call = {"type": "function", "function": {"name": "describe", "arguments": {"table_name": "singer"}}}
        return {"role": "assistant", "content": content, "tool_calls": [call]}, False, False

    monkeypatch.setattr(episodes, "parse_turn", every_turn_a_call)
    config = EnvConfig(step_budget=3)
    eos = generation_eos_ids(chaotic_model, tokenizer)
    with model_generator(chaotic_model, tokenizer, GenerationSettings(), eos, system_prompt=None, env_config=config) as gen:
        rollouts = play_rollouts(gen, tokenizer, list(QUESTIONS), db_dir=concert_db_dir, env_config=config,
                                 max_new_tokens_per_turn=10, max_total_tokens=200, progress=False, batch_size=3)  # fmt: skip
    got = {}
    for r in rollouts:
        blob = json.dumps([r.prompt_ids, r.completion_ids, r.env_mask]).encode()
        got[r.record.question_id] = (len(r.prompt_ids), len(r.completion_ids), sum(r.env_mask), r.record.turns,
                                     r.record.end_reason, hashlib.sha256(blob).hexdigest()[:16])  # fmt: skip
    assert got == PINNED_GREEDY


def _prompt_contexts(tokenizer, concert_db_dir) -> list[list[int]]:
    """The first prompt ids of each fixture question, as the runner renders them."""
    template = rollout_chat_template(tokenizer)
    episodes = [Episode(q, db_dir=concert_db_dir) for q in QUESTIONS]
    return [prompt_token_ids(tokenizer, e.messages, e.tools, template) for e in episodes]


def _started(model, tokenizer, contexts: list[list[int]]) -> ModelGenerator:
    """A greedy generator that never stops early, the first 100 tokens of `contexts[0]` encoded as the shared
    prefix and every context started under its index. Call it under `torch.no_grad()`."""
    gen = ModelGenerator(model, GenerationSettings(), [-1], tokenizer.pad_token_id)
    gen.encode_prefix(contexts[0][:100])
    for key, ctx in enumerate(contexts):
        gen.start(key, ctx)
    return gen


def test_kept_cache_equals_a_fresh_forward(chaotic_model, tokenizer, concert_db_dir):
    """After a batched turn each episode's kept keys/values equal a fresh, unpadded forward of its tokens."""
    contexts = _prompt_contexts(tokenizer, concert_db_dir)
    gen = ModelGenerator(chaotic_model, GenerationSettings(), generation_eos_ids(chaotic_model, tokenizer),
                         tokenizer.pad_token_id)
    with torch.no_grad():
        gen.encode_prefix(contexts[0][:100])
        for key, ctx in enumerate(contexts):
            gen.start(key, ctx)
        completions = gen.generate([0, 1, 2], contexts, [5, 7, 6])
        for key, (ctx, comp) in enumerate(zip(contexts, completions)):
            kv, n = gen.cached(key)
            assert len(ctx) <= n <= len(ctx) + len(comp)  # the last generated token is never fed back
            tokens = (ctx + comp)[:n]
            fresh = chaotic_model(input_ids=torch.tensor([tokens]), use_cache=True).cache
            for (k, v), layer in zip(kv, fresh.layers):
                assert torch.allclose(k, layer.keys[0], atol=1e-4, rtol=1e-4)
                assert torch.allclose(v, layer.values[0], atol=1e-4, rtol=1e-4)


def test_a_turn_holds_each_episodes_keys_values_once(chaotic_model, tokenizer, concert_db_dir):
    """While a forward runs, the batch cache is the only copy of its episodes' keys/values (the kept ones
    moved into it), and a finished batch's buffers are dropped as its rows are kept: an episode's cache is
    never held twice for a whole turn (in float32 that put evaluate@base_3shot_n50 at 9.5 GiB)."""
    base = _prompt_contexts(tokenizer, concert_db_dir)
    contexts = [base[0], base[1], base[0][:-9] + base[1][-7:]]
    held: list[list[bool]] = []
    caches: list = []

    def spy(_module, _args, kwargs):
        held.append([gen.cached(k) is not None for k in range(len(contexts))])
        if kwargs.get("cache") is not None:
            caches.append(kwargs["cache"])

    with torch.no_grad():
        gen = _started(chaotic_model, tokenizer, contexts)
    hook = backbone(chaotic_model).register_forward_pre_hook(spy, with_kwargs=True)
    try:
        with torch.no_grad():
            first = gen.generate([0, 1, 2], contexts, [3, 3, 3])
            held.clear()
            contexts = [ctx + comp + base[2][-5:] for ctx, comp in zip(contexts, first)]
            gen.generate([0, 1, 2], contexts, [3, 3, 3])  # a second turn: prefills from the kept caches
    finally:
        hook.remove()
    assert held and not any(any(row) for row in held)
    assert all(gen.cached(k)[1] == len(c) + 2 for k, c in enumerate(contexts))  # kept again after the turn
    assert caches and all(layer.keys is None for cache in caches for layer in cache.layers)


def test_similar_rows_are_prefilled_together_with_the_caches_of_unpadded_forwards(chaotic_model, tokenizer,
                                                                                   concert_db_dir):
    """Episodes whose new tokens are of similar length are prefilled in one padded forward (a very
    different one alone), and every kept cache equals a fresh, unpadded forward of that episode's tokens."""
    base = _prompt_contexts(tokenizer, concert_db_dir)
    contexts = [base[0], base[1], base[0][:-9] + base[1][-7:], base[2][:101]]  # new: ~n, ~n, ~n-2, 1
    lengths = [len(c) - 1 - 100 for c in contexts]
    assert lengths[3] == 0 and min(lengths[:3]) >= 0.8 * max(lengths[:3])
    forwards: list[int] = []
    hook = backbone(chaotic_model).register_forward_pre_hook(  # a prefill runs the transformer only, no LM head
        lambda _m, _a, kwargs: forwards.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        with torch.no_grad():
            gen = _started(chaotic_model, tokenizer, contexts)
            forwards.clear()
            gen._prefill_rows([0, 1, 2, 3], contexts)
    finally:
        hook.remove()
    assert forwards == [3]  # the three similar rows together; the fourth has nothing to prefill
    with torch.no_grad():
        for key, ctx in enumerate(contexts):
            kv, n = gen.cached(key)
            assert n == len(ctx) - 1
            fresh = chaotic_model(input_ids=torch.tensor([ctx[:-1]]), use_cache=True).cache
            for (k, v), layer in zip(kv, fresh.layers):
                assert torch.allclose(k, layer.keys[0], atol=1e-4, rtol=1e-4)
                assert torch.allclose(v, layer.values[0], atol=1e-4, rtol=1e-4)


def test_prefill_groups_bound_padding_and_size():
    from sqlenv.decode import PREFILL_GROUP_TOKENS, prefill_groups

    assert prefill_groups({}) == []
    assert prefill_groups({0: 10, 1: 400, 2: 11, 3: 12}) == [[0, 2, 3], [1]]
    assert prefill_groups({0: 10, 1: 13}) == [[0, 1]]  # 3 of 26 positions padding
    assert prefill_groups({0: 10, 1: 20}) == [[0], [1]]  # 10 of 40 would be padding: more than a fifth
    many = prefill_groups({i: 100 for i in range(50)})
    assert all(len(g) * 100 <= PREFILL_GROUP_TOKENS for g in many) and sorted(sum(many, [])) == list(range(50))


def test_stopped_rows_leave_the_batch_and_the_others_decode_unchanged(chaotic_model, tokenizer, concert_db_dir):
    """Rows stop at different steps (a stop token, their own budgets) and are cut out of the batch as it
    goes; every row's tokens equal that row decoded alone."""
    contexts = _prompt_contexts(tokenizer, concert_db_dir)
    contexts.append(contexts[1][:-3])  # a fourth row, shorter: left padding in the same batch
    never = [-1]  # no stop token: each row decoded alone to 12 tokens

    def alone(ctx):
        gen = ModelGenerator(chaotic_model, GenerationSettings(), never, tokenizer.pad_token_id)
        return gen.generate([0], [ctx], [12])[0]

    with torch.no_grad():
        free = [alone(ctx) for ctx in contexts]
    stops = [free[0][2], free[1][6]]
    budgets = [12, 12, 4, 9]

    def truncated(tokens, budget):
        end = next((i + 1 for i, tok in enumerate(tokens) if tok in stops), len(tokens))
        return tokens[: min(end, budget)]

    expected = [truncated(t, b) for t, b in zip(free, budgets)]
    assert len({len(e) for e in expected}) >= 3  # rows really stop at different steps

    rows_per_forward: list[int] = []
    hook = backbone(chaotic_model).register_forward_pre_hook(  # prefills and steps alike run the transformer
        lambda _m, _a, kwargs: rows_per_forward.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        with torch.no_grad():
            gen = ModelGenerator(chaotic_model, GenerationSettings(), stops, tokenizer.pad_token_id)
            batched = gen.generate([0, 1, 2, 3], contexts, budgets)
    finally:
        hook.remove()
    assert batched == expected
    # First each row's context alone (all but its last token: never padded to the longest context), then
    # the batched steps, from 4 rows down as rows stop.
    prefill, steps = rows_per_forward[:4], rows_per_forward[4:]
    assert prefill == [1, 1, 1, 1]
    assert steps[0] == 4 and steps[-1] < 4 and steps == sorted(steps, reverse=True)
    assert len(steps) == max(len(e) for e in expected)  # no forward after the last row stopped


def test_a_batch_handed_back_early_goes_on_where_it_was(chaotic_model, tokenizer, concert_db_dir):
    """`generate_some` returns once enough rows have stopped; the others, asked again with their context +
    the tokens they have and the budget left, end with the tokens one uninterrupted `generate` gives."""
    contexts = _prompt_contexts(tokenizer, concert_db_dir)
    never = [-1]
    with torch.no_grad():
        free = ModelGenerator(chaotic_model, GenerationSettings(), never, tokenizer.pad_token_id).generate(
            [0, 1, 2], contexts, [12, 12, 12])
    stops = [free[1][3]]  # row 1 stops after 4 tokens (or earlier); the others run on
    budgets = [12, 12, 12]
    with torch.no_grad():
        whole = ModelGenerator(chaotic_model, GenerationSettings(), stops, tokenizer.pad_token_id).generate(
            [0, 1, 2], contexts, budgets)
        gen = ModelGenerator(chaotic_model, GenerationSettings(), stops, tokenizer.pad_token_id)
        for key, ctx in enumerate(contexts):
            gen.start(key, ctx)
        first, stopped = gen.generate_some([0, 1, 2], contexts, budgets, min_stopped=1)
        assert stopped[1] and first[1] == whole[1]
        going = [k for k in range(3) if not stopped[k]]
        assert going and all(len(first[k]) < len(whole[k]) for k in going)  # handed back mid-turn
        rest, done = gen.generate_some(going, [contexts[k] + first[k] for k in going],
                                       [budgets[k] - len(first[k]) for k in going], min_stopped=len(going))
    assert all(done)
    assert [first[k] + r for k, r in zip(going, rest)] == [whole[k] for k in going]


def test_episodes_whose_turn_ended_do_not_wait_for_the_longest_turn(chaotic_model, tokenizer, concert_db_dir,
                                                                    monkeypatch):
    """Continuous batching: turns of different lengths (stop tokens the random model does emit), episodes
    of several turns. Handing the batch back once a quarter of it has stopped changes no token of any
    episode against one episode at a time, and takes fewer decode steps than a batch that waits for its
    longest turn (the runner before: `generate` only)."""
    import sqlenv.decode as decode
    import sqlenv.episode_loop as episodes
    import sqlenv.eval.rollout as rollout

    def every_turn_a_call(tokenizer, completion, prefix, tools, parser="strict"):
        content = tokenizer.decode(completion, skip_special_tokens=True)
        call = {"type": "function", "function": {"name": "describe", "arguments": {"table_name": "singer"}}}
        return {"role": "assistant", "content": content, "tool_calls": [call]}, False, False

    contexts = _prompt_contexts(tokenizer, concert_db_dir)
    with torch.no_grad():
        free = ModelGenerator(chaotic_model, GenerationSettings(), [-1], tokenizer.pad_token_id).generate(
            [0, 1, 2], contexts, [16, 16, 16])
    monkeypatch.setattr(episodes, "parse_turn", every_turn_a_call)
    monkeypatch.setattr(rollout, "generation_eos_ids", lambda model, tok: sorted({free[0][2], free[1][5]}))
    questions = list(QUESTIONS) * 3
    common = dict(db_dir=concert_db_dir, env_config=EnvConfig(step_budget=4), max_new_tokens_per_turn=16,
                  progress=False)

    def played(batch_size: int, early: bool = True):
        steps = []  # the model's own forwards are the decode steps (prefills run the backbone alone)
        with monkeypatch.context() as patch:
            if not early:
                patch.setattr(decode.ModelGenerator, "generate_some", None)
            hook = chaotic_model.register_forward_pre_hook(lambda *_: steps.append(1))
            try:
                records = play_model(chaotic_model, tokenizer, questions, batch_size=batch_size, **common)
            finally:
                hook.remove()
        return [r.to_dict() for r in records], len(steps)

    alone, _ = played(1)
    continuous, continuous_steps = played(6)
    waiting, waiting_steps = played(6, early=False)
    lengths = {len(m["content"]) for r in alone for m in r["messages"] if m["role"] == "assistant"}
    assert len(lengths) >= 3  # turns really end at different lengths
    assert continuous == alone and waiting == alone
    assert continuous_steps < waiting_steps


def test_after_batch_runs_after_every_batch(chaotic_model, tokenizer, concert_db_dir, monkeypatch):
    """Each batch call (a hand-back included) leaves per-episode caches of new sizes; glibc kept the memory
    they freed resident, and evaluate@base_3shot_n50 peaked at 7.1-8.6 GiB (5.2 with the heap trimmed).
    `play_model(after_batch=...)` calls it after every batch call: the evaluation stage passes
    `sqlenv.train.heap.trim` (tests/test_stage_evaluate.py)."""
    import sqlenv.decode as decode

    calls: list[str] = []
    original = decode.ModelGenerator.generate_some

    def generate_some(self, *args, **kwargs):
        calls.append("batch")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(decode.ModelGenerator, "generate_some", generate_some)
    with torch.no_grad():
        play_model(chaotic_model, tokenizer, list(QUESTIONS), db_dir=concert_db_dir, batch_size=2,
                     env_config=EnvConfig(step_budget=3), max_new_tokens_per_turn=8, progress=False,
                     after_batch=lambda: calls.append("after"))
    assert calls.count("batch") >= 2
    assert calls == ["batch", "after"] * calls.count("batch")


def test_decode_steps_write_the_cache_in_place(chaotic_model, tokenizer, concert_db_dir):
    """Every decode step of a turn writes its keys/values into the buffers reserved at the turn's start
    (`reserved_cache`): transformers' DynamicLayer would copy the whole cache into a new tensor every step."""
    contexts = _prompt_contexts(tokenizer, concert_db_dir)
    storages: list[set[int]] = []

    def record(_module, _args, kwargs, _out):
        storages.append({layer.keys.untyped_storage().data_ptr() for layer in kwargs["cache"].layers})

    with torch.no_grad():
        gen = _started(chaotic_model, tokenizer, contexts)
        gen._prefill_rows([0, 1, 2], contexts)
        hook = chaotic_model.register_forward_hook(record, with_kwargs=True)
        try:
            gen.generate([0, 1, 2], contexts, [8, 8, 8])  # no stop token, equal budgets: no row leaves early
        finally:
            hook.remove()
    assert len(storages) == 8  # the new tokens' prefill, then one forward per further token
    assert all(s == storages[0] for s in storages)


def test_a_turn_reserves_a_little_room_and_grows_past_it(chaotic_model, tokenizer, concert_db_dir, monkeypatch):
    """A batch call reserves `DECODE_ROOM` positions beyond its tokens, not each row's whole budget (up to 768
    tokens, up to a third of evaluate@base_3shot_n50's batch cache, never written); decoding past it grows the cache
    and picks the same tokens as a cache with room for all of them."""
    import sqlenv.decode as decode

    contexts = _prompt_contexts(tokenizer, concert_db_dir)

    def turn(room: int) -> tuple[list[list[int]], list[int]]:
        monkeypatch.setattr(decode, "DECODE_ROOM", room)
        sizes: list[int] = []
        hook = chaotic_model.register_forward_hook(
            lambda _m, _a, kwargs, _o: sizes.append(kwargs["cache"].layers[0]._k.shape[-2]), with_kwargs=True)
        try:
            with torch.no_grad():
                return _started(chaotic_model, tokenizer, contexts).generate([0, 1, 2], contexts, [9, 9, 9]), sizes
        finally:
            hook.remove()

    roomy, roomy_sizes = turn(64)
    tight, tight_sizes = turn(3)
    assert tight == roomy and all(len(c) == 9 for c in tight)
    assert len(set(roomy_sizes)) == 1 and roomy_sizes[0] == max(map(len, contexts)) + 9  # the budget, under 64
    assert tight_sizes[0] == max(map(len, contexts)) + 3 and len(set(tight_sizes)) > 1  # 3 reserved, then grown


def test_reserved_cache_grows_selects_rows_and_refuses_the_rest():
    """Past its capacity a reserved layer grows (same values as concatenating); `batch_select_indices`
    keeps rows; operations it does not implement raise instead of desynchronising its buffers."""
    from transformers import DynamicCache

    from sqlenv.kv_cache import reserved_cache

    config = types.SimpleNamespace(num_hidden_layers=1)
    chunks = [(torch.randn(3, 2, n, 4), torch.randn(3, 2, n, 4)) for n in (2, 1, 3)]
    ours, theirs = reserved_cache(config, 3), DynamicCache()
    for k, v in chunks:
        got, want = ours.update(k, v, 0), theirs.update(k, v, 0)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert ours.get_seq_length() == 6
    ours.batch_select_indices(torch.tensor([2, 0]))
    assert torch.equal(ours.layers[0].keys, theirs.layers[0].keys[[2, 0]])
    with pytest.raises(NotImplementedError):
        ours.crop(-1)
    keys, values = torch.zeros(2, 2, 5, 4), torch.zeros(2, 2, 5, 4)
    adopted = reserved_cache(config, 5, [(keys, values)], length=2)  # buffers taken as they are, not copied
    assert adopted.get_seq_length() == 2 and adopted.layers[0].keys.data_ptr() == keys.data_ptr()
    adopted.update(torch.ones(2, 2, 1, 4), torch.ones(2, 2, 1, 4), 0)
    assert keys[:, :, 2].eq(1).all() and adopted.get_seq_length() == 3


@pytest.mark.parametrize(
    "settings",
    [GenerationSettings(), GenerationSettings(do_sample=True, temperature=3.0, top_k=40, top_p=0.9, seed=7),
     GenerationSettings(repetition_penalty=1.5),
     GenerationSettings(do_sample=True, temperature=3.0, top_p=0.95, min_p=0.02, repetition_penalty=1.3, seed=7)],
    ids=["greedy", "sampled", "greedy-penalised", "sampled-min_p-penalised"],
)
def test_decoding_equals_hf_generate(chaotic_model, tokenizer, concert_db_dir, settings):
    """The runner's decode loop picks generate's tokens: greedy, and sampled from the same seed with the
    same processors (repetition penalty over the whole context, temperature, top-k, top-p, min-p)."""
    from transformers import GenerationConfig

    ctx = _prompt_contexts(tokenizer, concert_db_dir)[0]
    eos = generation_eos_ids(chaotic_model, tokenizer)
    sampling = dict(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p, min_p=settings.min_p)
    config = GenerationConfig(
        max_new_tokens=12,
        do_sample=settings.do_sample,
        repetition_penalty=settings.repetition_penalty,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
        **(sampling if settings.do_sample else {}),
    )
    with torch.no_grad():
        torch.manual_seed(settings.seed)
        ours = ModelGenerator(chaotic_model, settings, eos, tokenizer.pad_token_id).generate([0], [ctx], [12])[0]
        torch.manual_seed(settings.seed)
        ids = torch.tensor([ctx])
        out = chaotic_model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
    reference = out[0, len(ctx) :].tolist()
    end = next((i + 1 for i, tok in enumerate(reference) if tok in eos), len(reference))
    assert ours == reference[:end]
    if settings.do_sample:
        with torch.no_grad():
            greedy = ModelGenerator(chaotic_model, GenerationSettings(), eos, tokenizer.pad_token_id)
            assert ours != greedy.generate([0], [ctx], [12])[0]  # the sample is not the argmax path


def test_greedy_choice_is_argmax_on_tied_bf16_logits():
    """The greedy chooser takes `max(...).indices` for speed; it must pick argmax's token, the first maximal
    index, where bf16 logits tie (often, at 8 bits of mantissa) and where a row holds NaN."""
    choose = GenerationSettings().token_chooser()
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(64, 4096, generator=gen) * 2).round().bfloat16()  # integers: many ties at the top
    ties = (logits == logits.max(dim=-1, keepdim=True).values).sum(dim=-1)
    assert (ties > 1).sum() > 32  # the case under test is common here
    assert torch.equal(choose(logits), logits.argmax(dim=-1))
    first = torch.arange(logits.shape[-1]).expand_as(logits).masked_fill(logits != logits.max(-1, keepdim=True).values, 1 << 30)
    assert torch.equal(choose(logits), first.min(dim=-1).values)
    logits[:, 7] = float("nan")
    assert torch.equal(choose(logits), logits.argmax(dim=-1))


def test_prefills_run_no_lm_head(chaotic_model, tokenizer, concert_db_dir):  # noqa: F811
    """Encoding the shared prefix and prefilling what turns add only extend caches: they run the transformer
    alone, never the 151,936-row LM head (asked for the last position's logits, a several-row LoRA model's head
    took ~1 s a row on the CPU: `sqlenv.decode.backbone`). Decode steps run it once each."""
    base = _prompt_contexts(tokenizer, concert_db_dir)
    contexts = [base[0], base[1], base[0][:-9] + base[1][-7:]]
    head_rows: list[int] = []
    hook = chaotic_model.get_output_embeddings().register_forward_pre_hook(lambda _m, a: head_rows.append(a[0].shape[0]))
    gen = ModelGenerator(chaotic_model, GenerationSettings(), [-1], tokenizer.pad_token_id)
    try:
        with torch.no_grad():
            gen.encode_prefix(base[0][:100])
            for key, ctx in enumerate(contexts):
                gen.start(key, ctx)
            gen._prefill_rows([0, 1, 2], contexts)
            assert head_rows == [] and all(gen.cached(k)[1] == len(c) - 1 for k, c in enumerate(contexts))
            gen.generate([0, 1, 2], contexts, [3, 3, 3])
    finally:
        hook.remove()
    assert head_rows == [3, 3, 3]  # three decode steps of three rows


# ------------------------------------------------------------------------------- prompt-lookup drafting
def test_ngram_drafter_guesses_what_followed_the_latest_earlier_occurrence():
    from sqlenv.prompt_lookup import NgramDrafter

    d = NgramDrafter()
    d.extend(0, [1, 2, 3, 4, 5, 1, 2, 3])
    assert d.draft(0, 3) == [4, 5, 1]  # the last 3 tokens occurred at 0..2
    assert d.draft(0, 0) == [] and d.draft(7, 3) == []  # nothing asked; an unknown episode
    d.append(0, [9])
    assert d.draft(0, 3) == []  # 3-9, 9: never before
    d.extend(1, [1, 7, 1, 8, 1])
    assert d.draft(1, 4) == [8, 1]  # the latest earlier 1 (not the first), up to the end
    d.extend(1, [1, 7, 1, 8, 1, 7])
    assert d.draft(1, 2) == [1, 8]  # extended: 1-7 matches the 2-gram at 0..1
    d.extend(1, [5, 7])  # not an extension: the episode starts afresh
    assert d.draft(1, 2) == []
    d.forget(0)
    assert d.draft(0, 3) == []


def test_packed_attention_computes_what_sdpa_does(chaotic_model, tokenizer, concert_db_dir):
    """A several-token step over a cache with holes (the boolean [rows, 1, t, kv] mask a drafting step passes):
    `packed_sdpa` gives transformers' SDPA logits, and the model's own implementation is back afterwards."""
    from sqlenv.kv_cache import reserved_cache
    from sqlenv.prompt_lookup import PACKED_SDPA, packed_attention

    assert chaotic_model.config.num_key_value_heads < chaotic_model.config.num_attention_heads  # grouped heads
    ctx = _prompt_contexts(tokenizer, concert_db_dir)[0][:40]
    with torch.no_grad():
        prefix = backbone(chaotic_model)(input_ids=torch.tensor([ctx, ctx[::-1]]), use_cache=True).cache
        keep = torch.ones(2, 45, dtype=torch.bool)
        keep[0, 5:9] = keep[1, 40:42] = False  # holes: padding, rejected guesses

        def step_logits():
            cache = reserved_cache(chaotic_model.config, 45, [(lay.keys, lay.values) for lay in prefix.layers], 40)
            mask = keep[:, None, None, :].repeat(1, 1, 5, 1)
            mask[..., -5:] &= torch.ones(5, 5, dtype=torch.bool).tril()
            ids = torch.tensor([ctx[10:15], ctx[20:25]])
            return chaotic_model(input_ids=ids, attention_mask=mask, position_ids=torch.arange(36, 41).expand(2, -1),
                                 cache=cache, use_cache=True, logits_to_keep=5).logits  # fmt: skip

        plain = step_logits()
        with packed_attention(chaotic_model) as packed:
            assert packed and chaotic_model.config._attn_implementation == PACKED_SDPA
            folded = step_logits()
    assert chaotic_model.config._attn_implementation == "sdpa"
    assert torch.allclose(plain, folded, atol=1e-5, rtol=1e-5)


def test_drafted_steps_keep_exactly_the_greedy_tokens(chaotic_model, tokenizer, concert_db_dir, monkeypatch):
    """Guesses right, half right and wrong, rows stopping on a stop token or their budget, a batch handed back
    early: every row's tokens and kept cache are those of one-token greedy decoding, in fewer forwards."""
    from sqlenv.prompt_lookup import NgramDrafter

    contexts = _prompt_contexts(tokenizer, concert_db_dir)
    contexts.append(contexts[1][:-3])
    never = [-1]
    with torch.no_grad():
        free = ModelGenerator(chaotic_model, GenerationSettings(), never, tokenizer.pad_token_id).generate(
            [0, 1, 2, 3], contexts, [14] * 4)
    stops, budgets = [free[0][5]], [14, 14, 9, 14]

    def truncated(tokens, budget):
        end = next((i + 1 for i, tok in enumerate(tokens) if tok in stops), len(tokens))
        return tokens[: min(end, budget)]

    expected = [truncated(t, b) for t, b in zip(free, budgets)]
    truth = {key: ctx + tokens for key, (ctx, tokens) in enumerate(zip(contexts, free))}

    def oracle(self, key, k):  # row 0 guesses right, row 1 right then wrong, row 2 wrong, row 3 nothing
        seq = self._tokens[key]
        right = truth[key][len(seq) : len(seq) + k]
        return {0: right, 1: right[:2] + [t + 1 for t in right[2:]], 2: [t + 1 for t in right], 3: []}[key]

    monkeypatch.setattr(NgramDrafter, "draft", oracle)
    forwards: list[int] = []
    hook = chaotic_model.register_forward_pre_hook(lambda _m, _a, kw: forwards.append(kw["input_ids"].shape[1]),
                                                   with_kwargs=True)  # fmt: skip
    try:
        with torch.no_grad():
            gen = ModelGenerator(chaotic_model, GenerationSettings(), stops, tokenizer.pad_token_id, draft_tokens=4)
            for key, ctx in enumerate(contexts):
                gen.start(key, ctx)
            first, stopped = gen.generate_some([0, 1, 2, 3], contexts, budgets, min_stopped=1)
            going = [k for k in range(4) if not stopped[k]]
            rest, done = gen.generate_some(going, [contexts[k] + first[k] for k in going],
                                           [budgets[k] - len(first[k]) for k in going], min_stopped=len(going))
            for k, tokens in zip(going, rest):
                first[k] = first[k] + tokens
            kept = {k: gen.cached(k) for k in range(4)}
    finally:
        hook.remove()
    assert all(done) and first == expected
    assert max(forwards) == 5 and len(forwards) < 2 * max(len(e) for e in expected)  # drafted steps, fewer of them
    with torch.no_grad():
        for key, (ctx, tokens) in enumerate(zip(contexts, expected)):
            kv, n = kept[key]
            assert n == len(ctx) + len(tokens) - 1  # every token but the last, no rejected guess among them
            fresh = chaotic_model(input_ids=torch.tensor([(ctx + tokens)[:n]]), use_cache=True).cache
            for (k, v), layer in zip(kv, fresh.layers):
                assert torch.allclose(k, layer.keys[0], atol=1e-4, rtol=1e-4)
                assert torch.allclose(v, layer.values[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("gen", [GenerationSettings(), GenerationSettings(repetition_penalty=1.5)], ids=["greedy", "penalised"])
def test_episodes_with_drafting_equal_episodes_without(chaotic_model, tokenizer, concert_db_dir, gen):
    """Whole episodes (several turns, the runner's hand-backs, the real n-gram guesses): the same records; with a
    repetition penalty too (each drafted position penalised by the tokens before it, guesses included)."""
    questions = list(QUESTIONS) * 2
    common = dict(db_dir=concert_db_dir, env_config=EnvConfig(step_budget=3), max_new_tokens_per_turn=12,
                  batch_size=4, progress=False, gen=gen)
    plain = play_model(chaotic_model, tokenizer, questions, **common)
    if gen.repetition_penalty != 1.0:
        unpenalised = play_model(chaotic_model, tokenizer, questions, **{**common, "gen": GenerationSettings()})
        assert [r.messages for r in plain] != [r.messages for r in unpenalised]
    widths: list[int] = []
    hook = chaotic_model.register_forward_pre_hook(lambda _m, _a, kw: widths.append(kw["input_ids"].shape[1]),
                                                   with_kwargs=True)  # fmt: skip
    try:
        drafted = play_model(chaotic_model, tokenizer, questions, draft_tokens=8, **common)
    finally:
        hook.remove()
    assert [r.to_dict() for r in drafted] == [r.to_dict() for r in plain]
    if gen.repetition_penalty == 1.0:  # (penalised, these short turns repeat no n-gram: nothing is guessed)
        assert max(widths) > 1  # steps that checked guesses
    assert chaotic_model.config._attn_implementation == "sdpa"


def test_accept_greedy_keeps_the_argmax_up_to_the_first_miss():
    from sqlenv.prompt_lookup import accept_greedy

    logits = torch.zeros(3, 4, 10)
    for row, best in enumerate([[1, 2, 3, 4], [1, 7, 3, 4], [5, 6, 7, 8]]):
        logits[row, torch.arange(4), torch.tensor(best)] = 1.0
    # row 0: guesses 1, 2, 3 all right -> 1, 2, 3 and the bonus 4; row 1: 1 right, 2 wrong (7) -> 1, 7;
    # row 2: no guess -> 5
    assert accept_greedy(logits, [[1, 2, 3], [1, 2, 3], []]) == [[1, 2, 3, 4], [1, 7], [5]]


def test_accept_sampled_draws_each_token_from_the_models_distribution():
    """Speculative sampling with a sure draft: the first token is distributed as p_0 whatever the guess, and
    the second, given that the first was the guess, as p_1 — checked over many independent rows."""
    from sqlenv.prompt_lookup import accept_sampled

    p0, p1 = torch.tensor([0.5, 0.3, 0.2, 0.0]), torch.tensor([0.1, 0.1, 0.1, 0.7])
    rows = 40_000
    probs = torch.stack([p0, p1, p1]).expand(rows, -1, -1)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        out = accept_sampled(probs, [[1, 3]] * rows)  # guess 1 (p0: 0.3), then 3 (p1: 0.7)
        sure = accept_sampled(torch.eye(4)[[2, 2]].expand(8, -1, -1), [[2]] * 8)  # p_0 is the guess alone
    first = torch.bincount(torch.tensor([o[0] for o in out]), minlength=4) / rows
    assert torch.allclose(first, p0, atol=0.01)
    after_guess = [o[1] for o in out if o[0] == 1]
    second = torch.bincount(torch.tensor(after_guess), minlength=4) / len(after_guess)
    assert torch.allclose(second, p1, atol=0.015)
    assert all(len(o) <= 3 for o in out) and any(len(o) == 3 for o in out)  # both guesses kept + a draw
    assert sure == [[2, 2]] * 8
