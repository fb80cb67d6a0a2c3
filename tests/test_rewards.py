"""Guards the reward components: each named function's value, the repeat window and call identity."""

import pytest

from sqlenv import rewards
from sqlenv.rewards import COMPONENTS, RewardConfig

CFG = RewardConfig()


def test_defaults_match_contract():
    assert CFG == RewardConfig(
        correctness_weight=1.0, progress_weight=0.1, new_query_bonus=0.02, step_cost=-0.01,
        repeat_penalty=-0.2, repeat_window=3, post_episode_penalty=-0.3, format_reward=0.0,
    )
    assert COMPONENTS == ("correctness", "progress", "operational", "repeat_penalty", "post_episode_penalty", "format")
    assert rewards.zero_components() == dict.fromkeys(COMPONENTS, 0.0)


@pytest.mark.parametrize(
    "value, expected",
    [
        (rewards.correctness(True, CFG), 1.0),
        (rewards.correctness(False, CFG), 0.0),
        (rewards.correctness(True, RewardConfig(correctness_weight=2.0)), 2.0),
        (rewards.progress(0.5, 0.0, CFG), 0.05),
        (rewards.progress(0.2, 0.5, CFG), -0.03),
        (rewards.progress(1.0, 1.0, CFG), 0.0),
        (rewards.operational(True, CFG), 0.01),
        (rewards.operational(False, CFG), -0.01),
        (rewards.post_episode_penalty(CFG), -0.3),
        (rewards.format_reward(True, CFG), 0.0),
        (rewards.format_reward(True, RewardConfig(format_reward=0.1)), 0.1),
        (rewards.format_reward(False, RewardConfig(format_reward=0.1)), 0.0),
    ],
)
def test_component_values(value, expected):
    assert value == pytest.approx(expected)


def test_progress_telescopes_to_final_potential():
    phis = [0.0, 0.3, 0.9, 0.1, 0.9, 0.6]  # oscillating between queries earns nothing extra
    total = sum(rewards.progress(b, a, CFG) for a, b in zip(phis, phis[1:]))
    assert total == pytest.approx(CFG.progress_weight * phis[-1])


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
    with pytest.raises(ValueError):
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


def test_from_dict_rejects_unknown_keys():
    assert RewardConfig.from_dict({"step_cost": -0.02}).step_cost == -0.02
    with pytest.raises(ValueError, match="unknown reward config key"):
        RewardConfig.from_dict({"step_cots": -0.02})
