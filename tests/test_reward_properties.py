"""Guards the reward invariants as properties over call sequences: answering never loses, nothing can be
farmed (cosmetic query variants are not new), progress is the documented terminal bonus, binary is correctness.

Each property runs at the default weights (`-k default`) and at a few random valid weights. Sequences are
drawn by hypothesis from a call alphabet over the fixture database: table tools, the gold query and its
cosmetic variants, other and failing queries, a family of distinct queries to farm with, malformed calls.
"""

from __future__ import annotations

import random

import pytest
from fixtures_env import Q_JOIN, concert_db_dir  # noqa: F401  (fixture)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlenv.env.environment import EnvConfig, SQLEnv
from sqlenv.env.rewards import RewardConfig
from sqlenv.env.sandbox import Sandbox
from sqlenv.env.similarity import result_similarity
from sqlenv.env.verifier import format_answer
from sqlenv.types import db_file

Q = Q_JOIN
BUDGET = EnvConfig().step_budget
GOLD = Q.gold_sql
COSMETIC = [  # the gold query written differently: same rows, so never a "new" result
    GOLD.lower(),
    GOLD.replace(" ", "\n  "),
    "-- the singers of 2014\n" + GOLD,
    "/* look */ " + GOLD,
    GOLD + " LIMIT 1000",
    GOLD + ";",
    GOLD.replace("SELECT DISTINCT s.name", "SELECT DISTINCT s.name AS singer_name"),
    GOLD.replace("s.name", "S.NAME").replace("SELECT", "select"),
]
OTHER = [
    ("describe", {"table_name": "singer"}),
    ("describe", {"table_name": "concert"}),
    ("sample", {"table_name": "singer_in_concert"}),
    ("describe", {"table_name": "nope"}),
    ("query", {"sql": "SELECT name FROM singer"}),
    ("query", {"sql": "SELECT count(*) FROM singer"}),
    ("query", {"sql": "SELECT broken FROM"}),
    ("query", {"bad": "argument"}),
    ("frobnicate", {"x": "1"}),
]
QUERIES = [("query", {"sql": sql}) for sql in (GOLD, *COSMETIC)]
FARM = st.integers(0, 119).map(lambda i: ("query", {"sql": f"SELECT n FROM numbers WHERE n = {i}"}))  # all new
CALL = st.one_of(st.sampled_from(OTHER + QUERIES), FARM)
WRONG = [("answer", {"value": "nobody"}), ("answer", {"value": ""}), ("answer", {"value": "Timbaland"})]


def _random_valid(seed: int) -> RewardConfig:
    rng = random.Random(seed)
    weight = rng.uniform(0.5, 2.0)
    step = -rng.uniform(0.0, 0.05)
    return RewardConfig(
        correctness_weight=weight,
        progress_weight=rng.uniform(0.0, 0.3),
        new_query_bonus=rng.uniform(0.0, -step),
        step_cost=step,
        repeat_penalty=-rng.uniform(0.0, 0.5),
        repeat_window=rng.randint(0, 5),
        post_episode_penalty=-rng.uniform(0.0, 0.5),
        format_reward=rng.uniform(-step, 0.3),
        shaping_bound=rng.uniform(0.0, 0.49) * weight,
    )


CONFIGS = {"default": RewardConfig, **{f"random{s}": (lambda s=s: _random_valid(s)) for s in range(3)}}
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(params=list(CONFIGS), scope="module")
def config(request) -> RewardConfig:
    return CONFIGS[request.param]()


@pytest.fixture(scope="module")
def right(concert_db_dir):  # noqa: F811
    with Sandbox(db_file(concert_db_dir, Q.db_id)) as box:
        gold = box.execute(GOLD)
    return ("answer", {"value": format_answer(gold.columns, gold.rows)})


def play(db_dir, config: RewardConfig, calls) -> SQLEnv:
    env = SQLEnv(db_dir, EnvConfig(step_budget=BUDGET, rewards=config))
    env.reset(Q)
    for tool, arguments in calls:
        env.step(tool, arguments)
    return env


@PROPERTY
@given(
    prefix=st.lists(CALL, max_size=BUDGET - 1),
    rest=st.lists(CALL, min_size=BUDGET, max_size=BUDGET),
    after=st.lists(st.one_of(CALL, st.sampled_from(WRONG)), max_size=3),
    wrong=st.sampled_from(WRONG),
)
def test_answering_never_loses(concert_db_dir, config, prefix, rest, after, wrong):  # noqa: F811
    """prefix + answer(wrong) >= prefix then stopping, and >= prefix + calls until the budget is used up."""
    answered = play(concert_db_dir, config, [*prefix, wrong])
    assert answered.answered and not answered.correct
    stopped = play(concert_db_dir, config, prefix)
    exhausted = play(concert_db_dir, config, [*prefix, *rest[: BUDGET - len(prefix)], *after])
    assert exhausted.budget_exhausted and not exhausted.answered
    assert answered.total_reward >= stopped.total_reward - 1e-9
    assert answered.total_reward >= exhausted.total_reward - 1e-9


@PROPERTY
@given(
    lost=st.lists(CALL, max_size=BUDGET + 2),
    lost_answer=st.sampled_from([None, *WRONG]),
    won=st.lists(CALL, max_size=BUDGET - 1),
    after=st.lists(st.one_of(CALL, st.sampled_from(WRONG)), max_size=4),
)
def test_nothing_pays_like_a_correct_answer(concert_db_dir, config, right, lost, lost_answer, won, after):  # noqa: F811
    """The best episode without a correct answer totals below the worst correct one (calls after the end included)."""
    calls = lost[:BUDGET - 1] + [lost_answer] + after if lost_answer else lost + after
    without = play(concert_db_dir, config, calls)
    assert not without.correct
    correct = play(concert_db_dir, config, [*won, right, *after])
    assert correct.correct
    assert without.total_reward < correct.total_reward
    assert without.total_reward <= config.shaping_bound + 1e-9
    assert correct.total_reward >= config.correctness_weight - config.shaping_bound - 1e-9


@pytest.mark.parametrize("variant", COSMETIC)
def test_cosmetic_variants_are_not_new(concert_db_dir, config, variant):  # noqa: F811
    env = play(concert_db_dir, config, [("query", {"sql": GOLD})])
    result = env.step("query", {"sql": variant})
    assert not result.observation.startswith("Error"), result.observation
    assert result.rewards["operational"] == pytest.approx(config.step_cost)  # the step cost, no bonus


def test_distinct_results_are_new(concert_db_dir, config):  # noqa: F811
    env = play(concert_db_dir, config, [])
    earned = [env.step(*call).rewards["operational"] for call in QUERIES[:1] + [OTHER[4], OTHER[5]]]
    assert earned == pytest.approx([config.step_cost + config.new_query_bonus] * 3)


@PROPERTY
@given(calls=st.lists(CALL, max_size=BUDGET - 1), answer=st.sampled_from([None, *WRONG, "right"]))
def test_progress_is_the_terminal_bonus_its_docstring_names(concert_db_dir, config, right, calls, answer):  # noqa: F811
    """progress = weight × similarity(last successful query, gold) when the episode is answered, else 0."""
    end = [] if answer is None else [right if answer == "right" else answer]
    env = play(concert_db_dir, config, [*calls, *end])
    expected = 0.0
    if env.answered:
        with Sandbox(db_file(concert_db_dir, Q.db_id)) as box:
            gold = box.execute(GOLD).rows
            results = [box.execute(args["sql"]) for tool, args in calls if tool == "query" and "sql" in args]
        last = [r for r in results if r.ok]
        phi = result_similarity(last[-1].rows, gold) if last else 0.0
        expected = config.progress_weight * phi
    components = env.reward_components
    assert components["progress"] == pytest.approx(expected)
    assert env.total_reward == pytest.approx(sum(components.values()))


@PROPERTY
@given(calls=st.lists(st.one_of(CALL, st.sampled_from(WRONG)), max_size=BUDGET + 3), answer_right=st.booleans())
def test_binary_mode_is_correctness_alone(concert_db_dir, right, calls, answer_right):  # noqa: F811
    sequence = [right, *calls] if answer_right else calls
    env = play(concert_db_dir, RewardConfig(mode="binary"), sequence)
    assert env.total_reward == (1.0 if env.correct else 0.0)


@pytest.mark.parametrize(
    "weights, message",
    [
        ({"new_query_bonus": 0.02}, "a query must never pay for itself"),
        ({"format_reward": 0.0}, "answering must never cost more than it pays"),
        ({"shaping_bound": 0.5}, "shaping must never outweigh correctness"),
        ({"repeat_penalty": 0.1}, "must be <= 0"),
        ({"mode": "sparse"}, "mode must be one of"),
    ],
)
def test_weights_that_break_an_invariant_are_refused(weights, message):
    with pytest.raises(ValueError, match=message):
        RewardConfig(**weights)
