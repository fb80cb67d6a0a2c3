"""Guards the failure taxonomy (`sqlenv.failures`): each outcome and habit read off an episode played through
the real environment, and a record the reading must not be fooled by."""

from __future__ import annotations

import dataclasses

import pytest

from fixtures_env import Q_COUNT, Q_FRANCE, concert_db_dir  # noqa: F401
from sqlenv.data.oracle import oracle_calls, play
from sqlenv.env.environment import EnvConfig, SQLEnv
from sqlenv.failures import HABITS, OUTCOMES, Diagnosis, calls, diagnose, summarise

FRANCE_ROWS = [("John Nizinik",), ("Rose White",), ("Justin Brown",)]


def played(concert_db_dir, question, script, **config):
    env = SQLEnv(concert_db_dir, EnvConfig(**config))
    return play(env, question, script)


def test_the_oracle_is_right_with_no_habit(concert_db_dir):
    env = SQLEnv(concert_db_dir)
    record = play(env, Q_FRANCE, oracle_calls(Q_FRANCE, env.sandbox_for("concert")))
    assert diagnose(record, FRANCE_ROWS) == Diagnosis("right")


def test_a_wrong_answer_with_the_gold_on_screen(concert_db_dir):
    record = played(concert_db_dir, Q_FRANCE, [
        ("query", {"sql": "SELECT name FROM singer WHERE country = 'France' ORDER BY age DESC"}),
        ("answer", {"value": "Joe Sharp"}),
    ])
    d = diagnose(record, FRANCE_ROWS)
    assert d.outcome == "wrong_answer" and d.gold_in_last_result is True
    assert not (d.loop or d.missing_name or d.empty_answered)
    assert diagnose(record).gold_in_last_result is None  # no gold rows given: not judged


def test_a_wrong_answer_that_never_reached_the_rows(concert_db_dir):
    record = played(concert_db_dir, Q_FRANCE, [
        ("query", {"sql": "SELECT name FROM singer WHERE country = 'Netherlands'"}),
        ("answer", {"value": "Joe Sharp"}),
    ])
    d = diagnose(record, FRANCE_ROWS)
    assert d.outcome == "wrong_answer" and d.gold_in_last_result is False


def test_an_empty_result_answered_anyway(concert_db_dir):
    record = played(concert_db_dir, Q_FRANCE, [
        ("query", {"sql": "SELECT name FROM singer WHERE country = 'france'"}),  # the value spelled otherwise
        ("answer", {"value": "none"}),
    ])
    d = diagnose(record, FRANCE_ROWS)
    assert d.outcome == "wrong_answer" and d.empty_answered and d.gold_in_last_result is False


def test_a_missing_column_repeated_until_the_step_budget(concert_db_dir):
    bad = ("query", {"sql": "SELECT singer_name FROM singer"})
    record = played(concert_db_dir, Q_COUNT, [
        bad, ("describe", {"table_name": "singer"}), bad, ("query", {"sql": "SELECT  singer_name FROM singer;"}),
    ], step_budget=4)
    d = diagnose(record)
    assert d.outcome == "unanswered_step_budget"
    assert d.missing_name and d.loop and d.repeated_failure  # the third is the same call, spelled otherwise


def test_an_unknown_table_and_a_redescribe_are_a_loop_without_a_repeated_failure(concert_db_dir):
    record = played(concert_db_dir, Q_COUNT, [
        ("describe", {"table_name": "singers"}),
        ("describe", {"table_name": "singer"}),
        ("describe", {"table_name": "SINGER"}),  # SQLite resolves names case-blind: the same call
    ])
    d = diagnose(record)
    assert d.outcome == "unanswered_other" and d.missing_name and d.loop and not d.repeated_failure


def test_token_budget_and_context_length_are_the_token_outcome(concert_db_dir):
    record = played(concert_db_dir, Q_COUNT, [("describe", {"table_name": "singer"})])
    for end in ("token budget", "context length"):
        assert diagnose(dataclasses.replace(record, end_reason=end)).outcome == "unanswered_token_budget"
    assert diagnose(dataclasses.replace(record, end_reason="no tool call")).outcome == "unanswered_other"


def test_calls_after_the_answer_are_not_a_loop(concert_db_dir):
    count = ("query", {"sql": "SELECT count(*) FROM singer"})
    record = played(concert_db_dir, Q_COUNT, [count, ("answer", {"value": "5"}), count, count])
    assert record.calls_after_answer == 2
    d = diagnose(record)
    assert d.outcome == "right" and not d.loop and not d.repeated_failure


def test_every_call_is_paired_with_its_own_observation(concert_db_dir):
    """A reading that paired calls with the wrong tool message would misplace every error."""
    record = played(concert_db_dir, Q_COUNT, [
        ("describe", {"table_name": "singer"}), ("query", {"sql": "SELECT nope FROM singer"}),
        ("answer", {"value": "5"}),
    ])
    got = calls(record.messages)
    assert [c.tool for c in got] == ["describe", "query", "answer"]
    assert got[0].observation.startswith("Table singer") and got[1].failed and not got[2].failed


def test_summary_counts_every_outcome_and_habit(concert_db_dir):
    rows = [Diagnosis("right"), Diagnosis("wrong_answer", loop=True, empty_answered=True).to_dict(),
            Diagnosis("unanswered_token_budget", loop=True, repeated_failure=True, missing_name=True)]
    s = summarise(rows)
    assert s["n"] == 3 and list(s["outcomes"]) == list(OUTCOMES) and list(s["habits"]) == list(HABITS)
    assert s["outcomes"]["right"] == 1 and s["outcomes"]["unanswered_step_budget"] == 0 and s["unanswered"] == 1
    assert s["habits"] == {"loop": 2, "repeated_failure": 1, "missing_name": 1, "empty_answered": 1,
                           "gold_in_last_result": None}  # a wrong answer, none read: unknown, not zero
    judged = summarise([Diagnosis("wrong_answer", gold_in_last_result=False), Diagnosis("right")])
    assert judged["habits"]["gold_in_last_result"] == 0


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_outcomes_are_exclusive(concert_db_dir, outcome):
    """Exactly one outcome per episode, whatever the counters say."""
    base = played(concert_db_dir, Q_COUNT, [("query", {"sql": "SELECT count(*) FROM singer"}),
                                            ("answer", {"value": "5"})])
    variants = {
        "right": base,
        "wrong_answer": dataclasses.replace(base, correct=False),
        "unanswered_step_budget": dataclasses.replace(base, answered=False, correct=False, budget_exhausted=True,
                                                      end_reason="token budget"),
        "unanswered_token_budget": dataclasses.replace(base, answered=False, correct=False, end_reason="token budget"),
        "unanswered_other": dataclasses.replace(base, answered=False, correct=False, end_reason="turn budget"),
    }
    assert diagnose(variants[outcome]).outcome == outcome


def test_the_environments_notes_do_not_hide_an_empty_result_or_the_gold(concert_db_dir):
    """Near the end of the budget every observation carries a note after the result: the taxonomy reads the result."""
    empty = played(concert_db_dir, Q_FRANCE, [
        ("query", {"sql": "SELECT name FROM singer WHERE country = 'france'"}),
        ("answer", {"value": "none"}),
    ], step_budget=3, budget_notice_at=3)  # fmt: skip
    assert "\n\nNote: 2 calls are left" in empty.messages[3]["content"]
    assert diagnose(empty, FRANCE_ROWS).empty_answered
    shown = played(concert_db_dir, Q_FRANCE, [
        ("query", {"sql": "SELECT name FROM singer WHERE country = 'France' ORDER BY age DESC"}),
        ("answer", {"value": "Joe Sharp"}),
    ], step_budget=3, budget_notice_at=3)  # fmt: skip
    assert diagnose(shown, FRANCE_ROWS).gold_in_last_result is True
