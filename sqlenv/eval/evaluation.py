"""Evaluation metrics over finished episodes: per policy and question set, by hardness, and paired.

Pure functions over `EpisodeRecord`s (no model, no I/O), so the evaluate stage computes them from
fresh rollouts and the report stage can recompute them from saved samples. Correctness is whatever the
one verifier decided inside the environment; nothing here re-judges an answer.

Definitions (per set of records):
- `accuracy`: correct / n, with a Wilson 95 % interval (`accuracy_low`, `accuracy_high`): the value verifier's
  verdicts in the value answer mode, execution accuracy (EX) in the sql answer mode.
- `value_accuracy` (sql answer mode only, with its interval): episodes whose submitted SQL's rows the value
  verifier accepts / n — the value reading of the same answers, so the two modes' numbers can be placed.
- `parse_rate` (strict) and `lenient_parse_rate`: assistant turns taken while the episode ran in which
  TRL's parser / the lenient parser (`sqlenv.env.tool_calls`) reads a tool call, over those turns, pooled
  over episodes. Both are computed whichever parser played. None when no such turn exists.
- `valid_call_rate`: calls that were a valid call of one of the four tools / calls made while the
  episode ran (`steps`, `parse_failures`). None when no call was made.
- `answered_rate`; `budget_exhaustion_rate`: share of episodes whose step budget was used up;
  `end_reasons`: episodes per reason they stopped (`sqlenv.eval.rollout`).
- `calls_after_answer_mean` over all episodes; `calls_after_answer_rate`: share of *answered* episodes
  that kept calling tools after the episode was over (the learned stop failing). None if none answered.
- `reward_mean` and `reward_components` (mean of each named component), `steps_mean`, `tokens_mean`.
- `failures`: why episodes ended as they did (`sqlenv.failures`): `n`, episodes per `outcomes` (right, wrong
  answer, unanswered by step budget / token budget / otherwise), per `habits` (loop, repeated failure, missing
  name, empty answered, gold in last result) and `unanswered` — each record's own diagnosis, else read off it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlenv.eval.stats import mcnemar_exact, paired_difference, wilson_interval
from sqlenv.failures import summarise_records
from sqlenv.types import HARDNESS_LEVELS, EpisodeRecord


def _mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def _metrics(records: Sequence[EpisodeRecord], alpha: float) -> dict[str, Any]:
    n = len(records)
    correct = sum(1 for r in records if r.correct)
    low, high = wilson_interval(correct, n, alpha)
    calls = sum(r.steps for r in records)
    failures = sum(r.parse_failures for r in records)
    turns = sum(r.turns for r in records)
    answered = [r for r in records if r.answered]
    components = sorted({name for r in records for name in r.reward_components})
    return {
        "n": n,
        "correct": correct,
        "accuracy": correct / n if n else None,
        "accuracy_low": low,
        "accuracy_high": high,
        "answered_rate": len(answered) / n if n else None,
        "parse_rate": sum(r.strict_call_turns for r in records) / turns if turns else None,
        "lenient_parse_rate": sum(r.lenient_call_turns for r in records) / turns if turns else None,
        "valid_call_rate": (calls - failures) / calls if calls else None,
        "parse_failures_mean": _mean([r.parse_failures for r in records]),
        "steps_mean": _mean([r.steps for r in records]),
        "budget_exhaustion_rate": _mean([1.0 if r.budget_exhausted else 0.0 for r in records]),
        "calls_after_answer_mean": _mean([r.calls_after_answer for r in records]),
        "calls_after_answer_rate": _mean([1.0 if r.calls_after_answer else 0.0 for r in answered]),
        "reward_mean": _mean([r.reward for r in records]),
        "reward_components": {c: _mean([r.reward_components.get(c, 0.0) for r in records]) for c in components},
        "tokens_mean": _mean([r.tokens for r in records]),
        "end_reasons": dict(sorted(Counter(r.end_reason or "unknown" for r in records).items())),
        "failures": summarise_records(records),
        **_value_accuracy(records, alpha),
    }


def _value_accuracy(records: Sequence[EpisodeRecord], alpha: float) -> dict[str, Any]:
    if not any(r.value_correct is not None for r in records):
        return {}  # value answer mode: accuracy already is the value verifier's
    n, right = len(records), sum(1 for r in records if r.value_correct)
    low, high = wilson_interval(right, n, alpha)
    return {"value_accuracy": right / n, "value_accuracy_low": low, "value_accuracy_high": high}


def _hardness_order(levels: Iterable[str]) -> list[str]:
    known = [h for h in HARDNESS_LEVELS if h in levels]
    return known + sorted(set(levels) - set(HARDNESS_LEVELS))


def episode_metrics(records: Sequence[EpisodeRecord], alpha: float = 0.05) -> dict[str, Any]:
    """Metrics of one policy on one question set, overall and under `by_hardness` (levels present only)."""
    out = _metrics(records, alpha)
    groups: dict[str, list[EpisodeRecord]] = {}
    for r in records:
        groups.setdefault(r.hardness, []).append(r)
    out["by_hardness"] = {h: _metrics(groups[h], alpha) for h in _hardness_order(groups)}
    return out


def subset(records: Sequence[EpisodeRecord], question_ids: Sequence[str]) -> list[EpisodeRecord]:
    """The records of `question_ids`, in that order (e.g. n50 out of an n200 run: n50 is a subset of n200).

    Raises ValueError if an id has no record or appears twice, in the ids or among the records.
    """
    by_id = _by_question(records, "records")
    if len(set(question_ids)) != len(question_ids):
        raise ValueError("question_ids contains duplicates")
    missing = [q for q in question_ids if q not in by_id]
    if missing:
        raise ValueError(f"{len(missing)} question id(s) have no record, e.g. {missing[:5]}")
    return [by_id[q] for q in question_ids]


def _by_question(records: Sequence[EpisodeRecord], what: str) -> dict[str, EpisodeRecord]:
    by_id: dict[str, EpisodeRecord] = {}
    for r in records:
        if r.question_id in by_id:
            raise ValueError(f"{what}: question {r.question_id!r} appears twice")
        by_id[r.question_id] = r
    return by_id


def paired_comparisons(results: Mapping[str, Sequence[EpisodeRecord]], alpha: float = 0.05) -> list[dict[str, Any]]:
    """Every pair of policies (in the mapping's order, a before b) on the same questions.

    Each row: both accuracies, `difference` = accuracy(a) - accuracy(b) with Newcombe's paired interval,
    the discordant counts and the exact McNemar p-value. Raises ValueError unless every policy has
    exactly one record per question of the same question set.
    """
    indexed = {policy: _by_question(records, policy) for policy, records in results.items()}
    rows = []
    for (name_a, a), (name_b, b) in itertools.combinations(indexed.items(), 2):
        if a.keys() != b.keys():
            only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
            raise ValueError(
                f"{name_a} and {name_b} were evaluated on different questions: "
                f"{len(only_a)} only in {name_a} (e.g. {only_a[:3]}), "
                f"{len(only_b)} only in {name_b} (e.g. {only_b[:3]})"
            )
        ids = sorted(a)
        a_correct = [a[q].correct for q in ids]
        b_correct = [b[q].correct for q in ids]
        b_only, a_only, p_value = mcnemar_exact(a_correct, b_correct)
        diff = paired_difference(a_correct, b_correct, alpha)
        n = len(ids)
        rows.append(
            {
                "a": name_a,
                "b": name_b,
                "n": n,
                "accuracy_a": sum(a_correct) / n if n else None,
                "accuracy_b": sum(b_correct) / n if n else None,
                "difference": diff["difference"],
                "difference_low": diff["low"],
                "difference_high": diff["high"],
                "interval_method": diff["method"],
                "only_a_correct": a_only,
                "only_b_correct": b_only,
                "mcnemar_p": p_value,
            }
        )
    return rows
