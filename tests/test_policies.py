"""Guards the model-free policies: the seeded random agent's episodes and the few-shot system prompts."""

import dataclasses
import json

import pytest
from fixtures_env import Q_COUNT, Q_FRANCE, Q_JOIN, QUESTIONS, concert_db_dir  # noqa: F401  (fixture)

from sqlenv.data.few_shot import (
    few_shot_examples,
    few_shot_system_prompt,
    render_example,
)
from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig
from sqlenv.env.tool_calls import lenient_tool_calls
from sqlenv.eval.policies import POLICIES, run_random
from sqlenv.episodes import Episode


def test_random_policy_is_seeded_and_order_independent(concert_db_dir):
    first = run_random(QUESTIONS, db_dir=concert_db_dir, seed=3)
    again = run_random(list(reversed(QUESTIONS)), db_dir=concert_db_dir, seed=3)
    assert [r.to_dict() for r in first] == [r.to_dict() for r in reversed(again)]
    others = [run_random(QUESTIONS, db_dir=concert_db_dir, seed=s) for s in range(4, 8)]
    assert any([r.messages for r in o] != [r.messages for r in first] for o in others)


def test_random_episodes_are_well_formed(concert_db_dir):
    config = EnvConfig(step_budget=6)
    for seed in range(10):
        for record in run_random(QUESTIONS, db_dir=concert_db_dir, env_config=config, seed=seed):
            assert record.parse_failures == 0 and record.calls_after_answer == 0 and record.tokens == 0
            assert 1 <= record.steps <= 6
            assert record.answered != record.budget_exhausted
            roles = [m["role"] for m in record.messages]
            assert roles[:2] == ["system", "user"]
            if record.answered and record.steps < 6:
                assert record.messages[-1] == prompts.final_message()
                assert roles[2:-1] == ["assistant", "tool"] * record.steps
            elif record.answered:  # answered in the last allowed turn: no turn left for the closing reply
                assert roles[2:] == ["assistant", "tool"] * 6
            else:
                assert roles[2:] == ["assistant", "tool"] * 6
            for message in record.messages:
                if message["role"] == "tool":
                    assert not message["content"].startswith("{'error'")  # only real tools, real arguments


def test_random_answers_come_from_what_it_saw(concert_db_dir):
    # Seeds found by running the policy: a count(*) on singer then answering its cell is right by luck.
    hits = [s for s in range(60) if run_random([Q_COUNT], db_dir=concert_db_dir, seed=s)[0].correct]
    assert hits and len(hits) < 30
    seen_answers = 0
    for seed in range(20):
        (record,) = run_random([Q_FRANCE], db_dir=concert_db_dir, seed=seed)
        if record.answered and not record.answer.isdigit():
            shown = "\n".join(m["content"] for m in record.messages if m["role"] == "tool")
            assert record.answer in shown
            seen_answers += 1
    assert seen_answers > 0


def test_few_shot_examples_are_deterministic_diverse_and_correct(concert_db_dir):
    pool = [
        dataclasses.replace(Q_COUNT, id="a", hardness="easy"),
        dataclasses.replace(Q_COUNT, id="b", hardness="easy"),
        dataclasses.replace(Q_FRANCE, id="c", hardness="medium"),
        dataclasses.replace(Q_JOIN, id="d", hardness="hard"),
    ]
    three = few_shot_examples(pool, 3, db_dir=concert_db_dir, seed=1)
    assert {r.hardness for r in three} == {"easy", "medium", "hard"}
    assert all(r.correct for r in three)
    again = few_shot_examples(pool, 3, db_dir=concert_db_dir, seed=1)
    assert [r.question_id for r in three] == [r.question_id for r in again]
    picks = {few_shot_examples(pool, 1, db_dir=concert_db_dir, seed=s)[0].question_id for s in range(12)}
    assert len(picks) > 1  # the seed matters
    broken = dataclasses.replace(Q_COUNT, id="x", gold_sql="SELECT nope FROM singer")
    assert [r.question_id for r in few_shot_examples([broken, pool[2]], 1, db_dir=concert_db_dir)] == ["c"]
    with pytest.raises(ValueError):
        few_shot_examples([broken], 1, db_dir=concert_db_dir)


def test_few_shot_system_prompt(concert_db_dir):
    examples = few_shot_examples(QUESTIONS, 3, db_dir=concert_db_dir)
    assert few_shot_system_prompt(0, examples) == prompts.SYSTEM_PROMPT
    one = few_shot_system_prompt(1, examples)
    three = few_shot_system_prompt(3, examples)
    for text in (one, three):
        assert text.startswith(prompts.SYSTEM_PROMPT + "\n\nWorked example")
    assert one.count("### Example") == 1 and three.count("### Example") == 3
    for q in QUESTIONS:
        assert f"User: {q.question}" in three
    assert '<tool_call>\n{"name": "describe", "arguments": {"table_name": "singer"}}\n</tool_call>' in three
    long = render_example(examples[0], 1, max_lines=2)
    assert "more lines)" in long
    with pytest.raises(ValueError):
        few_shot_system_prompt(4, examples)
    episode = Episode(Q_COUNT, db_dir=concert_db_dir, system_prompt=three)
    assert episode.messages[0] == {"role": "system", "content": three}
    assert [POLICIES[p].shots for p in ("base", "base_1shot", "base_3shot", "sft")] == [0, 1, 3, 0]


def test_few_shot_calls_are_read_by_the_lenient_parser(concert_db_dir):
    """Every call a worked example shows is one the base policies' parser reads back, arguments included."""
    (example,) = few_shot_examples(QUESTIONS, 1, db_dir=concert_db_dir)
    shown = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
             for m in example.messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    read = [(c["function"]["name"], c["function"]["arguments"]) for c in lenient_tool_calls(render_example(example, 1))]
    assert read == shown and shown
