"""SFT trajectories: verified by replay, closed by a plain turn, real errors in recovery ones, JSON-string arguments, deterministic."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from sqlenv.data.exploring import VALUE_LIST_MAX, table_relevance
from sqlenv.data.questions import build_questions
from sqlenv.data.sft_data import (
    SHARES,
    SFTDataConfig,
    assigned_kind,
    build_sft_data,
    check_trajectory,
    column_guesses,
    summarize,
    table_guesses,
    wrong_queries,
)
from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig, SQLEnv
from sqlenv.env.trl_adapter import tool_schemas
from sqlenv.types import Question


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    db_dir = tmp_path_factory.mktemp("world")
    built = build_questions(
        db_dir, seed=0, source="synthetic", domains=["school", "airline"], databases_per_domain=1, questions_per_db=40
    )
    return db_dir, built.questions


@pytest.fixture(scope="module")
def data(world):
    db_dir, questions = world
    return build_sft_data(questions, db_dir, EnvConfig(), MIX)


MIX = SFTDataConfig(error_recovery_fraction=0.2, sample_fraction=0.15, explore_fraction=0.15, value_check_fraction=0.15,
                    empty_recovery_fraction=0.15, wrong_join_fraction=0.1)  # fmt: skip


def _calls(record):
    return [
        (m["tool_calls"][0]["function"]["name"], m["tool_calls"][0]["function"]["arguments"])
        for m in record["messages"]
        if m["role"] == "assistant" and m.get("tool_calls")
    ]


def test_every_trajectory_replays_to_a_verified_answer(world, data):
    db_dir, questions = world
    by_id = {q.id: q for q in questions}
    assert len(data.records) == len(questions) and data.drop_counts == {}
    env = SQLEnv(db_dir, EnvConfig())
    for record in data.records:
        question = by_id[record["id"]]
        env.reset(question)
        observations = [env.step(name, json.loads(args)).observation for name, args in _calls(record)]
        assert env.answered and env.correct, record["id"]  # the verifier accepts the replayed answer
        stored = [m["content"] for m in record["messages"] if m["role"] == "tool"]
        assert observations == stored  # tool results are the environment's own text
        assert record["messages"][:2] == prompts.initial_messages(question, prompts.tables_observation(env.tables))


def test_trajectories_end_with_one_plain_assistant_turn(data):
    for record in data.records:
        last, before = record["messages"][-1], record["messages"][-2]
        assert last == {"role": "assistant", "content": prompts.FINAL_REPLY}
        assert before["role"] == "tool" and before["name"] == "answer"
        assert _calls(record)[-1][0] == "answer"
        plain = [m for m in record["messages"] if m["role"] == "assistant" and not m.get("tool_calls")]
        assert plain == [last]


def test_arguments_are_json_strings_and_tools_are_the_adapter_schemas(data):
    schemas = json.dumps(tool_schemas(), ensure_ascii=False)
    for record in data.records:
        assert record["tools"] == schemas
        assert set(record) == {"id", "db_id", "hardness", "kind", "messages", "tools", "mistakes"}
        for name, args in _calls(record):
            assert isinstance(args, str)
            decoded = json.loads(args)
            assert isinstance(decoded, dict) and len(decoded) == 1 and all(isinstance(v, str) for v in decoded.values())


def test_recovery_trajectories_hit_a_real_error_then_describe_and_correct(world, data):
    _, questions = world
    by_id = {q.id: q for q in questions}
    recovery = [r for r in data.records if r["kind"] == "recovery"]
    assert len(recovery) >= 10
    positions, aliased = set(), 0
    for record in recovery:
        calls = _calls(record)
        tools = [m for m in record["messages"] if m["role"] == "tool"]
        errors = [i for i, t in enumerate(tools) if t["content"].startswith("Error:")]
        assert len(errors) == 1
        at = errors[0]
        assert calls[at][0] == "query" and tools[at]["content"].startswith("Error: no such ")
        gold = by_id[record["id"]].gold_sql
        wrong = json.loads(calls[at][1])["sql"]
        assert wrong != gold and len(wrong.split()) == len(gold.split())  # one identifier renamed in place
        corrected = [json.loads(a)["sql"] for n, a in calls[at + 1:] if n == "query"]
        assert corrected == [gold]  # ... then the corrected query
        (was, now), = [(g, w) for g, w in zip(gold.split(), wrong.split()) if g != w]
        if "." in was and was.split(".", 1)[1] == now.split(".", 1)[1]:  # a column under another table's alias
            aliased += 1
            assert calls[at + 1][0] == "query"  # requalified at once: every table was described before
            described = {json.loads(a)["table_name"].lower() for n, a in calls[:at] if n == "describe"}
            assert described == {t.lower() for t in by_id[record["id"]].tables}
            continue
        positions.add(at)
        assert all(name == "describe" for name, _ in calls[:at])  # explored (some) tables first, or not at all
        assert calls[at + 1][0] == "describe"  # after the error: look at the table ...
        described_after = json.loads(calls[at + 1][1])["table_name"]
        assert described_after not in [json.loads(a)["table_name"] for _, a in calls[:at]]
        assert described_after.lower() in {t.lower() for t in by_id[record["id"]].tables}
    assert 0 in positions and max(positions) > 0  # errors both before and after exploring
    assert aliased >= 3  # the commonest name error on real databases is among them
    # Both kinds of mistake occur: a wrong column and a wrong table.
    errors = {t["content"].split(":")[1].strip() for r in recovery for t in r["messages"] if t["role"] == "tool"
              and t["content"].startswith("Error:")}
    assert errors == {"no such column", "no such table"}


def test_other_kinds_have_no_error_and_sample_ones_sample(data):
    for record in data.records:
        names = [n for n, _ in _calls(record)]
        if record["kind"] == "sample":
            assert names.count("sample") == 1 and names.index("sample") < names.index("query")
        elif record["kind"] == "plain":
            assert "sample" not in names
        if record["kind"] != "recovery":
            assert not any(m["content"].startswith("Error:") for m in record["messages"] if m["role"] == "tool")


def test_deterministic_and_seeded(world, data):
    db_dir, questions = world
    config = MIX
    again = build_sft_data(list(reversed(questions)), db_dir, EnvConfig(), config)
    assert json.dumps(again.records, sort_keys=True) == json.dumps(data.records, sort_keys=True)
    other = build_sft_data(questions, db_dir, EnvConfig(), replace(config, seed=1))
    assert [r["kind"] for r in other.records] != [r["kind"] for r in data.records]


def test_kind_shares_follow_the_fractions(world):
    ids = [f"q{i}" for i in range(4000)]
    kinds = [assigned_kind(i, MIX) for i in ids]
    for kind, share in {"recovery": 0.2, "sample": 0.15, "explore": 0.15, "value_check": 0.15, "empty_recovery": 0.15,
                        "wrong_join": 0.1, "plain": 0.1}.items():  # fmt: skip
        assert abs(kinds.count(kind) / len(ids) - share) < 0.03, kind
    nothing = SFTDataConfig(**dict.fromkeys(SHARES.values(), 0.0))
    assert {assigned_kind(i, nothing) for i in ids} == {"plain"}
    with pytest.raises(ValueError, match="error_recovery_fraction"):
        SFTDataConfig(error_recovery_fraction=1.5)
    with pytest.raises(ValueError, match="add up to 1.3 > 1"):
        SFTDataConfig(error_recovery_fraction=0.5, explore_fraction=0.5)


def test_unverifiable_questions_are_dropped_by_reason(world):
    db_dir, questions = world
    good = questions[0]
    broken = replace(good, id="broken", gold_sql="SELECT no_such_thing FROM nowhere")
    result = build_sft_data([good, broken], db_dir, EnvConfig(), SFTDataConfig())
    assert [r["id"] for r in result.records] == [good.id]
    assert result.drop_counts == {"gold_sql_fails": 1} and result.dropped == [("broken", "gold_sql_fails")]
    summary = summarize(result, candidates=2)
    assert summary["kept"] == 1 and summary["dropped"] == {"gold_sql_fails": 1} and summary["keep_rate"] == 0.5


@pytest.mark.parametrize(
    "column, table, expected",
    [
        ("std_name", "student", "name"),
        ("yr_built", "ves", "year_built"),
        ("CustomerId", "Customer", "customer_id"),
        ("Name", "teacher", "teacher_name"),
        ("NAME", "DISHES", "dish_name"),
    ],
)
def test_column_guesses_are_what_a_model_would_write(column, table, expected):
    assert expected in column_guesses(column, table)


@pytest.mark.parametrize(
    "table, expected",
    [("FLIGHTS", ["FLIGHT"]), ("teacher", ["teachers"]), ("Category", ["Categories"]), ("shpmt", ["shipment", "shpmts"])],
)
def test_table_guesses_flip_the_number_or_spell_out(table, expected):
    assert table_guesses(table) == expected


def test_wrong_queries_rename_one_real_identifier_in_place(shop_db):
    from sqlenv.env.sandbox import Sandbox

    q = Question(id="s1", db_id="shop", question="?", gold_sql="SELECT name FROM customers WHERE city = 'London'")
    with Sandbox(shop_db) as box:
        wrongs = wrong_queries(q, box)
        assert {(w.kind, w.original) for w in wrongs} >= {("column", "name"), ("table", "customers")}
        for w in wrongs:
            assert not box.execute(w.sql).ok
            assert w.sql.replace(w.guess, w.original, 1) == q.gold_sql
        # Never a guess that exists in the schema (SQLite names are case-insensitive).
        assert all(w.guess.lower() not in {"customer_id", "name", "city", "customers"} for w in wrongs)


# ------------------------------------------------------------------- the teacher that does not know the answer
def _tool_results(record):
    return [m["content"] for m in record["messages"] if m["role"] == "tool"]


def _of_kind(data, kind):
    records = [r for r in data.records if r["kind"] == kind]
    assert len(records) >= 4, f"too few {kind} trajectories to check ({len(records)})"
    return records


def test_explore_trajectories_look_at_one_table_outside_the_gold_query_and_move_on(world, data):
    db_dir, questions = world
    by_id = {q.id: q for q in questions}
    env = SQLEnv(db_dir, EnvConfig())
    for record in _of_kind(data, "explore"):
        question = by_id[record["id"]]
        calls = _calls(record)
        names = [n for n, _ in calls]
        described = [json.loads(a)["table_name"] for n, a in calls if n == "describe"]
        gold = {t.lower() for t in question.tables}
        extra = [t for t in described if t.lower() not in gold]
        assert len(extra) == 1 and len(described) == len(gold) + 1, record["id"]
        assert names == ["describe"] * len(described) + ["query", "answer"]
        assert json.loads(calls[-2][1])["sql"] == question.gold_sql  # ... and nothing of the extra table is used
        env.reset(question)
        assert extra[0] in env.tables  # a real table of the database
        # the order a reader of the question would open them in: more shared words first
        scores = [table_relevance(question.question, t) for t in described]
        assert scores == sorted(scores, reverse=True)
        assert not any(c.startswith("Error:") for c in _tool_results(record))


def _played(world, data, kind):
    """(question, tool results, [(position, sql) of each query]) of every trajectory of `kind`."""
    by_id = {q.id: q for q in world[1]}
    for record in _of_kind(data, kind):
        calls = _calls(record)
        yield by_id[record["id"]], _tool_results(record), [(i, json.loads(a)["sql"]) for i, (n, a) in enumerate(calls) if n == "query"]


def test_value_check_trajectories_look_at_the_values_before_filtering(world, data):
    for question, results, queries in _played(world, data, "value_check"):
        (check_at, check), (gold_at, gold) = queries
        assert gold == question.gold_sql and check_at < gold_at and check.startswith("SELECT DISTINCT ")
        literals = [v for v in re.findall(r"'((?:[^']|'')*)'", gold)]
        shown = prompts.result_cells(results[check_at])
        assert any(v in shown for v in literals), (check, shown)  # the value the gold filters on, as stored
        assert len(shown) <= VALUE_LIST_MAX


def test_empty_recovery_trajectories_meet_an_empty_result_check_the_values_and_correct(world, data):
    for question, results, queries in _played(world, data, "empty_recovery"):
        assert [i for i, _ in queries] == [queries[0][0], queries[0][0] + 1, queries[0][0] + 2]
        (wrong_at, wrong), (check_at, check), (_, fixed) = queries
        empty = results[wrong_at]
        assert empty.endswith("(0 rows)") or set(prompts.result_cells(empty)) <= {"0", "NULL"}, empty
        assert fixed == question.gold_sql and wrong != fixed and wrong.lower() == fixed.lower()  # one value's case
        assert check.startswith("SELECT DISTINCT ") and results[check_at] != empty
        assert results[check_at + 1] != empty  # the corrected query finds what the first one missed
        assert not any(c.startswith("Error:") for c in results)


def test_wrong_join_trajectories_meet_an_empty_join_read_the_foreign_key_and_correct(world):
    only = SFTDataConfig(**{**dict.fromkeys(SHARES.values(), 0.0), "wrong_join_fraction": 1.0})
    joins = build_sft_data(world[1], world[0], EnvConfig(), only)  # the kind needs a join: few questions have one
    assert joins.unavailable["wrong_join"] == sum(r["kind"] == "plain" for r in joins.records) > 0  # played plain, counted
    for question, results, queries in _played(world, joins, "wrong_join"):
        (wrong_at, wrong), (fixed_at, fixed) = queries
        assert fixed == question.gold_sql and wrong != fixed and " JOIN " in wrong.upper()
        assert len(wrong.split()) == len(fixed.split())  # one column of a join condition moved, nothing else
        assert prompts.without_notes(results[wrong_at]).endswith("(0 rows)") or \
            set(prompts.result_cells(results[wrong_at])) <= {"0", "NULL"}  # fmt: skip
        described = results[wrong_at + 1]
        assert fixed_at == wrong_at + 2 and described.startswith("Table ") and "Foreign keys:" in described
        assert not any(c.startswith("Error:") for c in results)


def test_mistakes_mark_the_teachers_wrong_first_query_and_nothing_else(data):
    """Each record names its deliberate mistake (SFT can leave it out of the loss): a recovery's failing query, the
    empty first query of an empty_recovery; no other turn, and none in kinds without one."""
    for record in data.records:
        messages, mistakes = record["messages"], record["mistakes"]
        if record["kind"] not in ("recovery", "empty_recovery", "wrong_join"):
            assert mistakes == [], record["id"]
            continue
        assert len(mistakes) == 1, record["id"]
        turn, result = messages[mistakes[0]], messages[mistakes[0] + 1]
        assert turn["role"] == "assistant" and turn["tool_calls"][0]["function"]["name"] == "query"
        first_query = next(i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls")
                           and m["tool_calls"][0]["function"]["name"] == "query")
        if record["kind"] == "recovery":
            assert result["content"].startswith("Error:"), record["id"]
        else:
            assert mistakes[0] == first_query and not result["content"].startswith("Error:")
    assert {r["kind"] for r in data.records if r["mistakes"]} >= {"recovery", "empty_recovery"}


def test_a_broken_environment_leaves_no_trajectory_of_the_new_kinds(world, monkeypatch):
    """If the environment stopped showing an empty result as one (here: as an error), no empty_recovery trajectory
    would pass as one; and a record whose check query is missing is refused by `check_trajectory`."""
    db_dir, questions = world
    config = SFTDataConfig(**{**dict.fromkeys(SHARES.values(), 0.0), "empty_recovery_fraction": 1.0})
    honest = build_sft_data(questions, db_dir, EnvConfig(), config)
    assert honest.records and {r["kind"] for r in honest.records} >= {"empty_recovery"}
    from sqlenv.env import environment

    real = environment.prompts.render_result
    monkeypatch.setattr(environment.prompts, "render_result",
                        lambda result, *a: "Error: nothing found" if result.ok and not result.rows else real(result, *a))  # fmt: skip
    broken = build_sft_data(questions, db_dir, EnvConfig(), config)
    kept = [r for r in broken.records if r["kind"] == "empty_recovery"]
    assert all(not _tool_results(r)[_calls(r).index(next(c for c in _calls(r) if c[0] == "query"))].endswith("(0 rows)")
               for r in kept)  # fmt: skip
    assert broken.drop_counts.get("unexpected_error", 0) >= 1
    record = next(r for r in honest.records if r["kind"] == "empty_recovery")
    messages = list(record["messages"])
    at = next(i for i, m in enumerate(messages) if m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "query")
    del messages[at + 2 : at + 4]  # the value check and its result
    assert check_trajectory(messages, "empty_recovery") == "empty_recovery_without_its_queries"


def test_repeated_recovery_sends_the_failing_query_twice_meets_the_note_then_changes(world):
    """`repeat_fraction`: a recovery whose failing query goes out twice, unchanged — the loop real-database
    episodes fall into — gets its error twice (the second time with the environment's note that the call already
    failed), then changes; both failing turns are out of the loss, the fix is not."""
    db_dir, questions = world
    config = SFTDataConfig(**{**dict.fromkeys(SHARES.values(), 0.0), "error_recovery_fraction": 1.0,
                              "repeat_fraction": 0.5})  # fmt: skip
    result = build_sft_data(questions, db_dir, EnvConfig(loop_notice=True, error_hints=True), config)
    recovery = [r for r in result.records if r["kind"] == "recovery"]
    twice = [r for r in recovery if len(r["mistakes"]) == 2]
    assert len(recovery) >= 20 and 0.25 * len(recovery) <= len(twice) <= 0.75 * len(recovery)
    assert summarize(result, len(questions))["recovery_repeated"] == len(twice)
    for record in twice:
        calls, tools = _calls(record), _tool_results(record)
        first, again = (m // 2 - 1 for m in record["mistakes"])  # assistant turn i answers tool result i
        assert again == first + 1 and calls[first] == calls[again] and calls[first][0] == "query"
        assert tools[first].startswith("Error: no such ") and "\n\nNote: " in tools[first]  # the name's hint
        assert tools[again] == tools[first] + prompts.REPEATED_FAILURE_NOTICE
        assert calls[again + 1] != calls[again]  # then a change: requalified, or a describe first
        errors = [t for t in tools if t.startswith("Error:")]
        assert len(errors) == 2
    once = next(r for r in recovery if len(r["mistakes"]) == 1)
    messages = list(once["messages"])
    at = once["mistakes"][0]
    call = messages[at]["tool_calls"][0]
    other = {**messages[at], "tool_calls": [{**call, "function": {**call["function"], "arguments": '{"sql": "SELECT x"}'}}]}
    broken = messages[: at + 2] + [other, messages[at + 1]] + messages[at + 2:]
    assert check_trajectory(broken, "recovery") == "recovery_without_single_error"  # two failing calls, not one twice
    assert check_trajectory(messages[: at + 2] + messages[at : at + 2] + messages[at + 2:], "recovery") is None
    with pytest.raises(ValueError, match="repeat_fraction"):
        SFTDataConfig(repeat_fraction=1.5)


def test_table_qualified_teacher_names_tables_not_aliases(world):
    """`qualify: table`: the teacher's join queries say `booking.seat_class`, not `T1.seat_class` (a column under
    the wrong alias was the commonest first error of the SFT agent on real databases); spliced in place, the same
    rows, and left as written where that cannot be done safely."""
    from sqlenv.data.sft_data import table_qualified

    assert table_qualified("SELECT T2.name, count(*) FROM flight AS T1 JOIN airport AS T2 ON T1.origin = T2.airport_id "
                           "GROUP BY T2.airport_id") == ("SELECT airport.name, count(*) FROM flight JOIN airport ON "
                                                         "flight.origin = airport.airport_id GROUP BY airport.airport_id")  # fmt: skip
    assert table_qualified("select t1.name from singer t1 where t1.age > 3") == "select singer.name from singer where singer.age > 3"
    assert table_qualified("SELECT name FROM singer") is None  # no alias
    assert table_qualified("SELECT T1.a FROM x AS T1 JOIN x AS T2 ON T1.a = T2.b") is None  # a table read twice
    assert table_qualified("SELECT T1.a FROM (SELECT a FROM x) AS T1") is None  # an aliased subquery
    db_dir, questions = world
    config = SFTDataConfig(**{**dict.fromkeys(SHARES.values(), 0.0), "error_recovery_fraction": 0.5, "qualify": "table"})
    table, alias = (build_sft_data(questions, db_dir, EnvConfig(), replace(config, qualify=q)) for q in ("table", "alias"))
    rewritten = {q.id for q in questions if table_qualified(q.gold_sql) is not None}
    aliased_gold = [q for q in questions if " AS T" in q.gold_sql]
    assert len(aliased_gold) > table.requalified == len(rewritten) >= 0.8 * len(aliased_gold) and alias.requalified == 0
    assert len(table.records) == len(alias.records)  # every trajectory still verified
    sent = [json.loads(a)["sql"] for r in table.records if r["id"] in rewritten for n, a in _calls(r) if n == "query"]
    assert not any(re.search(r"\bT\d\.", s) for s in sent)  # no alias, the recoveries' wrong queries included
    assert any(re.search(r"\bT\d\.", json.loads(a)["sql"]) for r in alias.records for n, a in _calls(r) if n == "query")
    aliased = [r for r in table.records if r["kind"] == "recovery" and
               re.search(r"no such column: \w+\.", next(m["content"] for m in r["messages"] if m["role"] == "tool"
                                                         and m["content"].startswith("Error")))]  # fmt: skip
    assert aliased  # the wrong-qualifier recovery still plays, now as `airport.name` for `flight.name`
    with pytest.raises(ValueError, match="qualify"):
        SFTDataConfig(qualify="T1")
