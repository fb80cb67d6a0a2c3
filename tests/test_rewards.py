"""Guards the reward components: each named function's value, the bound, the repeat window and call identity."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqlenv.env import rewards
from sqlenv.env.rewards import COMPONENTS, RewardConfig

CFG = RewardConfig()


def test_defaults_equal_params_yaml():
    """The library's defaults are the pipeline's (params.yaml): tests of the defaults test the real run."""
    from pathlib import Path

    import yaml

    params = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text())
    assert CFG == RewardConfig.from_dict(params["rewards"])
    assert COMPONENTS == ("correctness", "progress", "operational", "repeat_penalty", "post_episode_penalty",
                          "format", "bound")
    assert rewards.zero_components() == dict.fromkeys(COMPONENTS, 0.0)


@pytest.mark.parametrize(
    "value, expected",
    [
        (rewards.correctness(True, CFG), 1.0),
        (rewards.correctness(False, CFG), 0.0),
        (rewards.correctness(True, RewardConfig(correctness_weight=2.0)), 2.0),
        (rewards.progress(0.5, CFG), 0.05),
        (rewards.progress(0.0, CFG), 0.0),
        (rewards.operational(True, CFG), -0.005),
        (rewards.operational(False, CFG), -0.01),
        (rewards.post_episode_penalty(CFG), -0.3),
        (rewards.format_reward(True, CFG), 0.1),
        (rewards.format_reward(False, CFG), 0.0),
        (rewards.format_reward(True, RewardConfig(format_reward=0.05)), 0.05),
    ],
)
def test_component_values(value, expected):
    assert value == pytest.approx(expected)


def test_bound_clips_the_shaping_sum_both_ways():
    sums = dict.fromkeys(COMPONENTS, 0.0)
    sums.update(correctness=1.0, post_episode_penalty=-0.9, format=0.1)  # shaping -0.8: clipped to -0.4
    assert rewards.bound(sums, CFG) == pytest.approx(0.4)
    sums["bound"] = 0.4
    assert rewards.bound(sums, CFG) == pytest.approx(0.0)  # already bounded: nothing more to add
    sums.update(post_episode_penalty=0.0, operational=0.7, bound=0.4)  # shaping +0.8 (no real run gets there)
    assert rewards.bound(sums, CFG) == pytest.approx(-0.4 - 0.4)
    assert rewards.bound(dict.fromkeys(COMPONENTS, 0.0) | {"format": 0.1}, CFG) == 0.0  # inside: untouched


_SUMS = st.floats(-1.0, 1.0) | st.sampled_from([0.0, -0.0, 0.4, -0.4, 0.25, 1e-17])


@settings(max_examples=500, deadline=None)
@given(st.fixed_dictionaries({c: _SUMS for c in COMPONENTS}), st.sampled_from([0.0, 0.1, 0.25, 0.4, 0.49]))
def test_bound_is_the_clip_formula_to_the_bit(sums, limit):
    """bound() is computed without min/max and a generator (it runs every step); the value, the sign
    of a zero included, is clip(shaping) - shaping - bound with the shaping summed in component order."""
    shaping = sum(sums[c] for c in rewards.SHAPING)
    expected = min(max(shaping, -limit), limit) - shaping - sums["bound"]
    got = rewards.bound(sums, RewardConfig(shaping_bound=limit))
    assert repr(got) == repr(expected)


_TERM = st.sampled_from([0.0, -0.01, -0.005, 0.005, -0.2, -0.3, 0.1, 1.0, 2.0]) | st.floats(-0.5, 0.5)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(COMPONENTS[:-1]), _TERM, max_size=4), max_size=20),
       st.sampled_from([0.0, 0.1, 0.25, 0.4, 0.49]))  # fmt: skip
def test_bound_with_the_episodes_reach_is_bound_without_it(steps, limit):
    """SQLEnv passes the sum of |every term earned| (`reach`) so bound() can skip its sum below the bound:
    step after step, the clip it returns is the one computed without reach, to the bit."""
    config = RewardConfig(shaping_bound=limit)
    sums, reach = dict.fromkeys(COMPONENTS, 0.0), 0.0
    for earned in steps:
        for name, value in earned.items():
            sums[name] += value
            reach += abs(value)
        got = rewards.bound(sums, config, reach)
        assert repr(got) == repr(rewards.bound(sums, config))
        sums["bound"] += got


def test_bound_with_reach_clips_what_rounding_puts_over_the_bound():
    """Summed per component, these terms come to 0.35500000000000004; summed step by step (reach) to 0.355.
    At a bound of 0.355 the shaping is over it by rounding alone: reach at the bound must not skip the clip."""
    config = RewardConfig(shaping_bound=0.355)
    sums, reach = dict.fromkeys(COMPONENTS, 0.0), 0.0
    for name, value in [("operational", 0.13), ("repeat_penalty", 0.005), ("repeat_penalty", 0.05), ("progress", 0.17)]:
        sums[name] += value
        reach += value
    assert reach == 0.355 and rewards.bound(sums, config) < 0
    assert rewards.bound(sums, config, reach) == rewards.bound(sums, config)


def test_binary_mode_applies_correctness_alone():
    binary = RewardConfig(mode="binary").applied
    assert binary.correctness_weight == 1.0
    assert [rewards.operational(True, binary), rewards.format_reward(True, binary), rewards.progress(1.0, binary),
            rewards.post_episode_penalty(binary), rewards.repeat_penalty(("a", "b"), [("a", "b")], binary)] == [0] * 5
    assert CFG.applied is CFG


def test_new_result_is_a_multiset_not_contained_in_an_earlier_one():
    seen = [Counter([(1,), (2,), (2,)])]
    assert not rewards.is_new_result([(2,), (1,)], seen)  # same rows, another order
    assert not rewards.is_new_result([(2,), (2,)], seen)  # a subset (an added LIMIT)
    assert rewards.is_new_result([(2,), (2,), (2,)], seen)  # more copies than seen
    assert rewards.is_new_result([(3,)], seen)
    assert rewards.is_new_result([], [])  # the first result is always new


_CELLS = st.one_of(st.integers(-2, 2), st.sampled_from(["a", "b", ""]), st.none(), st.sampled_from([1.0, 0.5]))
_RESULTS = st.lists(st.tuples(_CELLS) | st.tuples(_CELLS, _CELLS), max_size=5)


@settings(max_examples=400, deadline=None)
@given(st.lists(_RESULTS, max_size=6), st.data())
def test_seen_results_decides_as_is_new_result(results, data):
    """The env's cheaper bookkeeping (short-cuts, counting only when needed) gives is_new_result's verdict
    on every query of an episode; repeats of earlier results (the same list, reordered, cut short) included."""
    seen_counters, seen = [], rewards.SeenResults()
    for first in results:
        for rows in [first] + ([data.draw(st.sampled_from(results))] if results else []):
            if rows and data.draw(st.booleans()):
                rows = data.draw(st.permutations(rows))[: data.draw(st.integers(0, len(rows)))]
            expected = rewards.is_new_result(rows, seen_counters)
            assert seen.add_if_new(rows) == expected
            if expected:
                seen_counters.append(Counter(rows))
            assert len(seen) == len(seen_counters)


A, B, C, D = ("query", "sql=a"), ("query", "sql=b"), ("describe", "table_name=c"), ("sample", "table_name=d")


@pytest.mark.parametrize(
    "key, recent, expected",
    [
        (A, [], 0.0),
        (A, [A], -0.2),
        (A, [A, B, C], -0.2),        # three calls back: still inside the window
        (A, [A, B, C, D], 0.0),      # four calls back: outside
        (B, [A, C, D], 0.0),
    ],
)
def test_repeat_window(key, recent, expected):
    assert rewards.repeat_penalty(key, recent, CFG) == expected


def test_repeat_window_zero_disables_and_negative_rejected():
    assert rewards.repeat_penalty(A, [A], RewardConfig(repeat_window=0)) == 0.0
    with pytest.raises(ValueError, match="repeat_window"):
        RewardConfig(repeat_window=-1)


@pytest.mark.parametrize(
    "a, b, same",
    [
        (("query", {"sql": "SELECT  1;"}), ("query", {"sql": "SELECT 1"}), True),
        (("query", {"sql": "SELECT\n1 ;"}), ("query", {"sql": "SELECT 1"}), True),
        (("query", {"sql": "SELECT 'A'"}), ("query", {"sql": "SELECT 'a'"}), False),  # literals are case-sensitive
        (("describe", {"table_name": "Singer"}), ("describe", {"table_name": '"singer"'}), True),
        (("describe", {"table_name": "singer"}), ("sample", {"table_name": "singer"}), False),
        (("answer", {"value": " 3 "}), ("answer", {"value": "3"}), True),
    ],
)
def test_call_identity(a, b, same):
    assert (rewards.call_key(*a) == rewards.call_key(*b)) is same


def test_every_whitespace_character_but_space_is_unprintable():
    """normalise_argument skips split/join for printable text without doubled, leading or trailing spaces:
    that is the identity only if str.split splits at no printable character other than " "."""
    import sys

    splitting = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    assert len(splitting) > 20 and [c for c in splitting if c.isprintable()] == [" "]


@settings(max_examples=1000, deadline=None)
@given(st.text(st.sampled_from("ab ;'\"`[]\t\n\r\x0b\x0c\x1c\x85\xa0\u1680\u2028\u3000\u200b"), max_size=12),
       st.sampled_from(["query", "describe", "sample", "answer"]))  # fmt: skip
def test_normalise_argument_is_split_join_then_the_tools_rule(value, tool):
    text = " ".join(value.split())
    expected = {"query": text.rstrip("; "), "describe": text.strip("\"'`[]").casefold()}
    expected["sample"] = expected["describe"]
    assert rewards.normalise_argument(tool, value) == expected.get(tool, text)


def test_from_dict_rejects_unknown_keys():
    assert RewardConfig.from_dict({"step_cost": -0.02}).step_cost == -0.02
    with pytest.raises(ValueError, match="unknown reward config key"):
        RewardConfig.from_dict({"step_cots": -0.02})
