"""Splits: domains (and databases) disjoint in held-out modes, n50 ⊂ n200, hardness stratification, stability."""

import random

import pytest

from sqlenv.data.splits import allocate, split_questions, stratified_sample
from sqlenv.types import HARDNESS_LEVELS, Question


def make_questions(n_db=12, per_db=80, seed=0):
    rng = random.Random(seed)
    return [
        Question(
            id=f"db{d:02d}_q{i:03d}", db_id=f"db{d:02d}", question="?", gold_sql="SELECT 1",
            hardness=rng.choice(HARDNESS_LEVELS),
        )
        for d in range(n_db)
        for i in range(per_db)
    ]


def test_by_database_is_disjoint_and_nested():
    qs = make_questions()
    s = split_questions(qs, seed=0, eval_fraction=0.25)
    assert set(s.train_databases).isdisjoint(s.eval_databases)
    assert len(s.eval_databases) == 3  # 25 % of 960 questions = 240 >= n200: three databases of 80
    assert {q.id for q in s.n50} <= {q.id for q in s.n200} <= {q.id for q in s.eval_pool}
    assert len(s.n50) == 50 and len(s.n200) == 200
    assert len(s.train) + len(s.eval_pool) == len(qs)


def test_by_question_shares_databases_but_not_questions():
    qs = make_questions()
    s = split_questions(qs, seed=0, mode="by_question", eval_fraction=0.3)
    assert {q.id for q in s.train}.isdisjoint({q.id for q in s.eval_pool})
    assert set(s.train_databases) & set(s.eval_databases)


def test_stable_under_reordering_and_seed_sensitive():
    qs = make_questions()
    a = split_questions(qs, seed=3)
    b = split_questions(list(reversed(qs)), seed=3)
    assert [q.id for q in a.n200] == [q.id for q in b.n200]
    c = split_questions(qs, seed=4)
    assert [q.id for q in a.n200] != [q.id for q in c.n200]


def test_stratification_is_proportional():
    qs = make_questions(per_db=100)
    s = split_questions(qs, seed=0)
    pool = {h: sum(q.hardness == h for q in s.eval_pool) for h in HARDNESS_LEVELS}
    got = {h: sum(q.hardness == h for q in s.n200) for h in HARDNESS_LEVELS}
    for h in HARDNESS_LEVELS:
        assert abs(got[h] - 200 * pool[h] / len(s.eval_pool)) < 1.0


@pytest.mark.parametrize(
    "counts, n, expected",
    [
        ({"easy": 10, "medium": 10}, 4, {"easy": 2, "medium": 2}),
        ({"easy": 1, "medium": 1, "hard": 1}, 2, {"easy": 1, "medium": 1, "hard": 0}),
        ({"easy": 5, "extra": 1}, 6, {"easy": 5, "extra": 1}),
        ({"easy": 7, "medium": 2, "hard": 1}, 5, {"easy": 4, "medium": 1, "hard": 0}),
    ],
)
def test_allocate(counts, n, expected):
    assert allocate(counts, n) == expected


def test_errors():
    qs = make_questions(n_db=2, per_db=10)
    with pytest.raises(ValueError, match="fewer than n200"):
        split_questions(qs, seed=0)
    with pytest.raises(ValueError, match="unknown split mode"):
        split_questions(qs, seed=0, mode="random", n50=1, n200=2)
    with pytest.raises(ValueError, match="duplicate question id"):
        split_questions(qs + qs[:1], seed=0, n50=1, n200=2)
    assert len(stratified_sample(qs, 5, 0)) == 5


def make_domain_questions(n_domains=10, variants=2, per_db=60, seed=0):
    """Synthetic-world-like questions: each domain built as several database variants."""
    rng = random.Random(seed)
    return [
        Question(
            id=f"d{d:02d}_{v}_q{i:03d}", db_id=f"d{d:02d}_{v}", question="?", gold_sql="SELECT 1",
            hardness=rng.choice(HARDNESS_LEVELS), domain=f"d{d:02d}",
        )
        for d in range(n_domains)
        for v in range(1, variants + 1)
        for i in range(per_db)
    ]


@pytest.mark.parametrize("seed", range(6))
def test_by_domain_never_puts_a_domain_on_both_sides(seed):
    qs = make_domain_questions()
    s = split_questions(qs, seed=seed, eval_fraction=0.25)  # by_domain is the default
    train = {q.domain for q in s.train}
    held = {q.domain for q in s.eval_pool}
    assert train.isdisjoint(held) and train and held
    assert s.train_domains == sorted(train) and s.eval_domains == sorted(held)
    assert {q.domain for q in s.n200} <= held
    # by_database on the same questions splits variants of a domain (the twin problem this guards)
    twins = split_questions(qs, seed=seed, mode="by_database", eval_fraction=0.25)
    assert {q.domain for q in twins.train} & {q.domain for q in twins.eval_pool}


def test_by_domain_on_databases_without_a_domain_is_by_database():
    qs = make_questions()  # no domain: each database is its own (Spider)
    a, b = split_questions(qs, seed=1), split_questions(qs, seed=1, mode="by_database")
    assert [q.id for q in a.n200] == [q.id for q in b.n200]
    assert a.eval_domains == a.eval_databases


def test_indomain_probe_is_set_aside_from_the_training_side():
    qs = make_questions()
    plain = split_questions(qs, seed=0)
    s = split_questions(qs, seed=0, indomain=120)
    probe = {q.id for q in s.indomain}
    assert len(probe) == 120 and plain.indomain == []
    assert probe <= {q.id for q in plain.train}  # unseen questions of the training domains
    assert probe.isdisjoint({q.id for q in s.train})  # never trained on
    assert {q.id for q in s.train} | probe == {q.id for q in plain.train}
    assert {q.db_id for q in s.indomain} <= set(s.train_databases)
    assert [q.id for q in s.n200] == [q.id for q in plain.n200]  # the held-out sets do not move
    # stratified like n200: every level in proportion to the training side's
    train_levels = {h: sum(q.hardness == h for q in plain.train) for h in HARDNESS_LEVELS}
    assert {h: sum(q.hardness == h for q in s.indomain) for h in HARDNESS_LEVELS} == allocate(train_levels, 120)
    # a small source keeps most of its questions for training: at most a quarter of the training side is set aside
    small = split_questions(qs, seed=0, indomain=len(plain.train))
    assert len(small.indomain) == len(plain.train) // 4 and len(small.train) == len(plain.train) - len(small.indomain)
    with pytest.raises(ValueError, match="data.indomain"):
        split_questions(qs, seed=0, indomain=-1)
