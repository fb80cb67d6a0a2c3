"""Guards the statistics: Wilson intervals, exact McNemar and Newcombe's paired interval against published values."""

import math

import pytest
from scipy.stats import binomtest

from sqlenv.eval.stats import mcnemar_exact, paired_difference, wilson_interval


def outcomes(both: int, only_a: int, only_b: int, neither: int) -> tuple[list[bool], list[bool]]:
    """Paired outcome lists with the given 2x2 table, interleaved so order cannot matter."""
    a = [True] * both + [True] * only_a + [False] * only_b + [False] * neither
    b = [True] * both + [False] * only_a + [True] * only_b + [False] * neither
    order = sorted(range(len(a)), key=lambda i: (i * 7919) % len(a))
    return [a[i] for i in order], [b[i] for i in order]


@pytest.mark.parametrize(
    "k, n, low, high",
    [
        # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table II, method 3.
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_matches_published_values(k, n, low, high):
    got = wilson_interval(k, n)
    assert got == pytest.approx((low, high), abs=5e-5)


def test_wilson_10_of_50_by_hand():
    # (p + z^2/2n ± z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), z = 1.959964
    z, p, n = 1.959963984540054, 0.2, 50
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    expected = ((centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n))
    assert wilson_interval(10, 50) == pytest.approx(expected, abs=1e-12)
    assert wilson_interval(10, 50) == pytest.approx((0.1124, 0.3304), abs=5e-5)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


def test_mcnemar_exact_is_a_binomial_test_on_discordant_pairs():
    a, b = outcomes(36, 12, 2, 0)
    b01, b10, p = mcnemar_exact(a, b)
    assert (b01, b10) == (2, 12)
    assert p == pytest.approx(2 * (1 + 14 + 91) / 2**14, abs=1e-15)  # 2 * P(X <= 2), X ~ Bin(14, 1/2)
    assert p == pytest.approx(binomtest(2, 14, 0.5).pvalue)
    assert mcnemar_exact(b, a)[:2] == (12, 2) and mcnemar_exact(b, a)[2] == pytest.approx(p)
    assert mcnemar_exact(*outcomes(3, 0, 0, 4)) == (0, 0, 1.0)
    assert mcnemar_exact(*outcomes(0, 1, 1, 0))[2] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        mcnemar_exact([True], [True, False])


@pytest.mark.parametrize(
    "table, low, high",
    [
        # Newcombe (1998), "Improved confidence intervals for the difference between binomial proportions
        # based on paired data", method 10 (as reproduced in the R package propint's tests).
        ((36, 12, 2, 0), 0.0569, 0.3404),
        ((18, 12, 2, 18), 0.0562, 0.3290),
        ((53, 0, 0, 1), -0.0729, 0.0729),
    ],
)
def test_paired_difference_matches_newcombe(table, low, high):
    a, b = outcomes(*table)
    got = paired_difference(a, b)
    both, only_a, only_b, neither = table
    assert got["difference"] == pytest.approx((only_a - only_b) / sum(table))
    assert (got["low"], got["high"]) == pytest.approx((low, high), abs=5e-5)
    assert got["n"] == sum(table) and got["method"] == "newcombe10"
    swapped = paired_difference(b, a)
    assert (swapped["low"], swapped["high"]) == pytest.approx((-got["high"], -got["low"]), abs=1e-12)


def test_paired_difference_edges():
    same = paired_difference([True] * 10, [True] * 10)
    assert same["difference"] == 0.0 and same["low"] < 0 < same["high"]
    extreme = paired_difference([True] * 20, [False] * 20)
    assert extreme["difference"] == 1.0 and 0.0 < extreme["low"] < 1.0 and extreme["high"] == 1.0
    assert paired_difference([], [])["n"] == 0


# ------------------------------------------------------------------------------------ power and bootstrap
def test_exact_mcnemar_power_matches_a_simulation_of_the_test_itself():
    """The exact power is what `mcnemar_exact` rejects on paired samples drawn with that discordance and difference."""
    import numpy as np

    from sqlenv.eval.stats import mcnemar_power

    n, psi, delta, sims = 60, 0.3, 0.15, 3000
    rng = np.random.default_rng(0)
    p_only_a, p_only_b = (psi + delta) / 2, (psi - delta) / 2
    rejected = 0
    for _ in range(sims):
        cells = rng.choice(3, size=n, p=[p_only_a, p_only_b, 1 - psi])  # only a, only b, concordant (both wrong)
        a, b = list(cells == 0), list(cells == 1)
        rejected += mcnemar_exact(a, b)[2] < 0.05
    simulated = rejected / sims
    exact = mcnemar_power(n, psi, delta)
    assert abs(simulated - exact) < 4 * math.sqrt(exact * (1 - exact) / sims), (simulated, exact)
    assert mcnemar_power(200, 0.09, 0.0) <= 0.05  # no difference: the exact test keeps its level


def test_minimum_detectable_difference_is_where_power_crosses():
    from sqlenv.eval.stats import mcnemar_power, minimum_detectable_difference, paired_questions_needed

    mde = minimum_detectable_difference(200, 0.09)
    assert mcnemar_power(200, 0.09, mde) >= 0.8 > mcnemar_power(200, 0.09, mde - 0.003)
    assert 0.04 < mde < 0.08  # the reference headline: 18 of 200 questions split the policies
    needed = paired_questions_needed(0.05, 0.09)
    assert mcnemar_power(needed, 0.09, 0.05) >= 0.8 and 200 < needed < 400
    assert minimum_detectable_difference(10, 0.1) is None  # one discordant question in expectation: hopeless
    assert paired_questions_needed(0.2, 0.1) is None  # a difference larger than the discordance allows


def test_domain_bootstrap_is_wider_when_one_domain_carries_the_difference():
    """Question-level intervals treat 200 questions as independent; when all of a difference sits in one of five
    domains, resampling domains says how much the result leans on that domain."""
    from sqlenv.eval.stats import cluster_bootstrap_difference

    groups = [f"d{i // 40}" for i in range(200)]
    a = [i < 20 for i in range(200)]  # a right on 20 questions, all in domain d0
    b = [False] * 200
    boot = cluster_bootstrap_difference(a, b, groups, resamples=4000, seed=1)
    question_level = paired_difference(a, b)
    assert boot["difference"] == pytest.approx(0.1) and boot["groups"] == 5
    assert boot["low"] <= 0.0 < question_level["low"]  # domains: 0 is inside; questions: it is not
    assert cluster_bootstrap_difference(a, b, groups, resamples=4000, seed=1) == boot  # deterministic per seed
    spread = [f"d{i % 5}" for i in range(200)]  # the same difference spread over every domain
    assert cluster_bootstrap_difference(a[::-1], b, spread, resamples=4000)["low"] > 0
