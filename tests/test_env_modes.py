"""Guards the environment modes: `schema: full` shows the CREATE TABLE text in the first message, `answer: sql`
takes the final SQL and scores it by execution accuracy (with the value reading beside it), and SFT data, the
adapter's tool schemas, rewards and metrics follow the mode in all four combinations."""

from __future__ import annotations

import json

import pytest
from fixtures_env import Q_COUNT, Q_FRANCE, Q_JOIN, QUESTIONS, concert_db_dir  # noqa: F401  (fixture)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlenv.data.oracle import oracle_calls, play
from sqlenv.data.sft_data import SFTDataConfig, build_sft_data
from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig, SQLEnv
from sqlenv.env.trl_adapter import SQLAgentEnv, SQLAnswerAgentEnv, agent_env_class, tool_schemas
from sqlenv.eval.evaluation import episode_metrics
from sqlenv.eval.policies import run_random

MODES = [(schema, answer) for schema in ("hidden", "full") for answer in ("value", "sql")]


def test_full_schema_shows_create_table_statements_with_keys(concert_db_dir):  # noqa: F811
    hidden, full = SQLEnv(concert_db_dir), SQLEnv(concert_db_dir, EnvConfig(schema="full"))
    assert hidden.reset(Q_JOIN) == "\n\nTables in the database: concert, numbers, singer, singer_in_concert."
    shown = full.reset(Q_JOIN)
    assert shown.startswith("\n\nDatabase schema:\nCREATE TABLE ")
    for table in ("concert", "numbers", "singer", "singer_in_concert"):
        assert f"CREATE TABLE {table} (" in shown
    assert "PRIMARY KEY (singer_id)" in shown and "FOREIGN KEY (singer_id) REFERENCES singer(singer_id)" in shown
    assert full.reset(Q_COUNT) == shown  # one database, one schema text (cached per database file)


def test_system_prompts_differ_by_mode_and_the_default_is_unchanged():
    assert EnvConfig().system_prompt == prompts.SYSTEM_PROMPT == prompts.system_prompt("hidden", "value")
    texts = {mode: prompts.system_prompt(*mode) for mode in MODES}
    assert len(set(texts.values())) == 4
    verbose = {mode: prompts.system_prompt(*mode, style="verbose") for mode in MODES}
    assert len(set(verbose.values())) == 4 and not set(verbose.values()) & set(texts.values())
    assert "answer(sql)" in verbose["full", "sql"] and "answer(value)" not in verbose["full", "sql"]
    assert "with that query" in texts["full", "sql"] and "copied from that query result" in texts["full", "value"]
    assert "CREATE TABLE" in texts["full", "value"] and "hidden until you look" in texts["hidden", "sql"]
    with pytest.raises(ValueError, match="schema must be one of"):
        EnvConfig(schema="visible")
    with pytest.raises(ValueError, match="answer must be one of"):
        EnvConfig(answer="text")
    with pytest.raises(ValueError, match="prompt must be one of"):
        EnvConfig(prompt="terse")


@pytest.mark.parametrize(
    "sql, correct, value_correct",
    [
        ("SELECT count(*) FROM singer", True, True),
        ("SELECT count(singer_id) AS n FROM singer", True, True),  # another query, the same rows
        ("SELECT count(*) FROM concert", False, False),
        ("SELECT nope FROM singer", False, False),  # fails: wrong on both readings
        ("SELECT count(*), 1 FROM singer", False, False),
    ],
)
def test_sql_answers_are_scored_by_execution_accuracy(concert_db_dir, sql, correct, value_correct):  # noqa: F811
    env = SQLEnv(concert_db_dir, EnvConfig(answer="sql"))
    env.reset(Q_COUNT)
    result = env.step("answer", {"sql": sql})
    assert result.done and env.answered and env.answer == sql
    assert (env.correct, env.value_correct) == (correct, value_correct)
    assert result.observation.startswith("Answer recorded: ")  # neutral, as for value answers
    assert result.rewards["correctness"] == (1.0 if correct else 0.0)


def test_ex_and_value_readings_can_differ(concert_db_dir):  # noqa: F811
    """EX matches columns by permutation and needs the gold order only when the gold SQL says `order by`."""
    env = SQLEnv(concert_db_dir, EnvConfig(answer="sql"))
    env.reset(Q_JOIN)
    gold_reversed = Q_JOIN.gold_sql + " ORDER BY s.name DESC"
    env.step("answer", {"sql": gold_reversed})
    assert env.correct and env.value_correct  # unordered gold: any row order is right
    env.reset(Q_FRANCE)
    env.step("answer", {"sql": "SELECT name FROM singer WHERE country = 'France' ORDER BY age ASC"})
    assert not env.correct and "in order" in env.verdict_reason  # ordered gold, reversed rows


def test_the_answer_parameter_follows_the_mode(concert_db_dir):  # noqa: F811
    env = SQLEnv(concert_db_dir, EnvConfig(answer="sql"))
    env.reset(Q_COUNT)
    wrong_param = env.step("answer", {"value": "5"})
    assert wrong_param.observation == (
        "Error: missing argument 'sql'; unexpected argument 'value'. Usage: answer(sql).")
    assert not env.done and env.parse_failures == 1
    value_env = SQLEnv(concert_db_dir)
    value_env.reset(Q_COUNT)
    assert value_env.step("answer", {"sql": "SELECT 5"}).observation.startswith("Error: missing argument 'value'")


def test_adapter_class_and_tool_schema_follow_the_answer_mode():
    assert agent_env_class(EnvConfig()) is SQLAgentEnv and agent_env_class(EnvConfig(answer="sql")) is SQLAnswerAgentEnv
    by_name = {s["function"]["name"]: s["function"] for s in tool_schemas(EnvConfig(answer="sql"))}
    assert list(by_name["answer"]["parameters"]["properties"]) == ["sql"]
    assert by_name["answer"]["parameters"]["required"] == ["sql"]
    value = {s["function"]["name"]: s["function"] for s in tool_schemas()}
    assert list(value["answer"]["parameters"]["properties"]) == ["value"]
    assert {k: v for k, v in by_name.items() if k != "answer"} == {k: v for k, v in value.items() if k != "answer"}
    with pytest.raises(ValueError, match="agent_env_class"):
        SQLAgentEnv(None, EnvConfig(answer="sql"))  # the schema shown must be the one the env judges
    with pytest.raises(ValueError, match="agent_env_class"):
        SQLAnswerAgentEnv(None, EnvConfig())
    assert SQLAnswerAgentEnv(None)._env.config.answer == "sql"


@pytest.mark.parametrize("schema, answer", MODES)
def test_oracle_and_sft_data_work_in_every_mode(concert_db_dir, schema, answer):  # noqa: F811
    config = EnvConfig(schema=schema, answer=answer)
    env = SQLEnv(concert_db_dir, config)
    for q in QUESTIONS:
        calls = oracle_calls(q, env.sandbox_for(q.db_id), config=config)
        assert calls[-1] == (("answer", {"sql": q.gold_sql}) if answer == "sql" else calls[-1])
        assert any(tool == "describe" for tool, _ in calls) == (schema == "hidden")
        record = play(env, q, calls)
        assert record.correct and record.answered
        assert record.value_correct is (True if answer == "sql" else None)
        assert record.messages[0]["content"] == config.system_prompt
        assert ("CREATE TABLE" in record.messages[1]["content"]) == (schema == "full")
    data = build_sft_data(list(QUESTIONS), concert_db_dir, config,
                          SFTDataConfig(error_recovery_fraction=0.5, sample_fraction=0.1, explore_fraction=0.1,
                                        value_check_fraction=0.1, empty_recovery_fraction=0.1, seed=3))  # fmt: skip
    assert len(data.records) == len(QUESTIONS), data.drop_counts
    tools = json.loads(data.records[0]["tools"])
    answer_tool = next(t["function"] for t in tools if t["function"]["name"] == "answer")
    assert list(answer_tool["parameters"]["properties"]) == [answer]
    kinds = {r["kind"] for r in data.records}
    assert "recovery" in kinds  # the recovery path works with the schema shown too
    for r in data.records:
        final_call = [m for m in r["messages"] if m.get("tool_calls")][-1]["tool_calls"][0]["function"]
        assert final_call["name"] == "answer" and list(json.loads(final_call["arguments"])) == [answer]


def test_value_accuracy_is_reported_in_sql_mode_only(concert_db_dir):  # noqa: F811
    sql = run_random(list(QUESTIONS) * 4, db_dir=concert_db_dir, env_config=EnvConfig(answer="sql"), seed=1)
    assert all(r.answer is None or r.answer.upper().startswith("SELECT") for r in sql)
    metrics = episode_metrics(sql)
    assert "value_accuracy" in metrics and 0.0 <= metrics["value_accuracy_low"] <= metrics["value_accuracy_high"]
    assert "value_accuracy" not in episode_metrics(run_random(list(QUESTIONS), db_dir=concert_db_dir, seed=1))


WRONG_SQL = ["SELECT count(*) FROM concert", "SELECT nope", "SELECT name FROM singer", ""]
CALLS = st.sampled_from([
    ("describe", {"table_name": "singer"}), ("sample", {"table_name": "singer"}),
    ("query", {"sql": "SELECT count(*) FROM singer"}), ("query", {"sql": "SELECT broken FROM"}),
    ("answer", {"value": "5"}),  # the value-mode call: an argument error in sql mode
])
CALLS = st.one_of(CALLS, st.integers(0, 99).map(lambda i: ("query", {"sql": f"SELECT n FROM numbers WHERE n = {i}"})))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.lists(CALLS, max_size=14), wrong=st.sampled_from(WRONG_SQL), schema=st.sampled_from(["hidden", "full"]))
def test_a_wrong_sql_answer_never_loses_and_nothing_pays_like_a_right_one(concert_db_dir, prefix, wrong, schema):  # noqa: F811
    config = EnvConfig(schema=schema, answer="sql")

    def total(calls):
        env = SQLEnv(concert_db_dir, config)
        env.reset(Q_COUNT)
        for call in calls:
            env.step(*call)
        return env.total_reward, env

    answered, env = total([*prefix, ("answer", {"sql": wrong})])
    stopped, _ = total(prefix)
    right, _ = total([("answer", {"sql": Q_COUNT.gold_sql})])
    assert env.answered and not env.correct
    assert answered >= stopped - 1e-9  # a wrong answer never scores below not answering
    assert right > answered and right > stopped  # no farming beats the right SQL


def test_sql_answers_without_distinct_match_unless_kept(concert_db_dir):  # noqa: F811
    """EX in answer=sql mode removes DISTINCT from both statements, as Spider's official evaluator does by default;
    `keep_distinct` judges the statements as written (Q_JOIN's gold says DISTINCT; a singer sang twice in 2014)."""
    without = Q_JOIN.gold_sql.replace("SELECT DISTINCT", "SELECT")
    verdicts = []
    for keep in (False, True):
        env = SQLEnv(concert_db_dir, EnvConfig(answer="sql", keep_distinct=keep))
        env.reset(Q_JOIN)
        env.step("answer", {"sql": without})
        verdicts.append((env.correct, env.value_correct, env.verdict_reason))
    assert verdicts[0][0] is True and verdicts[1][0] is False
    assert verdicts[1][2] == "expected 3 rows, got 4"
    assert verdicts[0][1] is False is verdicts[1][1]  # the value reading sees the 4 rows the SQL gave
