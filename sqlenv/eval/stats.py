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

What it doesn't do: no multiple-comparison correction (report all pairs, read p-values accordingly).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

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
