"""Intervals and paired tests for accuracies measured on the same questions.

Every policy is evaluated on the same question sets, so two policies' results are *paired*: the
right comparison uses the discordant questions (one policy right, the other wrong), not two
independent proportions.

- `wilson_interval`: Wilson score interval for one accuracy (statsmodels `proportion_confint`).
- `mcnemar_exact`: exact McNemar test (statsmodels `mcnemar(exact=True)`: a two-sided binomial test on
  the discordant counts with p = 1/2).
- `paired_difference`: the accuracy difference with Newcombe's (1998) hybrid score interval for paired
  proportions, his method 10, built from the two Wilson intervals and the phi correlation of the 2x2
  table. statsmodels 0.15 has no paired-difference interval (only `confint_proportions_2indep`, for
  independent samples), so the combination step is written out here; tests check it against the values
  Newcombe published.

- `mcnemar_power`, `minimum_detectable_difference`, `paired_questions_needed`: what a paired comparison
  could have detected. Power of the exact McNemar test is computed exactly (no normal approximation):
  with n questions and a discordance rate psi (share of questions exactly one policy gets right), the
  discordant count is Binomial(n, psi), and given D discordant questions the count only a gets right is
  Binomial(D, (psi + delta) / (2 psi)) for a true difference delta; the power sums the probability of
  the test's rejection region over both. The discordance is the observed one (an assumption: a larger
  true difference tends to come with more discordance, so the figures are a guide, not a guarantee).
- `cluster_bootstrap_difference`: a percentile interval for the paired difference that resamples whole
  domains (the held-out unit), not questions: questions of one domain are not independent evidence.
  With a handful of domains the interval itself is rough; it says how much the result leans on which
  domains were held out, which the question-level interval cannot.

What it doesn't do: no multiple-comparison correction (report all pairs, read p-values accordingly).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import binom
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint


def wilson_interval(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials; (0, 1) when n is 0 (nothing is known)."""
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    low, high = proportion_confint(k, n, alpha=alpha, method="wilson")
    return float(low), float(high)


def _paired_table(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int, int, int]:
    """(both right, only a right, only b right, both wrong)."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need equal lengths, got {len(a)} and {len(b)}")
    both = only_a = only_b = neither = 0
    for x, y in zip(a, b):
        if x and y:
            both += 1
        elif x:
            only_a += 1
        elif y:
            only_b += 1
        else:
            neither += 1
    return both, only_a, only_b, neither


def mcnemar_exact(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> tuple[int, int, float]:
    """(b01, b10, p): b01 questions only b got right, b10 only a got right, and the exact two-sided p-value.

    With no discordant question the p-value is 1.0 (the two policies cannot be told apart).
    """
    both, only_a, only_b, neither = _paired_table(a_correct, b_correct)
    if only_a + only_b == 0:
        return only_b, only_a, 1.0
    result = mcnemar([[both, only_a], [only_b, neither]], exact=True)
    return only_b, only_a, float(min(1.0, result.pvalue))


def paired_difference(a_correct: Sequence[bool], b_correct: Sequence[bool], alpha: float = 0.05) -> dict[str, Any]:
    """Accuracy(a) - accuracy(b) on the same questions, with Newcombe's method-10 interval.

    Newcombe, R. G. (1998). Improved confidence intervals for the difference between binomial
    proportions based on paired data. Statistics in Medicine 17, 2635-2650. With the 2x2 table
    (e both right, f only a, g only b, h neither), p1 = (e+f)/n, p2 = (e+g)/n, Wilson intervals
    (l1, u1), (l2, u2), and phi = C / sqrt((e+f)(g+h)(e+g)(f+h)) with C = eh-fg corrected as in the
    paper (eh-fg-n/2 if eh-fg > n/2, eh-fg if it is negative, else 0; phi = 0 if a margin is 0):
        low  = d - sqrt((p1-l1)^2 - 2 phi (p1-l1)(u2-p2) + (u2-p2)^2)
        high = d + sqrt((p2-l2)^2 - 2 phi (p2-l2)(u1-p1) + (u1-p1)^2)
    """
    e, f, g, h = _paired_table(a_correct, b_correct)
    n = e + f + g + h
    if n == 0:
        return {"difference": 0.0, "low": -1.0, "high": 1.0, "n": 0, "method": "newcombe10"}
    p1, p2 = (e + f) / n, (e + g) / n
    l1, u1 = wilson_interval(e + f, n, alpha)
    l2, u2 = wilson_interval(e + g, n, alpha)
    margins = (e + f) * (g + h) * (e + g) * (f + h)
    phi = 0.0
    if margins > 0:
        cross = e * h - f * g
        corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
        phi = corrected / math.sqrt(margins)
    d = p1 - p2
    low = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    high = d + math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    return {"difference": d, "low": max(-1.0, low), "high": min(1.0, high), "n": n, "method": "newcombe10"}


def _rejection_bounds(d: np.ndarray, alpha: float) -> np.ndarray:
    """For each discordant count D, the largest k with P(X <= k) <= alpha/2 under Binomial(D, 1/2), or -1: the
    exact two-sided McNemar test at level alpha rejects when min(b, D - b) <= k."""
    ks = np.full(d.shape, -1)
    for i, count in enumerate(d):
        cdf = binom.cdf(np.arange(count + 1), count, 0.5)
        below = np.nonzero(2 * cdf <= alpha)[0]  # two-sided exact p = min(1, 2 * P(X <= min(b, D - b)))
        ks[i] = below[-1] if below.size else -1
    return ks


def mcnemar_power(n: int, discordance: float, difference: float, alpha: float = 0.05) -> float:
    """Exact power of the two-sided exact McNemar test: n paired questions, a true discordance rate
    `discordance` (share of questions exactly one policy gets right) and a true accuracy difference
    `difference` (|difference| <= discordance)."""
    if n < 1 or not 0.0 < discordance <= 1.0:
        return 0.0
    delta = abs(difference)
    if delta > discordance + 1e-12:
        raise ValueError(f"a difference of {difference} needs at least as much discordance, got {discordance}")
    d = np.arange(n + 1)
    k = _rejection_bounds(d, alpha)
    share = min(1.0, (discordance + delta) / (2 * discordance))  # of the discordant questions, a's
    low = np.where(k >= 0, binom.cdf(k, d, share), 0.0)  # b <= k
    high = np.where(k >= 0, binom.sf(d - k - 1, d, share), 0.0)  # b >= D - k
    reject = np.minimum(1.0, low + high)
    return float(np.sum(binom.pmf(d, n, discordance) * reject))


def minimum_detectable_difference(n: int, discordance: float, power: float = 0.8, alpha: float = 0.05) -> float | None:
    """The smallest accuracy difference the exact McNemar test detects with `power` on n paired questions at
    this discordance (bisection on the exact power); None when even difference = discordance falls short."""
    if n < 1 or discordance <= 0.0 or mcnemar_power(n, discordance, discordance, alpha) < power:
        return None
    lo, hi = 0.0, discordance
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if mcnemar_power(n, discordance, mid, alpha) >= power else (mid, hi)
    return hi


def paired_questions_needed(difference: float, discordance: float, power: float = 0.8, alpha: float = 0.05,
                            limit: int = 100_000) -> int | None:  # fmt: skip
    """The fewest paired questions at which the exact McNemar test reaches `power` for this true difference and
    discordance (doubling, then bisection; exact power is not quite monotone in n, so this is the first n
    the bisection finds, within a few questions of the first crossing); None past `limit` or when the
    difference is larger than the discordance allows."""
    if difference == 0.0 or abs(difference) > discordance:
        return None
    hi = 8
    while mcnemar_power(hi, discordance, difference, alpha) < power:
        hi *= 2
        if hi > limit:
            return None
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mcnemar_power(mid, discordance, difference, alpha) >= power else (mid, hi)
    return hi


def cluster_bootstrap_difference(a_correct: Sequence[bool], b_correct: Sequence[bool], groups: Sequence[str],
                                 resamples: int = 10_000, alpha: float = 0.05, seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """Accuracy(a) - accuracy(b) with a percentile interval from resampling whole groups (domains) with
    replacement, each resample pooling the questions of the drawn groups. Deterministic for a seed."""
    if not len(a_correct) == len(b_correct) == len(groups):
        raise ValueError("a_correct, b_correct and groups need equal lengths")
    names = sorted(set(groups))
    if not names:
        return {"difference": 0.0, "low": -1.0, "high": 1.0, "groups": 0, "resamples": 0}
    index = {g: i for i, g in enumerate(names)}
    diff = np.zeros(len(names))
    count = np.zeros(len(names))
    for a, b, g in zip(a_correct, b_correct, groups):
        diff[index[g]] += int(bool(a)) - int(bool(b))
        count[index[g]] += 1
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(names), size=(resamples, len(names)))
    stats = diff[draws].sum(axis=1) / count[draws].sum(axis=1)
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return {"difference": float(diff.sum() / count.sum()), "low": float(low), "high": float(high),
            "groups": len(names), "resamples": resamples}  # fmt: skip
