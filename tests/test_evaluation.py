"""Guards the evaluation metrics: accuracy intervals, strict/lenient parse rates and valid calls, hardness split, paired rows, subsets."""

import json

import pytest

from sqlenv.eval.evaluation import episode_metrics, paired_comparisons, subset
from sqlenv.types import EpisodeRecord


def rec(qid, correct, *, hardness="easy", answered=None, steps=3, parse_failures=0, after=0, reward=None, tokens=10,
        turns=None, strict=None, lenient=None, end="stopped"):
    answered = correct if answered is None else answered
    reward = (1.0 if correct else 0.0) if reward is None else reward
    turns = steps if turns is None else turns
    strict = turns if strict is None else strict
    return EpisodeRecord(
        question_id=qid, db_id="db", hardness=hardness, answered=answered, correct=correct, steps=steps,
        parse_failures=parse_failures, calls_after_answer=after, budget_exhausted=not answered, reward=reward,
        reward_components={"correctness": 1.0 if correct else 0.0, "operational": -0.01 * steps}, tokens=tokens,
        turns=turns, strict_call_turns=strict, lenient_call_turns=strict if lenient is None else lenient, end_reason=end,
    )


def test_accuracy_with_wilson_interval_10_of_50():
    records = [rec(f"q{i}", i < 10) for i in range(50)]
    m = episode_metrics(records)
    assert m["n"] == 50 and m["correct"] == 10 and m["accuracy"] == pytest.approx(0.2)
    assert (m["accuracy_low"], m["accuracy_high"]) == pytest.approx((0.1124, 0.3304), abs=5e-5)
    assert m["reward_components"]["correctness"] == pytest.approx(0.2)
    assert m["reward_components"]["operational"] == pytest.approx(-0.03)
    assert m["budget_exhaustion_rate"] == pytest.approx(0.8)


def test_parse_rates_over_turns_and_valid_calls_over_calls_pooled():
    records = [
        rec("a", True, steps=4, parse_failures=0),
        rec("b", False, steps=6, parse_failures=3, turns=7, strict=6, end="no tool call"),  # its last turn had no call
        rec("c", False, answered=True, steps=10, parse_failures=1, after=2, turns=10, strict=0, lenient=10),
    ]
    m = episode_metrics(records)
    assert m["parse_rate"] == pytest.approx((4 + 6 + 0) / 21)
    assert m["lenient_parse_rate"] == pytest.approx((4 + 6 + 10) / 21)
    assert m["valid_call_rate"] == pytest.approx((20 - 4) / 20)
    assert m["end_reasons"] == {"no tool call": 1, "stopped": 2}
    assert m["parse_failures_mean"] == pytest.approx(4 / 3)
    assert m["steps_mean"] == pytest.approx(20 / 3)
    assert m["answered_rate"] == pytest.approx(2 / 3)
    assert m["calls_after_answer_mean"] == pytest.approx(2 / 3)
    assert m["calls_after_answer_rate"] == pytest.approx(1 / 2)  # of the two answered episodes
    assert m["tokens_mean"] == 10
    nothing = episode_metrics([rec("z", False, steps=0)])
    assert nothing["parse_rate"] is None and nothing["valid_call_rate"] is None
    assert nothing["calls_after_answer_rate"] is None


def test_by_hardness_in_canonical_order():
    records = [rec("1", True, hardness="hard"), rec("2", False, hardness="easy"), rec("3", True, hardness="easy"),
               rec("4", True, hardness="odd")]
    m = episode_metrics(records)
    assert list(m["by_hardness"]) == ["easy", "hard", "odd"]
    assert m["by_hardness"]["easy"]["accuracy"] == 0.5 and m["by_hardness"]["easy"]["n"] == 2
    assert m["by_hardness"]["hard"]["accuracy_low"] == pytest.approx(0.2065, abs=5e-5)  # Wilson 1/1
    empty = episode_metrics([])
    assert empty["n"] == 0 and empty["accuracy"] is None and empty["by_hardness"] == {}
    json.dumps(m)  # metrics.json must be writable as it is


def test_paired_comparisons_match_by_question_id():
    # Table (both, only a, only b, neither) = (36, 12, 2, 0): Newcombe's example; McNemar exact p by hand.
    ids = [f"q{i:02d}" for i in range(50)]
    a_correct = [True] * 48 + [False] * 2
    b_correct = [True] * 36 + [False] * 12 + [True] * 2
    results = {
        "sft": [rec(q, c) for q, c in zip(ids, a_correct)],
        "base": [rec(q, c) for q, c in reversed(list(zip(ids, b_correct)))],  # order must not matter
        "random": [rec(q, False) for q in ids],
    }
    rows = paired_comparisons(results)
    assert [(r["a"], r["b"]) for r in rows] == [("sft", "base"), ("sft", "random"), ("base", "random")]
    first = rows[0]
    assert first["accuracy_a"] == pytest.approx(48 / 50) and first["accuracy_b"] == pytest.approx(38 / 50)
    assert first["difference"] == pytest.approx(0.2)
    assert (first["difference_low"], first["difference_high"]) == pytest.approx((0.0569, 0.3404), abs=5e-5)
    assert (first["only_a_correct"], first["only_b_correct"]) == (12, 2)
    assert first["mcnemar_p"] == pytest.approx(2 * (1 + 14 + 91) / 2**14)
    json.dumps(rows)


def test_paired_comparisons_refuse_different_question_sets():
    with pytest.raises(ValueError, match="different questions"):
        paired_comparisons({"a": [rec("1", True), rec("2", True)], "b": [rec("1", True), rec("3", True)]})
    with pytest.raises(ValueError, match="twice"):
        paired_comparisons({"a": [rec("1", True), rec("1", False)], "b": [rec("1", True)]})


def test_subset_takes_n50_out_of_n200():
    records = [rec(f"q{i}", i % 3 == 0) for i in range(200)]
    ids = [f"q{i}" for i in range(0, 200, 4)]
    small = subset(records, ids)
    assert [r.question_id for r in small] == ids
    assert episode_metrics(small)["n"] == 50
    with pytest.raises(ValueError, match="no record"):
        subset(records, ["q1", "nope"])
    with pytest.raises(ValueError, match="duplicates"):
        subset(records, ["q1", "q1"])
