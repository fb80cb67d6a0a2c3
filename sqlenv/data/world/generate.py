"""Per-database question generation: sample templates, gate by the oracle, balance levels.

The loop aims at a hardness mix (`LEVEL_SHARES`) measured by the *labeller*, not by the
templates' intentions: it keeps a quota per level, asks for a level that is still short,
and picks a template by how often that template has actually landed on that level so far
in this database (a prior from the template's intended level seeds the estimate).
Candidates over a full quota are kept aside and fill any level that stays short, so a
database that cannot produce, say, enough "extra" questions still yields its quota.

Everything random comes from one `random.Random` seeded by the database seed, and the
questions keep generation order, so the same seed gives the same question list.
Duplicates (same SQL or same text within a database) are rejected, not re-phrased.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from sqlenv.data.world import templates_join, templates_nested, templates_single  # noqa: F401  (register templates)
from sqlenv.data.world.checks import Accepted, check
from sqlenv.data.world.schema import DbView
from sqlenv.data.world.templates import TEMPLATES, Candidate, Ctx, Template
from sqlenv.env.sandbox import Sandbox
from sqlenv.types import HARDNESS_LEVELS, Question

LEVEL_SHARES = {"easy": 0.25, "medium": 0.30, "hard": 0.25, "extra": 0.20}
EMPTY_SHARE = 0.03  # empty-by-design questions, a few percent
ATTEMPTS_PER_QUESTION = 15


@dataclass
class DbQuestions:
    questions: list[Question]
    rejected: Counter = field(default_factory=Counter)
    inapplicable: int = 0  # template draws the database had no material for (not rejections)
    empty_by_design: int = 0
    attempts: int = 0


def quotas(n: int, shares: dict[str, float]) -> dict[str, int]:
    """Integer quotas summing to n (largest remainder), in HARDNESS_LEVELS order."""
    total = sum(shares.values())
    raw = {lvl: n * shares.get(lvl, 0.0) / total for lvl in HARDNESS_LEVELS}
    out = {lvl: int(v) for lvl, v in raw.items()}
    for lvl in sorted(HARDNESS_LEVELS, key=lambda x: out[x] - raw[x])[: n - sum(out.values())]:
        out[lvl] += 1
    return out


def _pick_template(rng: random.Random, want: str, landed: dict[str, Counter]) -> Template:
    weights = []
    for t in TEMPLATES:
        seen = landed[t.name]
        prior = 2.0 if t.level == want else 0.2
        weights.append((seen[want] + prior) / (sum(seen.values()) + 2.2))
    return rng.choices(TEMPLATES, weights=weights)[0]


def generate_questions(db: DbView, db_path: Path, *, n: int, seed: int, max_rows: int = 20,
                       shares: dict[str, float] | None = None) -> DbQuestions:
    """Up to `n` oracle-checked questions over one written database."""
    rng = random.Random(f"{seed}:{db.db_id}:questions")
    quota = quotas(n, shares or LEVEL_SHARES)
    empty_budget = round(n * EMPTY_SHARE)
    kept: dict[str, list[tuple[int, Candidate, Accepted]]] = {lvl: [] for lvl in HARDNESS_LEVELS}
    spare: list[tuple[int, Candidate, Accepted]] = []
    landed: dict[str, Counter] = defaultdict(Counter)
    seen_sql: set[str] = set()
    seen_text: set[str] = set()
    out = DbQuestions([])
    empties = 0
    with Sandbox(db_path) as sandbox:
        while out.attempts < n * ATTEMPTS_PER_QUESTION:
            short = {lvl: quota[lvl] - len(kept[lvl]) for lvl in HARDNESS_LEVELS if len(kept[lvl]) < quota[lvl]}
            if not short:
                break
            out.attempts += 1
            want = rng.choices(list(short), weights=list(short.values()))[0]
            tpl = _pick_template(rng, want, landed)
            want_empty = tpl.empty and empties < empty_budget and rng.random() < 0.3
            cand = tpl.fn(Ctx(db, rng, want_empty))
            if cand is None:
                out.inapplicable += 1
                continue
            if cand.sql in seen_sql or cand.text in seen_text:
                out.rejected["duplicate"] += 1
                continue
            seen_sql.add(cand.sql)
            seen_text.add(cand.text)
            result = check(sandbox, cand.sql, empty_by_design=cand.empty, max_rows=max_rows)
            if isinstance(result, str):
                out.rejected[result] += 1
                continue
            landed[tpl.name][result.hardness] += 1
            item = (out.attempts, cand, result)
            if len(kept[result.hardness]) < quota[result.hardness]:
                kept[result.hardness].append(item)
                empties += cand.empty
            else:
                spare.append(item)
    # Levels that stayed short are made up from the spares, oldest first.
    missing = n - sum(len(v) for v in kept.values())
    chosen = [item for items in kept.values() for item in items] + spare[:max(missing, 0)]
    chosen.sort(key=lambda item: item[0])
    for i, (_, cand, acc) in enumerate(chosen):
        out.questions.append(Question(
            id=f"{db.db_id}_q{i:04d}", db_id=db.db_id, question=cand.text, gold_sql=cand.sql,
            gold_answer=acc.gold_answer, hardness=acc.hardness, tables=acc.tables, ordered=acc.ordered,
            source="synthetic", domain=db.domain,
        ))
        out.empty_by_design += cand.empty
    return out
