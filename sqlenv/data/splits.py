"""Train/evaluation splits and the two fixed evaluation sets, by stable hashes.

Every choice here is a function of (seed, id) through SHA-256, never of file order or of
Python's salted `hash()`: reordering a questions file, adding a database, or running on
another machine leaves an existing question's assignment unchanged.

- `by_domain` (default): whole domains are held out (`Question.group`: the synthetic world's
  domain, whose database variants differ only in naming and a few leaf tables; for Spider,
  where each database is its own domain, the database). Evaluation then measures transfer to
  subject matter and schemas the model never trained on, not to renamed copies of them.
- `by_database`: whole databases are held out; synthetic variants of one domain may land on
  both sides (an easier, same-domain transfer).
- `by_question`: questions are assigned individually (databases shared by both sides).

`eval_fraction` is the share of *questions* held out, taken as whole groups.

- `by_file` (Spider's protocol, `split_by_file`): the training questions come from their own files
  (`train_spider.json` + `train_others.json`) and the evaluation pool is the whole evaluation file
  (`dev.json`); no database may be on both sides (the loader drops such training questions).

`n200` is stratified by hardness with proportional (largest-remainder) allocation over the
evaluation pool; `n50` is drawn the same way *from inside n200* by the same hash order,
so n50 ⊂ n200 and a policy's n50 result can be read off its n200 episodes.

`indomain` (the in-domain probe, `data.indomain` questions, at most a quarter of the training side; 0: none)
is drawn the same way from the *training* side and taken out of it: unseen questions of the domains the policies trained on, where
training can show what it learned before it must generalise (held-out domains, transfer).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlenv.types import HARDNESS_LEVELS, Question, stable_hash


INDOMAIN = "indomain"  # the in-domain probe's set name (data/questions/indomain.jsonl; empty when data.indomain is 0)
INDOMAIN_MAX_SHARE = 4  # the probe takes at most 1 / this of the training questions


@dataclass(frozen=True)
class Split:
    train: list[Question]
    eval_pool: list[Question]
    n50: list[Question]
    n200: list[Question]
    train_databases: list[str]
    eval_databases: list[str]
    train_domains: list[str]
    eval_domains: list[str]
    indomain: list[Question] = field(default_factory=list)  # set aside from the training side, never trained on


def split_questions(
    questions: Sequence[Question],
    *,
    seed: int,
    mode: str = "by_domain",
    eval_fraction: float = 0.25,
    n50: int = 50,
    n200: int = 200,
    indomain: int = 0,
) -> Split:
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
    if not 0 < n50 <= n200:
        raise ValueError(f"need 0 < n50 <= n200, got n50={n50}, n200={n200}")
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        dup = next(i for i, c in Counter(ids).items() if c > 1)
        raise ValueError(f"duplicate question id {dup!r}")

    if mode == "by_file":
        raise ValueError("the by_file split takes its training questions from their own files: use split_by_file")
    if mode in ("by_domain", "by_database"):
        # Whole groups in stable-hash order go to evaluation until they hold at least
        # eval_fraction of the questions *and* at least n200 of them (group sizes are
        # skewed — in Spider one database can hold a fifth of the questions — so a share of
        # groups would not control the pool size). At least one group stays in train.
        key = (lambda q: q.group) if mode == "by_domain" else (lambda q: q.db_id)
        per_group = Counter(key(q) for q in questions)
        groups = sorted(per_group, key=lambda g: (stable_hash(seed, "db:" + g), g))
        if len(groups) < 2:
            what = "domains" if mode == "by_domain" else "databases"
            raise ValueError(f"{mode} split needs at least 2 {what}, got {groups}")
        target = max(eval_fraction * len(questions), n200)
        held_out: set[str] = set()
        held = 0
        for group in groups[:-1]:
            if held >= target:
                break
            held_out.add(group)
            held += per_group[group]
        is_eval = lambda q: key(q) in held_out  # noqa: E731
    elif mode == "by_question":
        cut = int(eval_fraction * 2**64)
        is_eval = lambda q: stable_hash(seed, "q:" + q.id) < cut  # noqa: E731
    else:
        raise ValueError(f"unknown split mode {mode!r} (expected by_domain, by_database or by_question)")

    train = [q for q in questions if not is_eval(q)]
    pool = [q for q in questions if is_eval(q)]
    return _split(train, pool, seed, n50, n200, indomain)


def split_by_file(
    train: Sequence[Question], pool: Sequence[Question], *, seed: int, n50: int = 50, n200: int = 200, indomain: int = 0
) -> Split:
    """Spider's protocol: `train` from the training files, the evaluation sets drawn from `pool` (the evaluation
    file). ValueError when an id or a database is on both sides."""
    if not 0 < n50 <= n200:
        raise ValueError(f"need 0 < n50 <= n200, got n50={n50}, n200={n200}")
    shared_ids = {q.id for q in train} & {q.id for q in pool}
    shared_dbs = {q.db_id for q in train} & {q.db_id for q in pool}
    if shared_ids or shared_dbs:
        raise ValueError(f"training and evaluation files share question ids {sorted(shared_ids)[:3]} "
                         f"or databases {sorted(shared_dbs)[:3]}")  # fmt: skip
    return _split(list(train), list(pool), seed, n50, n200, indomain)


def _split(train: list[Question], pool: list[Question], seed: int, n50: int, n200: int, indomain: int = 0) -> Split:
    train = sorted(train, key=lambda q: q.id)
    pool = sorted(pool, key=lambda q: q.id)
    if indomain < 0:
        raise ValueError(f"data.indomain must be >= 0, got {indomain}")
    # never more than a quarter of the training side (a small source, e.g. a dozen Spider databases, keeps most of
    # its questions for training); the size taken is the probe's length, recorded by `prepare`
    probe = stratified_sample(train, min(indomain, len(train) // INDOMAIN_MAX_SHARE), seed) if indomain else []
    if probe:
        aside = {q.id for q in probe}
        train = [q for q in train if q.id not in aside]
    if len(pool) < n200:
        raise ValueError(
            f"evaluation pool has {len(pool)} questions, fewer than n200={n200}; "
            "raise data.eval_fraction or generate more questions"
        )
    set200 = stratified_sample(pool, n200, seed)
    set50 = stratified_sample(set200, n50, seed)
    return Split(
        train=train,
        eval_pool=pool,
        n50=set50,
        n200=set200,
        train_databases=sorted({q.db_id for q in train}),
        eval_databases=sorted({q.db_id for q in pool}),
        train_domains=sorted({q.group for q in train}),
        eval_domains=sorted({q.group for q in pool}),
        indomain=probe,
    )


def allocate(counts: dict[str, int], n: int) -> dict[str, int]:
    """Proportional allocation of n over strata with the largest-remainder method.

    Ties in the remainders break by the fixed hardness order, so allocation is deterministic.
    """
    total = sum(counts.values())
    if n > total:
        raise ValueError(f"cannot draw {n} from {total}")
    order = [h for h in HARDNESS_LEVELS if h in counts] + sorted(set(counts) - set(HARDNESS_LEVELS))
    exact = {h: n * counts[h] / total for h in order}
    alloc = {h: min(counts[h], int(exact[h])) for h in order}
    remaining = n - sum(alloc.values())
    by_remainder = sorted(order, key=lambda h: (-(exact[h] - int(exact[h])), order.index(h)))
    while remaining > 0:
        for h in by_remainder:
            if remaining and alloc[h] < counts[h]:
                alloc[h] += 1
                remaining -= 1
    return alloc


def stratified_sample(questions: Sequence[Question], n: int, seed: int) -> list[Question]:
    """n questions, stratified by hardness, lowest stable hash first within each stratum.

    Because selection within a stratum is "the k lowest hashes", sampling a subset from a
    sample gives the same members as sampling from the full pool would for that stratum
    size, which makes n50 a subset of n200. Returned in id order.
    """
    strata: dict[str, list[Question]] = {}
    for q in questions:
        strata.setdefault(q.hardness, []).append(q)
    alloc = allocate({h: len(qs) for h, qs in strata.items()}, n)
    chosen: list[Question] = []
    for h, qs in strata.items():
        ranked = sorted(qs, key=lambda q: (stable_hash(seed, "pick:" + q.id), q.id))
        chosen.extend(ranked[: alloc[h]])
    return sorted(chosen, key=lambda q: q.id)
