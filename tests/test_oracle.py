"""Guards the oracle: its call script, the transcript layout (TRL's), and verification on fixture and Spider data."""

import json

import pytest

from fixtures_env import Q_BROKEN, Q_COUNT, Q_FRANCE, Q_JOIN, QUESTIONS, concert_db_dir, spider_dir  # noqa: F401
from sqlenv.data.oracle import oracle_calls, play
from sqlenv.env import prompts
from sqlenv.env.environment import SQLEnv
from sqlenv.env.verifier import format_answer


@pytest.mark.parametrize(
    "question, sample, expected_tools",
    [
        (Q_COUNT, False, [("describe", "singer"), ("query", None), ("answer", None)]),
        (Q_COUNT, True, [("describe", "singer"), ("sample", "singer"), ("query", None), ("answer", None)]),
        # no `tables` on the question: taken from the gold SQL's parse, in database spelling
        (Q_JOIN, False, [("describe", "singer"), ("describe", "singer_in_concert"), ("describe", "concert"),
                         ("query", None), ("answer", None)]),
    ],
)
def test_oracle_calls(concert_db_dir, question, sample, expected_tools):
    env = SQLEnv(concert_db_dir)
    calls = oracle_calls(question, env.sandbox_for("concert"), sample=sample)
    got = [(tool, args.get("table_name")) for tool, args in calls]
    assert sorted(got) == sorted(expected_tools)
    assert [t for t, _ in calls][-2:] == ["query", "answer"]
    assert calls[-2][1] == {"sql": question.gold_sql}
    result = env.sandbox_for("concert").execute(question.gold_sql)
    assert calls[-1][1] == {"value": format_answer(result.columns, result.rows)}


@pytest.mark.parametrize("question", QUESTIONS, ids=lambda q: q.id)
def test_oracle_verifies_fixture_questions(concert_db_dir, question):
    env = SQLEnv(concert_db_dir)
    record = play(env, question, oracle_calls(question, env.sandbox_for("concert")))
    assert record.correct and record.answered and not record.budget_exhausted
    assert record.reward_components["correctness"] == 1.0 and record.calls_after_answer == 0


def test_transcript_layout_matches_trl(concert_db_dir):
    env = SQLEnv(concert_db_dir)
    calls = oracle_calls(Q_COUNT, env.sandbox_for("concert"), sample=True)
    record = play(env, Q_COUNT, calls)
    msgs = record.messages
    assert msgs[:2] == prompts.initial_messages(Q_COUNT, prompts.tables_observation(env.tables))
    body, final = msgs[2:-1], msgs[-1]
    assert len(body) == 2 * len(calls)
    for (tool, args), assistant, tool_msg in zip(calls, body[0::2], body[1::2]):
        assert assistant == prompts.assistant_tool_calls([(tool, args)])
        assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == args
        assert tool_msg["role"] == "tool" and tool_msg["name"] == tool and tool_msg["content"]
    assert body[-1]["content"].startswith("Answer recorded:")
    assert final == {"role": "assistant", "content": prompts.FINAL_REPLY}
    assert record.to_dict()["messages"] == msgs  # JSON-friendly for SFT files
    json.dumps(record.to_dict())


def test_play_records_mistakes_and_late_calls(concert_db_dir):
    env = SQLEnv(concert_db_dir)
    calls = [("describe", {"table_name": "singers"}), ("query", {"nope": 1}), ("answer", {"value": "4"}),
             ("answer", {"value": "5"})]
    record = play(env, Q_COUNT, calls)
    assert record.answered and not record.correct and record.answer == "4"
    assert record.parse_failures == 1 and record.calls_after_answer == 1 and record.steps == 3
    assert [m["content"][:6] for m in record.messages if m["role"] == "tool"] == ["Error:", "Error:", "Answer", "Error:"]
    assert record.reward == pytest.approx(sum(record.reward_components.values()))


def test_unanswered_episode_has_no_closing_turn_and_broken_gold_is_reported(concert_db_dir):
    env = SQLEnv(concert_db_dir)
    record = play(env, Q_FRANCE, [("describe", {"table_name": "singer"})])
    assert not record.answered and record.messages[-1]["role"] == "tool"
    broken = play(env, Q_BROKEN, oracle_calls(Q_BROKEN, env.sandbox_for("concert")))
    assert not broken.correct and not broken.messages and "gold SQL" in broken.verdict_reason


def test_oracle_on_spider_sample(spider_dir):
    from sqlenv.data.spider import load_spider

    loaded = load_spider(spider_dir, databases=["concert_singer"])
    env = SQLEnv(spider_dir / "database")
    records = [play(env, q, oracle_calls(q, env.sandbox_for(q.db_id), sample=True)) for q in loaded.questions]
    assert len(records) >= 40
    assert all(r.correct for r in records), [r.verdict_reason for r in records if not r.correct][:3]
