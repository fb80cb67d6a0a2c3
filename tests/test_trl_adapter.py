"""Guards SQLAgentEnv as TRL 1.16 sees it: public surface, derived tool schemas, argument errors, reward."""

import copy
import functools
import inspect
import json
from pathlib import Path

import pytest
import trl
from fixtures_env import Q_COUNT, Q_JOIN, concert_db_dir  # noqa: F401  (fixture)
from transformers.utils import get_json_schema
from transformers.utils.chat_template_utils import render_jinja_template

from sqlenv.data.oracle import play
from sqlenv.env import prompts
from sqlenv.env.environment import TOOL_PARAMS, EnvConfig, SQLEnv
from sqlenv.env.trl_adapter import SQLAgentEnv, tool_schemas

QWEN_TEMPLATE = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()


def _row(q, **extra):
    # A dataset row as TRL passes it to reset(**row): every column, the prompt included.
    row = q.to_dict()
    row["prompt"] = [{"role": "system", "content": prompts.SYSTEM_PROMPT}, prompts.user_message(q)]
    row.update(extra)
    return row


def _trl_tools(instance):
    # Exactly GRPOTrainer.__init__'s probing of an environment instance.
    return [
        getattr(instance, name)
        for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def test_public_surface_is_tools_reset_and_reward():
    public = {n for n, _ in inspect.getmembers(SQLAgentEnv, predicate=inspect.isfunction) if not n.startswith("_")}
    assert public == {"describe", "sample", "query", "answer", "reset", "get_reward"}
    public_attrs = {n for n in dir(SQLAgentEnv(None)) if not n.startswith("_")}
    assert public_attrs == public  # no public state either


def test_tool_signatures_match_environment_parameters():
    for name, params in TOOL_PARAMS.items():
        sig = inspect.signature(getattr(SQLAgentEnv, name))
        assert tuple(sig.parameters)[1:] == params
        assert all(p.annotation in (str, "str") for p in list(sig.parameters.values())[1:])


EXPECTED = {
    "describe": ("table_name", "Name of a table in the database."),
    "sample": ("table_name", "Name of a table in the database."),
    "query": ("sql", "The SQLite query to run."),
    "answer": ("value", 'The answer values copied from the query result: one value as it is, one column as '
               '"a, b, c", several columns as one row per line with " | " between values.'),
}


def test_schemas_as_trl_derives_them():
    schemas = [get_json_schema(m) for m in _trl_tools(SQLAgentEnv(None))]  # what apply_chat_template does
    assert schemas == tool_schemas()
    assert [s["function"]["name"] for s in schemas] == ["answer", "describe", "query", "sample"]
    for schema in schemas:
        fn = schema["function"]
        param, description = EXPECTED[fn["name"]]
        assert schema["type"] == "function" and fn["description"]
        assert fn["parameters"] == {
            "type": "object",
            "properties": {param: {"type": "string", "description": description}},
            "required": [param],
        }


def test_schemas_render_through_qwen_template():
    env = SQLAgentEnv(None)
    messages = prompts.initial_messages(Q_COUNT, prompts.tables_observation(["singer"]))
    from_methods, _ = render_jinja_template([messages], tools=_trl_tools(env), chat_template=QWEN_TEMPLATE,
                                            add_generation_prompt=True)
    from_schemas, _ = render_jinja_template([messages], tools=tool_schemas(), chat_template=QWEN_TEMPLATE,
                                            add_generation_prompt=True)
    text = from_methods[0]
    assert text == from_schemas[0]
    assert text.startswith("<|im_start|>system\n" + prompts.SYSTEM_PROMPT + "\n\n# Tools\n")
    for name, (param, _) in EXPECTED.items():
        assert f'"name": "{name}"' in text and f'"required": ["{param}"]' in text
    assert text.endswith("Tables in the database: singer.<|im_end|>\n<|im_start|>assistant\n")


def test_wrapping_keeps_signature_and_docstring():
    for name in TOOL_PARAMS:
        method = getattr(SQLAgentEnv, name)
        assert method.__name__ == name and "Args:" in method.__doc__ and isinstance(method.__wrapped__, type(method))


def test_reset_takes_every_dataset_column(concert_db_dir):
    env = SQLAgentEnv(db_dir=concert_db_dir)
    obs = env.reset(**_row(Q_COUNT, environment_extra="ignored", tables=["singer"], ordered=None))
    assert obs == prompts.tables_observation(["concert", "numbers", "singer", "singer_in_concert"])
    assert env._episode["question_id"] == "q_count"
    other = SQLAgentEnv()  # no db_dir: a db_path column is enough
    other.reset(**_row(Q_JOIN, db_path=str(concert_db_dir / "concert" / "concert.sqlite")))
    assert other._episode["db_id"] == "concert"


def test_rollout_through_tools_and_reward(concert_db_dir):
    env = SQLAgentEnv(db_dir=concert_db_dir)
    env.reset(**_row(Q_COUNT))
    assert "singer_id INTEGER PRIMARY KEY" in env.describe(table_name="singer")
    assert "(3 rows)" in env.sample(table_name="singer")
    assert env.query(sql=Q_COUNT.gold_sql) == "count(*)\n5\n(1 row)"
    assert env.answer(value="5").startswith("Answer recorded: 5")
    assert env.get_reward() == pytest.approx(1.0 + 0.1 + 0.1 + 4 * -0.01 + 0.005)  # + progress + format
    assert env.query(sql="SELECT 1").startswith("Error: the episode is over")
    episode = env._episode
    assert episode["correct"] and episode["answered"] and episode["calls_after_end"] == 1 and episode["steps"] == 4
    assert episode["reward_components"]["post_episode_penalty"] == -0.3
    assert env.get_reward() == pytest.approx(1.0 + 0.1 + 0.1 + 4 * -0.01 + 0.005 - 0.3)


@pytest.mark.parametrize(
    "tool, kwargs, expected",
    [
        ("describe", {}, "Error: missing argument 'table_name'. Usage: describe(table_name)."),
        ("query", {"sql": "SELECT 1", "explain": "yes"}, "Error: unexpected argument 'explain'. Usage: query(sql)."),
        ("query", {"statement": "SELECT 1"}, "Error: missing argument 'sql'; unexpected argument 'statement'."),
        ("answer", {"value": ["5"]}, "Error: argument 'value' of answer must be a string, got an array."),
        ("sample", {"table_name": None}, "Error: argument 'table_name' of sample must be a string, got null."),
    ],
)
def test_bad_arguments_give_the_same_text_as_evaluation(concert_db_dir, tool, kwargs, expected):
    adapter, plain = SQLAgentEnv(db_dir=concert_db_dir), SQLEnv(concert_db_dir)
    adapter.reset(**_row(Q_COUNT))
    plain.reset(Q_COUNT)
    text = getattr(adapter, tool)(**kwargs)  # TRL calls tool(**arguments): this must not raise
    assert text.startswith(expected)
    assert text == plain.step(tool, kwargs).observation
    assert adapter._episode["parse_failures"] == 1 and adapter.get_reward() == pytest.approx(-0.01)


def test_positional_extras_are_reported_not_raised(concert_db_dir):
    env = SQLAgentEnv(db_dir=concert_db_dir)
    env.reset(**_row(Q_COUNT))
    assert env.query("SELECT 1", "again").startswith("Error: unexpected argument '<positional 1>'")
    assert env.query("SELECT 1 AS x") == "x\n1\n(1 row)"


def test_factory_with_partial_configuration(concert_db_dir):
    factory = functools.partial(SQLAgentEnv, db_dir=concert_db_dir, config=EnvConfig(step_budget=1))
    env = factory()
    env.reset(**_row(Q_COUNT))
    assert "step budget (1 calls) is used up" in env.describe(table_name="singer")
    assert env._episode["budget_exhausted"]


# ------------------------------------------------------------------------------------------------
# Through the real GRPOTrainer: a tiny random Qwen2 (real tokenizer and chat template) whose turns
# are scripted, so TRL's own parsing, tool loop, reset(**row) and get_reward() run on our class.
SCRIPT_RIGHT = [
    ("describe", {"table_name": "singer"}),
    ("query", {"sql": "SELECT count(*) FROM singer"}),
    ("answer", {"value": "5"}),
]
SCRIPT_MISTAKES = [
    ("query", {"statement": "SELECT 1"}),  # TRL would raise TypeError on this without our wrapper
    ("describe", {"table_name": "singers"}),
    ("answer", {"value": "42"}),
    ("query", {"sql": "SELECT 1"}),  # after the end
]


@pytest.fixture(scope="module")
def grpo_trainer(tmp_path_factory, concert_db_dir):
    import os

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from sqlenv.train.tiny_model import build_tiny_model

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    tiny = build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    args = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("grpo")), per_device_train_batch_size=2, num_generations=2,
        max_steps=1, max_completion_length=512, max_tool_calling_iterations=15, report_to=[], use_cpu=True,
        save_strategy="no", bf16=False,
    )
    dataset = Dataset.from_list([_row(Q_COUNT)] * 2)
    factory = functools.partial(SQLAgentEnv, db_dir=concert_db_dir)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=dataset,
                          environment_factory=factory)
    return trainer, tokenizer


def _scripted_rollout(trainer, tokenizer, script):
    """Play `script` (one call per assistant turn, then a plain turn) through TRL's rollout path."""
    turns = [
        '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call><|im_end|>' % (name, json.dumps(args))
        for name, args in script
    ] + [prompts.FINAL_REPLY + "<|im_end|>"]
    calls = {"n": 0}

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        text = turns[min(calls["n"], len(turns) - 1)]
        calls["n"] += 1
        ids = tokenizer(text, add_special_tokens=False).input_ids
        return [list(ids) for _ in prompt_ids], None

    captured = {}
    tool_loop = type(trainer)._tool_call_loop

    def spy(self_prompts, *args, **kwargs):
        captured["prompt"] = copy.deepcopy(self_prompts[0])
        out = tool_loop(trainer, self_prompts, *args, **kwargs)
        captured["completion"] = out[1][0]
        return out

    trainer._generate_single_turn = generate
    trainer._tool_call_loop = spy
    trainer.model.train()  # as inside trainer.train(): metrics go to the "train" bucket
    trainer._metrics["train"].clear()
    trainer._generate_and_score_completions([_row(Q_COUNT), _row(Q_COUNT)])
    return captured, trainer._environment_pool[None]


@pytest.mark.parametrize(
    "script, correct, reward",
    [
        (SCRIPT_RIGHT, True, 1.0 + 0.1 + 0.1 + 3 * -0.01 + 0.005),  # correctness, progress, format, calls
        (SCRIPT_MISTAKES, False, 0.1 + 3 * -0.01 - 0.3),  # a wrong answer still earns the format bonus
    ],
)
def test_grpo_trainer_rollout_matches_oracle_transcript(grpo_trainer, concert_db_dir, script, correct, reward):
    trainer, tokenizer = grpo_trainer
    captured, envs = _scripted_rollout(trainer, tokenizer, script)
    assert len(envs) == 2
    for env in envs:
        assert env._episode["correct"] is correct and env._episode["reward"] == pytest.approx(reward)
    assert trainer._metrics["train"]["rewards/SQLAgentEnv/mean"][-1] == pytest.approx(reward, abs=1e-6)
    assert trainer._metrics["train"]["tools/failure_frequency"][-1] == 0  # no tool ever raised
    # The very messages SFT data is built from (through the real environment) equal TRL's.
    record = play(SQLEnv(concert_db_dir), Q_COUNT, script)
    trl_messages = captured["prompt"] + captured["completion"]
    assert trl_messages == prompts.messages_for_template(record.messages)
