"""Guards SQLEnv: every tool and error path, budget, post-episode and repeat penalties, reward totals."""

import pytest
from fixtures_env import Q_BROKEN, Q_COUNT, Q_FRANCE, Q_JOIN, concert_db_dir  # noqa: F401  (fixture)

from sqlenv.env.environment import (
    TOOL_PARAMS,
    EnvConfig,
    GoldQueryError,
    SQLEnv,
    shared_sandbox,
)
from sqlenv.env.rewards import COMPONENTS, RewardConfig
from sqlenv.env.sandbox import SandboxError
from sqlenv.env.verifier import format_answer
from sqlenv.types import Question


@pytest.fixture
def env(concert_db_dir):
    e = SQLEnv(concert_db_dir)
    e.reset(Q_COUNT)
    return e


def test_reset_shows_only_table_names(concert_db_dir):
    env = SQLEnv(concert_db_dir)
    obs = env.reset(Q_COUNT)
    assert obs == "\n\nTables in the database: concert, numbers, singer, singer_in_concert."
    assert env.tables == ["concert", "numbers", "singer", "singer_in_concert"]
    assert (env.steps, env.done, env.answered, env.total_reward) == (0, False, False, 0.0)
    assert env.reward_components == dict.fromkeys(COMPONENTS, 0.0)


@pytest.mark.parametrize(
    "tool, arguments, expected_parts",
    [
        ("describe", {"table_name": "singer"}, ["Table singer (5 rows)", "  singer_id INTEGER PRIMARY KEY", "  age INTEGER"]),
        ("describe", {"table_name": '"SINGER_in_concert"'}, ["Foreign keys:", "  singer_id -> singer.singer_id",
                                                              "  concert_id INTEGER PRIMARY KEY"]),
        ("sample", {"table_name": "singer"}, ["singer_id | name | country | age", "1 | Joe Sharp | Netherlands | 52",
                                              "(3 rows)"]),
        ("query", {"sql": "SELECT count(*) FROM singer"}, ["count(*)\n5\n(1 row)"]),
        ("query", {"sql": "SELECT name FROM singer WHERE age > 100"}, ["name\n(0 rows)"]),
        ("query", {"sql": "SELECT * FROM numbers"}, ["n | label\n0 | n0", "49 | n49\n\u2026 71 more rows (121 rows in total)"]),
        ("query", {"sql": "SELECT label FROM numbers WHERE n = 1000"}, ["label\ntwo\\nlines\n(1 row)"]),
        ("query", '{"sql": "SELECT 1 AS one"}', ["one\n1\n(1 row)"]),  # arguments as a JSON string
    ],
)
def test_tools_render_observations(env, tool, arguments, expected_parts):
    result = env.step(tool, arguments)
    assert not result.done
    for part in expected_parts:
        assert part in result.observation
    assert not result.observation.startswith("Error:")


@pytest.mark.parametrize(
    "tool, arguments, expected, parse_failure",
    [
        ("drop_table", {"table_name": "singer"}, "Error: unknown tool 'drop_table'. Available tools: describe, sample, "
         "query, answer.", True),
        (None, {}, "Error: unknown tool None.", True),
        ("describe", {"table_name": "singers"}, "Error: unknown table 'singers'. Tables in this database: concert, "
         "numbers, singer, singer_in_concert.", False),
        ("sample", {"table_name": "nope"}, "Error: unknown table 'nope'.", False),
        ("describe", {}, "Error: missing argument 'table_name'. Usage: describe(table_name).", True),
        ("describe", None, "Error: missing argument 'table_name'.", True),
        ("query", {"sql": "SELECT 1", "limit": 5}, "Error: unexpected argument 'limit'. Usage: query(sql).", True),
        ("query", {"query": "SELECT 1"}, "Error: missing argument 'sql'; unexpected argument 'query'.", True),
        ("query", {"sql": ["SELECT 1"]}, "Error: argument 'sql' of query must be a string, got an array.", True),
        ("query", {"sql": None}, "Error: argument 'sql' of query must be a string, got null.", True),
        ("answer", {"value": True}, "Error: argument 'value' of answer must be a string, got a boolean.", True),
        ("describe", {"table_name": {"name": "singer"}}, "Error: argument 'table_name' of describe must be a string, "
         "got an object.", True),
        ("query", '{"sql": "SELECT 1"', "Error: malformed call: the arguments are not valid JSON", True),
        ("query", ["SELECT 1"], "Error: malformed call: the arguments must be a JSON object like {\"sql\": \"...\"}.",
         True),
        ("query", {"sql": "SELECT nope FROM singer"}, "Error: no such column: nope", False),
        ("query", {"sql": "  ; "}, "Error: empty query", False),
        ("query", {"sql": "DELETE FROM singer"}, "Error: not authorized", False),
        ("query", {"sql": "SELECT 1; SELECT 2"}, "Error: ", False),
    ],
)
def test_model_mistakes_become_error_text(env, tool, arguments, expected, parse_failure):
    result = env.step(tool, arguments)
    assert result.observation.startswith(expected), result.observation
    assert not result.done and env.steps == 1
    assert env.parse_failures == int(parse_failure)
    assert result.rewards["operational"] == pytest.approx(-0.01)  # no bonus for a failed call


def test_numbers_are_accepted_as_strings(env):
    assert env.step("describe", {"table_name": 7}).observation.startswith("Error: unknown table '7'")
    result = env.step("answer", {"value": 5})
    assert env.answered and env.correct and env.answer == "5"
    assert result.rewards["correctness"] == 1.0


def test_scripted_correct_episode_rewards(env):
    steps = [
        env.step("describe", {"table_name": "singer"}),
        env.step("query", {"sql": Q_COUNT.gold_sql}),
        env.step("answer", {"value": format_answer(["count(*)"], [(5,)])}),
    ]
    assert [s.done for s in steps] == [False, False, True]
    assert steps[-1].observation.startswith("Answer recorded: ")
    assert "The episode is over" in steps[-1].observation
    assert env.correct and env.answered and env.steps == 3
    comps = env.reward_components
    assert comps["correctness"] == 1.0
    assert comps["progress"] == pytest.approx(0.1)          # with the answer: Φ of the last query = 1
    assert comps["operational"] == pytest.approx(3 * -0.01 + 0.005)
    assert comps["format"] == pytest.approx(0.1)
    assert comps["repeat_penalty"] == comps["post_episode_penalty"] == comps["bound"] == 0.0
    assert env.total_reward == pytest.approx(1.175)
    assert sum(s.reward for s in steps) == pytest.approx(env.total_reward)


def test_wrong_answer_gets_no_correctness_and_neutral_text(concert_db_dir):
    right, wrong = SQLEnv(concert_db_dir), SQLEnv(concert_db_dir)
    for e in (right, wrong):
        e.reset(Q_COUNT)
    ok = right.step("answer", {"value": "5"}).observation
    bad = wrong.step("answer", {"value": "42"}).observation
    assert not wrong.correct and wrong.answered and wrong.done
    assert wrong.reward_components["correctness"] == 0.0
    assert ok.replace("5", "42") == bad  # the observation does not leak the verdict
    assert wrong.verdict_reason


def test_ordered_question_checks_row_order(concert_db_dir):
    env = SQLEnv(concert_db_dir)
    env.reset(Q_FRANCE)
    good = format_answer(["name"], [("John Nizinik",), ("Rose White",), ("Justin Brown",)])
    env.step("answer", {"value": good})
    assert env.correct
    env.reset(Q_FRANCE)
    env.step("answer", {"value": format_answer(["name"], [("Justin Brown",), ("Rose White",), ("John Nizinik",)])})
    assert not env.correct


def test_post_episode_calls_are_penalised_and_counted(env):
    env.step("answer", {"value": "5"})
    for tool, args in [("query", {"sql": "SELECT 1"}), ("answer", {"value": "5"}), ("bogus", {})]:
        result = env.step(tool, args)
        assert result.done and result.observation.startswith("Error: the episode is over (the answer was already")
        assert result.rewards["post_episode_penalty"] == -0.3 and set(result.rewards) <= {"post_episode_penalty", "bound"}
    assert env.calls_after_end == 3 and env.steps == 1
    assert env.reward_components["post_episode_penalty"] == pytest.approx(-0.9)
    # shaping -0.01 + 0.1 - 0.9 = -0.81 is held at the bound -0.4: the correct answer still dominates
    assert env.reward_components["bound"] == pytest.approx(0.41)
    assert env.total_reward == pytest.approx(1.0 - 0.4)


@pytest.mark.parametrize(
    "calls, penalised",
    [
        ([("describe", "singer"), ("describe", "singer")], [False, True]),
        ([("describe", "singer"), ("describe", "SINGER")], [False, True]),  # normalised
        ([("describe", "singer"), ("sample", "singer"), ("describe", "concert"), ("sample", "concert"),
          ("describe", "singer")], [False, False, False, False, False]),   # 4 calls back: outside the window
        ([("describe", "singer"), ("sample", "singer"), ("describe", "concert"), ("describe", "singer")],
         [False, False, False, True]),                                    # 3 calls back: inside
        ([("query", "SELECT x"), ("query", "SELECT  x ;")], [False, True]),  # failing calls repeat too
    ],
)
def test_repeat_penalty_window(env, calls, penalised):
    got = []
    for tool, arg in calls:
        result = env.step(tool, {TOOL_PARAMS[tool][0]: arg})
        got.append(result.rewards["repeat_penalty"] == -0.2)
    assert got == penalised


def test_new_query_bonus_and_progress_cannot_be_farmed(concert_db_dir):
    env = SQLEnv(concert_db_dir, EnvConfig(rewards=RewardConfig(repeat_window=0)))
    env.reset(Q_JOIN)
    sqls = [Q_JOIN.gold_sql, "SELECT name FROM singer", Q_JOIN.gold_sql, "SELECT name FROM singer", Q_JOIN.gold_sql]
    bonuses = [env.step("query", {"sql": s}).rewards["operational"] for s in sqls]
    # the third query's rows are contained in the second's (all singer names): not new either
    assert bonuses == pytest.approx([-0.005, -0.005, -0.01, -0.01, -0.01])
    assert env.reward_components["progress"] == 0.0  # paid with the answer only
    env.step("answer", {"value": "Timbaland"})
    assert env.reward_components["progress"] == pytest.approx(0.1)  # Φ of the last query (the gold rows) = 1


def test_progress_ignores_failed_queries(env):
    env.step("query", {"sql": "SELECT count(*) FROM singer"})
    env.step("query", {"sql": "SELECT broken FROM"})
    env.step("answer", {"value": "4"})
    assert env.reward_components["progress"] == pytest.approx(0.1)


def test_step_budget_ends_episode_unanswered(concert_db_dir):
    env = SQLEnv(concert_db_dir, EnvConfig(step_budget=3))
    env.reset(Q_COUNT)
    results = [env.step("describe", {"table_name": t}) for t in ("singer", "concert", "numbers")]
    assert [r.done for r in results] == [False, False, True]
    assert "Error: the step budget (3 calls) is used up" in results[-1].observation
    assert results[-1].observation.startswith("Table numbers")  # the call itself still ran
    assert env.budget_exhausted and not env.answered and not env.correct
    late = env.step("answer", {"value": "5"})
    assert late.observation.startswith("Error: the episode is over (the step budget is used up)")
    assert env.calls_after_end == 1 and not env.correct


def test_answer_on_last_budgeted_step_counts(concert_db_dir):
    env = SQLEnv(concert_db_dir, EnvConfig(step_budget=1))
    env.reset(Q_COUNT)
    result = env.step("answer", {"value": "5"})
    assert env.correct and not env.budget_exhausted and "step budget" not in result.observation


def test_format_reward_for_any_answer(concert_db_dir):
    env = SQLEnv(concert_db_dir, EnvConfig(rewards=RewardConfig(format_reward=0.05)))
    env.reset(Q_COUNT)
    env.step("answer", {"value": "wrong"})
    assert env.reward_components["format"] == 0.05 and env.reward_components["correctness"] == 0.0


def test_reset_starts_fresh_episode(env):
    env.step("answer", {"value": "5"})
    env.step("query", {"sql": "SELECT 1"})
    env.reset(Q_JOIN)
    assert (env.steps, env.calls_after_end, env.done, env.answered, env.total_reward) == (0, 0, False, False, 0.0)
    assert env.step("query", {"sql": "SELECT 1"}).rewards["repeat_penalty"] == 0.0


def test_data_problems_raise(concert_db_dir, tmp_path):
    env = SQLEnv(concert_db_dir)
    with pytest.raises(GoldQueryError, match="q_broken"):
        env.reset(Q_BROKEN)
    with pytest.raises(SandboxError):
        env.reset(Question(id="x", db_id="missing", question="?", gold_sql="SELECT 1"))
    with pytest.raises(ValueError, match="db_dir"):
        SQLEnv().reset(Q_COUNT)
    with pytest.raises(RuntimeError, match="before reset"):
        SQLEnv(concert_db_dir).step("query", {"sql": "SELECT 1"})


def test_sandboxes_are_shared_between_instances(concert_db_dir):
    a, b = SQLEnv(concert_db_dir), SQLEnv(concert_db_dir)
    a.reset(Q_COUNT)
    b.reset(Q_JOIN)
    assert a.sandbox is b.sandbox is a.sandbox_for("concert")
    assert shared_sandbox(concert_db_dir / "concert" / "concert.sqlite", a.config.limits) is a.sandbox


def test_explicit_db_path_overrides_db_dir(concert_db_dir):
    env = SQLEnv(None)
    assert env.reset(Q_COUNT, db_path=concert_db_dir / "concert" / "concert.sqlite").startswith("\n\nTables")


def test_summary_and_config_from_dict(env):
    env.step("answer", {"value": "5"})
    s = env.summary()
    assert s["question_id"] == "q_count" and s["correct"] and s["steps"] == 1 and s["reward"] == env.total_reward
    cfg = EnvConfig.from_dict({"step_budget": 5, "rewards": {"repeat_penalty": -0.5}})
    assert cfg.step_budget == 5 and cfg.rewards.repeat_penalty == -0.5
    with pytest.raises(ValueError, match="unknown env config key"):
        EnvConfig.from_dict({"step_budjet": 5})
    with pytest.raises(ValueError):
        EnvConfig(step_budget=0)


def test_database_rebuilt_in_place_is_not_served_stale(tmp_path):
    import os
    import sqlite3

    from fixtures_env import make_concert_db

    path = make_concert_db(tmp_path / "a")
    env = SQLEnv(tmp_path / "a")
    env.reset(Q_COUNT)
    assert env.step("query", {"sql": "SELECT count(*) FROM singer"}).observation == "count(*)\n5\n(1 row)"
    fresh = make_concert_db(tmp_path / "b")
    con = sqlite3.connect(fresh)
    con.execute("INSERT INTO singer VALUES (6, 'New', 'Peru', 20)")
    con.commit()
    con.close()
    os.replace(fresh, path)  # a new file (new inode) at the same path, as a re-run of prepare makes
    env.reset(Q_COUNT)
    assert env.step("query", {"sql": "SELECT count(*) FROM singer"}).observation == "count(*)\n6\n(1 row)"
    assert env.step("answer", {"value": "6"}).rewards["correctness"] == 1.0  # the gold result is fresh too


def test_a_failing_call_sent_again_is_told_to_change(concert_db_dir):
    # The loop the taxonomy counts most: a failing query, a describe, the very same query again.
    env = SQLEnv(concert_db_dir, EnvConfig(loop_notice=True))
    env.reset(Q_COUNT)
    first = env.step("query", {"sql": "SELECT singer_name FROM singer"}).observation
    env.step("describe", {"table_name": "singer"})
    again = env.step("query", {"sql": "SELECT  singer_name FROM singer;"}).observation  # the same call, respaced
    assert first == "Error: no such column: singer_name"
    assert again == first + "\n\nNote: this exact call already failed in this episode. Sending it again gives the same " \
        "error: change it (use the names a describe showed) or try another way."  # fmt: skip
    changed = env.step("query", {"sql": "SELECT name FROM singer WHERE singer_name = 1"}).observation
    assert "Note:" not in changed and env.repeated_failures == 1 and env.summary()["repeated_failures"] == 1
    quiet = SQLEnv(concert_db_dir, EnvConfig(loop_notice=False, budget_notice_at=0))
    quiet.reset(Q_COUNT)
    for _ in range(2):
        obs = quiet.step("query", {"sql": "SELECT singer_name FROM singer"}).observation
    assert obs == first and quiet.repeated_failures == 1


def test_the_last_calls_say_how_many_are_left(concert_db_dir):
    env = SQLEnv(concert_db_dir, EnvConfig(step_budget=4, budget_notice_at=2))
    env.reset(Q_COUNT)
    obs = [env.step("query", {"sql": f"SELECT {i}"}).observation for i in range(1, 5)]
    assert obs[0] == "1\n1\n(1 row)"
    assert obs[1].endswith("\n\nNote: 2 calls are left in this episode. Answer with your best value before they run out.")
    assert obs[2] == "3\n3\n(1 row)\n\nNote: 1 call is left in this episode. Answer with your best value before they run out."
    assert "Error: the step budget (4 calls) is used up" in obs[3] and "Note:" not in obs[3]
    env = SQLEnv(concert_db_dir, EnvConfig(step_budget=4, budget_notice_at=3, answer="sql"))
    env.reset(Q_COUNT)
    assert env.step("describe", {"table_name": "singer"}).observation.endswith(
        "\n\nNote: 3 calls are left in this episode. Answer with your best sql before they run out.")
    assert "Note:" not in env.step("answer", {"sql": "SELECT count(*) FROM singer"}).observation  # the end says so itself
    with pytest.raises(ValueError, match="budget_notice_at"):
        EnvConfig(budget_notice_at=-1)


def test_notices_do_not_reach_the_cells_a_result_showed():
    from sqlenv.env.prompts import budget_notice, result_cells

    assert result_cells("a | b\n1 | 2\n(1 row)" + budget_notice(1)) == ["1", "2"]
    assert result_cells("a\n1\n(1 row)\n\nError: the step budget (3 calls) is used up; the episode is over.") == ["1"]


def test_error_hints_say_where_a_missing_name_lives(concert_db_dir):
    # The commonest first error on real databases: a column under the alias of a table that lacks it, and the
    # failing query then sent again unchanged. With `error_hints` the error says which tables have the column.
    env = SQLEnv(concert_db_dir, EnvConfig(error_hints=True))
    env.reset(Q_COUNT)

    def query(sql):
        return env.step("query", {"sql": sql}).observation

    assert query("SELECT T1.singer_id FROM concert AS T1") == (
        "Error: no such column: T1.singer_id\n\nNote: a column singer_id is in: singer, singer_in_concert. "
        "Use the alias of that table, or join it.")  # fmt: skip
    assert query("SELECT Country FROM concert").endswith("a column Country is in: singer. Use the alias of that "
                                                         "table, or join it.")  # fmt: skip
    assert query("SELECT singer_name FROM singer").endswith(  # in no table: the names spelled like it
        "\n\nNote: no table has a column singer_name; names like it: singer.name, singer.singer_id, singer_in_concert.singer_id.")
    assert query("SELECT zzz FROM singer") == "Error: no such column: zzz"  # nothing like it: the error alone
    assert query("SELECT * FROM song").endswith(
        "\n\nNote: tables in this database: concert, numbers, singer, singer_in_concert.")
    assert query("SELECT 1 FROM") == "Error: incomplete input"  # not a name: no note
    from sqlenv.env.prompts import result_cells, without_notes

    failed = query("SELECT T1.singer_id FROM concert AS T1")
    assert without_notes(failed) == "Error: no such column: T1.singer_id" and result_cells(failed) == []
    off = SQLEnv(concert_db_dir)  # off by default: SQLite's message as it is
    off.reset(Q_COUNT)
    assert off.step("query", {"sql": "SELECT T1.singer_id FROM concert AS T1"}).observation == (
        "Error: no such column: T1.singer_id")
